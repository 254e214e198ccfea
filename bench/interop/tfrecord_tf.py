"""TFRecord interoperability with the real TensorFlow (issue 5).

Usage: python tfrecord_tf.py SHARDQ_BIN WORK_DIR   (in a venv with
tensorflow-cpu; bench/interop/run makes one and calls this).

  1. tf.io.TFRecordWriter writes files (no compression, GZIP, ZLIB); shardq
     reads them record for record: `shardq cat --format hex` must return
     exactly the bytes written, `shardq count` their number, and for the
     plain file the byte-range slices `FILE?start=S&end=E` of a 7-way cut
     must together return every record once, in order.
  2. `shardq tfrecord-write` converts a text file to TFRecord (plain, .gz,
     .zz); tf.data.TFRecordDataset (compression_type "", "GZIP", "ZLIB")
     must read back exactly the lines.

Prints one PASS/FAIL line per check and exits non-zero on any failure.
"""
import os
import random
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

COMPRESSIONS = [("", "none", ".tfrecord"), ("GZIP", "GZIP", ".tfrecord.gz"),
                ("ZLIB", "ZLIB", ".tfrecord.zz")]

failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures += 1


def first_difference(got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"record {i}: {len(g)} bytes read, {len(w)} written"
    return f"{len(got)} records read, {len(want)} written"


def shardq(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, check=False)


def shardq_records(binary, item):
    out = shardq(binary, "cat", "--format", "hex", item)
    if out.returncode != 0:
        return None, out.stderr.decode(errors="replace").strip()
    lines = out.stdout.decode().split("\n")
    return [bytes.fromhex(line) for line in lines[:-1]], ""


def tf_writes_shardq_reads(binary, work, records):
    for tf_type, label, suffix in COMPRESSIONS:
        path = os.path.join(work, "tf-written" + suffix)
        options = tf.io.TFRecordOptions(compression_type=tf_type)
        with tf.io.TFRecordWriter(path, options=options) as writer:
            for r in records:
                writer.write(r)
        got, error = shardq_records(binary, path)
        what = (f"tf.io.TFRecordWriter ({label}) -> shardq cat --format hex: ")
        if got is None:
            check(False, what + "shardq failed: " + error)
            continue
        check(got == records,
              what + (f"{len(records)}/{len(records)} records identical"
                      if got == records else first_difference(got, records)))
        out = shardq(binary, "count", path)
        total = out.stdout.decode().strip().split("\n")[-1] if out.returncode == 0 else ""
        check(total == f"{len(records)}\ttotal",
              f"tf.io.TFRecordWriter ({label}) -> shardq count: "
              f"'{total or out.stderr.decode().strip()}', expected {len(records)}")
        if tf_type:
            continue
        size = os.path.getsize(path)
        cuts = [size * k // 7 for k in range(8)]
        sliced = []
        error = ""
        for start, end in zip(cuts, cuts[1:]):
            part, error = shardq_records(binary, f"{path}?start={start}&end={end}")
            if part is None:
                break
            sliced.extend(part)
        check(not error and sliced == records,
              "tf.io.TFRecordWriter (none) -> shardq cat of 7 byte-range slices: " +
              (error or (f"{len(records)}/{len(records)} records, each once, in order"
                         if sliced == records else first_difference(sliced, records))))


def shardq_writes_tf_reads(binary, work, lines):
    text = os.path.join(work, "lines.txt")
    with open(text, "wb") as f:
        f.write(b"".join(line + b"\n" for line in lines))
    for tf_type, label, suffix in COMPRESSIONS:
        path = os.path.join(work, "shardq-written" + suffix)
        out = shardq(binary, "tfrecord-write", text, path)
        what = f"shardq tfrecord-write ({label}) -> tf.data.TFRecordDataset: "
        if out.returncode != 0:
            check(False, what + "shardq failed: " + out.stderr.decode().strip())
            continue
        try:
            got = [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=tf_type)]
        except tf.errors.OpError as e:
            check(False, what + "TensorFlow failed: " + e.message)
            continue
        check(got == lines,
              what + (f"{len(lines)}/{len(lines)} records identical"
                      if got == lines else first_difference(got, lines)))


def main():
    binary, work = sys.argv[1], sys.argv[2]
    rng = random.Random(5)
    print(f"tfrecord interop: tensorflow {tf.__version__}, shardq {binary}")
    records = [b"", b"\x00", bytes(range(256)), b"\n\r\n", os.urandom(1 << 20)]
    records += [rng.randbytes(rng.randint(0, 5000)) for _ in range(300)]
    tf_writes_shardq_reads(binary, work, records)
    alphabet = "abcdefghijklmnopqrstuvwxyz ,.;:\t0123456789\u00e9\u4e2d"
    lines = [b"", b"hello", "caf\u00e9 \u4e2d\u6587".encode(), b"x" * 100000]
    lines += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 300))).encode()
              for _ in range(500)]
    shardq_writes_tf_reads(binary, work, lines)
    print(f"tfrecord interop: {'all checks passed' if failures == 0 else f'{failures} FAILED'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
