"""Issue 19, PAI fidelity: PAI's positional signature, num_epochs=None,
take() items that carry their epoch and range, add_summary() with no
argument or a SummaryWriter, compressed TFRecordWriter, globs and
directories as works."""
import gzip
import os
import subprocess
import uuid
import zlib

import pytest

import shardq


def unique(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_pai_positional_call_with_name_seventh(text_files):
    files = text_files(2, 4)
    name = unique("q")
    queue = shardq.WorkQueue(files, 1, False, None, None, None, name)
    assert queue.name == name
    assert queue.num_epochs == 1
    with pytest.raises(TypeError):  # num_clients is a keyword, as in PAI
        shardq.WorkQueue(files, 1, False, None, None, None, unique("q"), 2)
    queue.close()


def test_num_epochs_none_repeats_past_any_epoch_count_a_job_would_use(text_files):
    files = text_files(1, 2)
    queue = shardq.WorkQueue(files, num_epochs=None, shuffle=False, name=unique("forever"),
                             num_clients=1)
    assert queue.num_epochs == 10**8
    epochs = []
    for _ in range(5):
        item = queue.take()
        epochs.append(item.epoch)
        queue.complete(item)
    assert epochs == [0, 1, 2, 3, 4]
    for bad in (0, -2, 1.5, "3", True):
        with pytest.raises(shardq.InvalidArgumentError, match="num_epochs"):
            shardq.WorkQueue(files, num_epochs=bad, name=unique("bad"))


def test_take_returns_a_str_carrying_epoch_work_start_and_end(text_files):
    files = text_files(1, 40)
    queue = shardq.WorkQueue(files, num_epochs=2, shuffle=False, num_slices=2,
                             name=unique("item"))
    items = []
    while True:
        try:
            item = queue.take()
        except shardq.OutOfRangeError:
            break
        items.append(item)
        queue.complete(item)  # an Item is accepted wherever the string is
    assert len(items) == 4
    for item in items:
        assert isinstance(item, str)
        assert item.work == files[0]
        assert str(item) == f"{item.work}?start={item.start}&end={item.end}"
    assert [i.epoch for i in items] == [0, 0, 1, 1]
    assert [(i.start, i.end) for i in items[:2]] == [(0, items[0].end), (items[0].end,
                                                                        os.path.getsize(files[0]))]
    whole = shardq.WorkQueue(files, name=unique("whole")).take()
    assert (whole.work, whole.start, whole.end, whole.epoch) == (files[0], None, None, 0)


def _event_files(directory):
    return [os.path.join(d, f) for d, _, fs in os.walk(directory) for f in fs
            if "tfevents" in f]


def test_add_summary_without_a_logdir_writes_to_shardq_summary_dir_or_runs(
        text_files, tmp_path, monkeypatch):
    queue = shardq.WorkQueue(text_files(1, 3), name=unique("sum"))
    monkeypatch.setenv("SHARDQ_SUMMARY_DIR", str(tmp_path / "env"))
    queue.add_summary(interval=60).stop()
    assert _event_files(tmp_path / "env")
    monkeypatch.delenv("SHARDQ_SUMMARY_DIR")
    monkeypatch.chdir(tmp_path)
    queue.add_summary(interval=60).stop()
    runs = [d for d in os.listdir(tmp_path / "runs")]
    assert len(runs) == 1 and _event_files(tmp_path / "runs" / runs[0])


def test_add_summary_accepts_a_summary_writer(text_files, tmp_path):
    class Writer:  # the part of torch.utils.tensorboard.SummaryWriter used
        def get_logdir(self):
            return str(tmp_path / "tb")
    queue = shardq.WorkQueue(text_files(1, 3), name=unique("sw"))
    queue.add_summary(Writer(), interval=60).stop()
    assert _event_files(tmp_path / "tb")
    with pytest.raises(TypeError, match="SummaryWriter"):
        queue.add_summary(42)


@pytest.mark.parametrize("compression, opener, suffix", [
    ("GZIP", gzip.decompress, ".gz"), ("zlib", zlib.decompress, ".zlib"), (None, None, "")])
def test_tfrecord_writer_compression_round_trips(tmp_path, compression, opener, suffix):
    # Readers know a ZLIB file by its name (.zz / .zlib): two header bytes
    # are too weak a sign; GZIP by its magic bytes.
    path = str(tmp_path / f"r.tfrecord{suffix}")
    records = [shardq.serialize_example({"y": i}) for i in range(50)]
    with shardq.TFRecordWriter(path, compression=compression) as w:
        for r in records:
            w.write(r)
    raw = open(path, "rb").read()
    if opener is not None:
        raw = opener(raw)  # a standard stream of the named kind
    assert len(raw) == sum(len(r) + 16 for r in records)
    queue = shardq.WorkQueue([path], name=unique("tfr"))
    reader = shardq.TFRecordReader()
    got = []
    while True:
        try:
            got += reader.read_up_to(queue, 16)[1]
        except shardq.OutOfRangeError:
            break
    assert got == records
    with pytest.raises(shardq.InvalidArgumentError, match="BZIP2"):
        shardq.TFRecordWriter(str(tmp_path / "x"), compression="BZIP2")


def test_globs_and_directories_expand_to_sorted_files(tmp_path):
    for name in ("b.txt", "a.txt", "c.log"):
        (tmp_path / name).write_text(f"{name}\n")
    queue = shardq.WorkQueue([str(tmp_path / "*.txt")], shuffle=False, name=unique("glob"))
    assert [queue.take() for _ in range(2)] == [str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]
    queue = shardq.WorkQueue([str(tmp_path)], shuffle=False, name=unique("dir"))
    assert queue.num_items == 3
    with pytest.raises(shardq.NotFoundError, match=r"\*\.csv' matches no file"):
        shardq.WorkQueue([str(tmp_path / "*.csv")], name=unique("none"))


def test_cli_count_expands_a_glob(tmp_path):
    shardq_bin = os.path.join(os.environ.get("SHARDQ_BIN", "build/bin"), "shardq")
    for i in range(3):
        (tmp_path / f"p{i}.txt").write_text("x\ny\n")
    out = subprocess.run([shardq_bin, "count", str(tmp_path / "p*.txt")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "6" in out.stdout
