"""`shardq count`, `shardq cat` and `shardq tfrecord-write` on text,
TFRecord (plain and compressed) and SQLite items; corrupt and missing input;
and the planner's handling of compressed files and tables through
`shardq create`."""
import gzip
import json
import os
import re
import sqlite3
import zlib

import pytest

from cli_helpers import run, shardq_bin

LINES = ["first line", "", "tab\there", "ünïcode", "x" * 5000, "last"]


def write_text(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def tfrecord_from_lines(tmp_path, lines, name="data.tfrecord"):
    text = write_text(tmp_path / (name + ".txt"), lines)
    out = str(tmp_path / name)
    proc = run("tfrecord-write", text, out)
    assert f"wrote {len(lines)} records" in proc.stdout
    return out


def count_of(*items_and_flags):
    out = run("count", *items_and_flags).stdout.splitlines()
    return {line.split("\t", 1)[1]: int(line.split("\t", 1)[0]) for line in out}


def framed_offsets(lines):
    offsets, offset = [], 0
    for line in lines:
        offsets.append(offset)
        offset += 16 + len(line.encode())
    return offsets, offset


def test_tfrecord_write_then_cat_returns_every_line(tmp_path):
    path = tfrecord_from_lines(tmp_path, LINES)
    out = run("cat", path).stdout
    assert out == "".join(line + "\n" for line in LINES)
    lengths = run("cat", "--format", "len", path).stdout.split()
    assert lengths == [str(len(line.encode())) for line in LINES]
    hexes = run("cat", "--format", "hex", path).stdout.split("\n")[:-1]
    assert hexes == [line.encode().hex() for line in LINES]


def test_cat_keys_name_item_and_offset(tmp_path):
    path = tfrecord_from_lines(tmp_path, LINES)
    keys = [line.split("\t")[0] for line in
            run("cat", "--keys", "--format", "len", path).stdout.splitlines()]
    offsets, _ = framed_offsets(LINES)
    assert keys == [f"{path}:{offset}" for offset in offsets]


def test_count_prints_each_item_and_the_total(tmp_path):
    tf = tfrecord_from_lines(tmp_path, LINES)
    text = write_text(tmp_path / "plain.txt", ["a", "b", "c"])
    db = str(tmp_path / "t.db")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE clicks(user TEXT, n INTEGER)")
        conn.executemany("INSERT INTO clicks VALUES(?, ?)", [(f"u{i}", i) for i in range(25)])
    table = f"sqlite:{db}?table=clicks"
    counts = count_of(tf, text, table)
    assert counts == {tf: len(LINES), text: 3, table: 25, "total": len(LINES) + 28}


def test_byte_range_slices_of_a_tfrecord_file_add_up(tmp_path):
    lines = [f"record {i} " + "y" * (i * 37 % 300) for i in range(300)]
    path = tfrecord_from_lines(tmp_path, lines)
    _, size = framed_offsets(lines)
    for k in (1, 3, 7, 50):
        items = [f"{path}?start={size * j // k}&end={size * (j + 1) // k}" for j in range(k)]
        assert count_of(*items)["total"] == len(lines)
        seen = []
        for item in items:
            seen += run("cat", item).stdout.splitlines()
        assert seen == lines


def corrupt(path, offset):
    data = bytearray(open(path, "rb").read())
    data[offset] ^= 0x01
    open(path, "wb").write(bytes(data))


def test_corrupt_record_fails_with_file_and_offset_unless_skipped(tmp_path):
    lines = [f"record number {i}" for i in range(10)]
    path = tfrecord_from_lines(tmp_path, lines)
    offsets, _ = framed_offsets(lines)
    corrupt(path, offsets[4] + 12 + 3)  # inside the data of record 4

    failed = run("count", path, check=False)
    assert failed.returncode != 0
    assert "DATA_LOSS" in failed.stderr
    assert path in failed.stderr
    assert f"byte offset {offsets[4]}" in failed.stderr

    cat = run("cat", path, check=False)
    assert cat.returncode != 0
    assert cat.stdout.splitlines() == lines[:4]  # what came before the damage
    assert f"byte offset {offsets[4]}" in cat.stderr

    skipped = run("count", "--on-corrupt", "skip", path)
    assert count_of("--on-corrupt", "skip", path)[path] == 9
    assert re.search(r"skipped 1 corrupt region\(s\), \d+ bytes, in '" + re.escape(path),
                     skipped.stderr)
    assert run("cat", "--on-corrupt", "skip", path).stdout.splitlines() == \
        lines[:4] + lines[5:]


def test_missing_and_bad_items_exit_non_zero_naming_them(tmp_path):
    missing = str(tmp_path / "nope.tfrecord")
    proc = run("count", missing, check=False)
    assert proc.returncode != 0 and "NOT_FOUND" in proc.stderr and missing in proc.stderr

    db = str(tmp_path / "t.db")
    sqlite3.connect(db).execute("CREATE TABLE present(v)").connection.commit()
    proc = run("count", f"sqlite:{db}?table=absent", check=False)
    assert proc.returncode != 0 and "NOT_FOUND" in proc.stderr
    assert db in proc.stderr and "absent" in proc.stderr

    proc = run("count", f"sqlite:{tmp_path}/missing.db?table=t", check=False)
    assert proc.returncode != 0 and f"{tmp_path}/missing.db" in proc.stderr


def test_gzip_and_zlib_files_round_trip(tmp_path):
    text = write_text(tmp_path / "in.txt", LINES)
    plain = str(tmp_path / "out.tfrecord")
    gz = str(tmp_path / "out.tfrecord.gz")
    zz = str(tmp_path / "out.tfrecord.zz")
    run("tfrecord-write", text, plain)
    assert "(gzip)" in run("tfrecord-write", text, gz).stdout
    assert "(zlib)" in run("tfrecord-write", text, zz).stdout
    plain_bytes = open(plain, "rb").read()
    assert gzip.decompress(open(gz, "rb").read()) == plain_bytes
    assert zlib.decompress(open(zz, "rb").read()) == plain_bytes
    for path in (gz, zz):
        assert run("cat", path).stdout == "".join(line + "\n" for line in LINES)

    # A gzip file written by Python, under a name that does not say so.
    other = tmp_path / "python-written.tfrecords"
    other.write_bytes(gzip.compress(plain_bytes))
    assert count_of(str(other))[str(other)] == len(LINES)


def test_corrupt_gzip_is_data_loss_naming_the_file(tmp_path):
    lines = [f"line {i} " + "z" * 100 for i in range(2000)]
    gz = str(tmp_path / "big.tfrecord.gz")
    run("tfrecord-write", write_text(tmp_path / "in.txt", lines), gz)
    data = open(gz, "rb").read()
    open(gz, "wb").write(data[: len(data) // 2])
    proc = run("count", gz, check=False)
    assert proc.returncode != 0
    assert "DATA_LOSS" in proc.stderr and gz in proc.stderr and "gzip" in proc.stderr


def test_cutting_a_compressed_file_is_refused(tmp_path):
    gz = str(tmp_path / "x.tfrecord.gz")
    run("tfrecord-write", write_text(tmp_path / "in.txt", LINES), gz)
    proc = run("count", f"{gz}?start=10&end=20", check=False)
    assert proc.returncode == 2  # INVALID_ARGUMENT
    assert gz in proc.stderr and "cannot be cut" in proc.stderr


def test_table_rows_are_typed_and_keyed_by_rowid(tmp_path):
    db = str(tmp_path / "typed.db")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t(i INTEGER, r REAL, s TEXT, b BLOB, n)")
        conn.execute("INSERT INTO t(rowid, i, r, s, b, n) VALUES(7, -3, 0.5, 'hi', x'00ff', NULL)")
        conn.execute("INSERT INTO t(rowid, i, r, s, b, n) VALUES(900, 4, 1e300, '', x'', 'x')")
    item = f"sqlite:{db}?table=t"
    out = run("cat", "--keys", item).stdout.splitlines()
    assert out == [f"{item}:7\t-3\t0.5\thi\tx'00ff'\tNULL",
                   f"{item}:900\t4\t1e+300\t\tx''\tx"]
    assert run("cat", f"{item}&start=1&end=2").stdout.startswith("4\t")


def take_all(address, name, items):
    return [run("take", "--address", address, "--name", name,
                "--worker", f"w{i}").stdout.strip() for i in range(items)]


def items_of(created):
    return int(re.search(r"items=(\d+)", created.stdout).group(1))


@pytest.mark.parametrize("slices", [1, 4, 13])
def test_create_gives_a_compressed_file_one_slice_and_says_so(coordinator, tmp_path, slices):
    lines = [f"record {i}" for i in range(500)]
    text = write_text(tmp_path / "in.txt", lines)
    gz = str(tmp_path / "c.tfrecord.gz")
    plain = str(tmp_path / "p.tfrecord")
    run("tfrecord-write", text, gz)
    run("tfrecord-write", text, plain)
    name = f"q{slices}"
    created = run("create", "--address", coordinator.address, "--name", name,
                  "--slices", str(slices), "--no-shuffle", gz, plain)
    assert re.search(rf"\[warning\] '{re.escape(gz)}' is gzip-compressed and cannot be cut",
                     created.stderr)
    taken = take_all(coordinator.address, name, items_of(created))
    assert len(taken) == max(slices, 2)
    # One whole item, no range (issue 15 item 1: it was "?start=0&end=1").
    assert [t for t in taken if t.startswith(gz)] == [gz]
    counts = count_of(*taken)
    assert counts[gz] == 500
    assert counts["total"] == 1000
    # Items of older plans still read whole.
    assert count_of(f"{gz}?start=0&end=1")[f"{gz}?start=0&end=1"] == 500


@pytest.mark.parametrize("slices", [1, 7, 40])
def test_create_cuts_a_table_with_sparse_rowids_into_near_equal_row_ranges(
        coordinator, tmp_path, slices):
    db = str(tmp_path / "rows.db")
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t(v)")
        conn.executemany("INSERT INTO t(rowid, v) VALUES(?, ?)",
                         [(i * i * 1000 - 70000, i) for i in range(300)])
    table = f"sqlite:{db}?table=t"
    name = f"t{slices}"
    created = run("create", "--address", coordinator.address, "--name", name,
                  "--slices", str(slices), "--no-shuffle", table)
    taken = take_all(coordinator.address, name, items_of(created))
    assert len(taken) == slices
    rows = []
    for item in taken:
        rows += [int(line) for line in run("cat", item).stdout.split()]
    assert rows == list(range(300))
    sizes = list(count_of(*taken).values())[:-1]
    assert max(sizes) - min(sizes) <= 1, sizes


def test_type_flag_overrides_the_name(tmp_path):
    path = tfrecord_from_lines(tmp_path, LINES)
    renamed = tmp_path / "records.bin"
    renamed.write_bytes(open(path, "rb").read())
    assert count_of("--type", "tfrecord", str(renamed))[str(renamed)] == len(LINES)
    text = write_text(tmp_path / "lines.tfrecord", ["a", "b"])
    assert count_of("--type", "text", text)[text] == 2


def test_tfrecord_write_of_a_missing_input_creates_nothing(tmp_path):
    out = tmp_path / "out.tfrecord"
    proc = run("tfrecord-write", str(tmp_path / "missing.txt"), str(out), check=False)
    assert proc.returncode != 0
    assert "NOT_FOUND" in proc.stderr and "missing.txt" in proc.stderr
    assert not out.exists()


# Issue 15 item 4: a file changed after planning is refused, not read short.

def status_of(address, name):
    out = run("status", "--address", address, "--name", name, "--json").stdout
    return json.loads(out)["queues"][0]


def test_count_refuses_a_range_past_the_end_of_a_shorter_file(tmp_path):
    lines = [f"record {i:03d}" for i in range(100)]
    tf = tfrecord_from_lines(tmp_path, lines)
    size = os.path.getsize(tf)
    for item in (f"{tf}?start=2000&end=200000", f"{tf}?start=0&end={size + 1}"):
        proc = run("count", item, check=False)
        assert proc.returncode == 1, proc.stdout
        assert "FAILED_PRECONDITION" in proc.stderr
        assert f"'{tf}' changed since the plan was made: size {size}, item ends at" \
            in proc.stderr
        assert "total" not in proc.stdout
    text = write_text(tmp_path / "lines.txt", lines)
    proc = run("count", f"{text}?start=0&end=999999", check=False)
    assert proc.returncode == 1
    assert f"'{text}' changed since the plan was made: size {os.path.getsize(text)}, " \
        "item ends at 999999" in proc.stderr


def test_a_file_truncated_after_planning_fails_the_worker_command_and_is_not_completed(
        coordinator, tmp_path):
    lines = [f"record {i:03d}" for i in range(100)]
    tf = tfrecord_from_lines(tmp_path, lines)
    created = run("create", "--address", coordinator.address, "--name", "cut",
                  "--slices", "1", tf)
    assert items_of(created) == 1
    record_bytes = 16 + len(lines[0])
    os.truncate(tf, 40 * record_bytes)  # 40 records left
    assert count_of(tf)[tf] == 40
    # The planned item, read by a command: refused, naming the file.
    item = f"{tf}?start=0&end={100 * record_bytes}"
    proc = run("count", item, check=False)
    assert proc.returncode != 0
    assert "FAILED_PRECONDITION" in proc.stderr
    assert f"'{tf}' changed since the plan was made: size {40 * record_bytes}, " \
        f"item ends at {100 * record_bytes}" in proc.stderr
    assert "total" not in proc.stdout
    # The worker does not give it to its command at all (any command would
    # read a shorter file): a failed attempt naming the change.
    seen = tmp_path / "seen"
    proc = run("worker", "--address", coordinator.address, "--name", "cut", "--worker", "w",
               "--max-failures", "1", "--", "sh", "-c", f"touch {seen}", check=False)
    assert proc.returncode != 0
    assert f"'{tf}' changed since the plan was made: size now {40 * record_bytes}, " \
        f"planned {100 * record_bytes}" in proc.stderr
    assert not seen.exists()
    status = status_of(coordinator.address, "cut")
    assert status["completed"] == 0 and not status["finished"]


# Issue 15 item 5: the format is judged from the content, the name a hint.

def test_count_and_cat_read_a_tfds_named_shard_as_tfrecord(tmp_path):
    lines = [f"example {i}" for i in range(30)]
    tf = tfrecord_from_lines(tmp_path, lines, name="mnist-train.tfrecord-00000-of-00001")
    assert count_of(tf)[tf] == 30
    assert run("cat", tf).stdout.splitlines() == lines
    # The same bytes under a name that says nothing: the content decides.
    anonymous = tmp_path / "shard-0"
    anonymous.write_bytes(open(tf, "rb").read())
    assert count_of(str(anonymous))[str(anonymous)] == 30


def test_a_text_file_is_still_text_and_a_misnamed_text_file_is_reported(tmp_path):
    text = write_text(tmp_path / "notes", ["a", "b", "c"])
    assert count_of(text)[text] == 3
    misnamed = write_text(tmp_path / "notes.tfrecord", ["a", "b", "c"])
    proc = run("count", misnamed, check=False)
    assert proc.returncode == 1 and "DATA_LOSS" in proc.stderr
    assert misnamed in proc.stderr and "does not start with a TFRecord header" in proc.stderr


def test_reading_a_tfrecord_file_as_text_is_refused(tmp_path):
    tf = tfrecord_from_lines(tmp_path, [f"example {i}" for i in range(30)])
    proc = run("count", "--type", "text", tf, check=False)
    assert proc.returncode == 2  # INVALID_ARGUMENT
    assert f"'{tf}' looks like a TFRecord file" in proc.stderr
    assert "use TFRecordReader" in proc.stderr


def test_a_failed_tfrecord_write_leaves_nothing_and_keeps_the_old_output(tmp_path):
    """A write that fails part-way (here the file size limit, as a full disk
    would) must not leave a shorter TFRecord file: cut at a record boundary
    it reads as valid. The records go to OUTPUT.part, renamed once all are in."""
    import resource
    import signal
    import subprocess
    text = write_text(tmp_path / "big.txt", [f"line {i} " + "y" * 100 for i in range(2000)])
    out = tmp_path / "out.tfrecord"
    out.write_bytes(b"the previous output")

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill

    proc = subprocess.run([shardq_bin(), "tfrecord-write", text, str(out)],
                          capture_output=True, text=True, timeout=60, preexec_fn=limited)
    assert proc.returncode != 0, proc.stdout
    assert "out.tfrecord.part" in proc.stderr, proc.stderr
    assert out.read_bytes() == b"the previous output"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt", "out.tfrecord"]
    # Unlimited, the same run replaces it whole.
    assert "wrote 2000 records" in run("tfrecord-write", text, str(out)).stdout
    assert count_of(str(out))[str(out)] == 2000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt", "out.tfrecord"]
