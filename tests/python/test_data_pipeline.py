"""shardq.data over the C++ pipeline: exactly-once coverage, completion on
consumption, the GIL and Ctrl-C during a blocked next, errors of a Python
map, split, and zero-copy parse_example batches."""
import _thread
import collections
import faulthandler
import sys
import threading
import time
import uuid

import numpy as np
import pytest
import torch

import shardq
from example_data import write_files

SPEC = {"x": shardq.FixedLen((4,), "float32"), "y": shardq.FixedLen((), "int64")}


def queue_of(files, **kw):
    return shardq.WorkQueue(files, name=f"pipe-{uuid.uuid4().hex[:8]}", **kw)


def lines_of(paths):
    return [line.encode() for p in paths for line in open(p).read().splitlines()]


@pytest.fixture
def hang_guard():
    """A test that would deadlock (a next() holding the GIL) fails instead
    of hanging: the process dumps its stacks and exits."""
    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)  # not captured
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("reader", ["text", "tfrecord"])
def test_every_record_is_read_once_per_epoch_with_shuffle_and_batch(reader, tmp_path, text_files):
    if reader == "text":
        files = text_files(3, 40)
        expected = lines_of(files)
    else:
        files = write_files(tmp_path, 3, 40, width=2)
        expected = _tfrecord_payloads(files)
    queue = queue_of(files, num_epochs=2, num_slices=10, num_clients=16, seed=3)
    ds = shardq.data.from_queue(queue, reader=reader).shuffle(32, seed=5).batch(16).prefetch(2)
    it = iter(ds)
    assert isinstance(it, shardq._shardq._PipelineIterator)  # every stage in C++
    seen = collections.Counter()
    for batch in it:
        assert 1 <= len(batch) <= 16 and all(isinstance(r, bytes) for r in batch)
        seen.update(batch)
    assert seen == collections.Counter(expected * 2)
    stats = queue.stats()
    assert stats["completed"] == stats["items"] * 2 and stats["leased"] == 0
    assert it.stats()["records_consumed"] == len(expected) * 2


def _tfrecord_payloads(files):
    queue = queue_of(files)
    reader = shardq.TFRecordReader()
    producer = queue.input_producer()
    out = []
    while True:
        try:
            out += reader.read_up_to(producer, 100)[1]
        except shardq.OutOfRangeError:
            return out


def test_items_complete_only_when_their_records_are_consumed(text_files):
    files = text_files(4, 10)
    queue = queue_of(files, shuffle=False, num_clients=2)
    ds = shardq.data.from_queue(queue, reader="text", cycle_length=1)
    it = iter(ds)
    first = [next(it) for _ in range(15)]
    by_file = collections.Counter(line.split()[1] for line in first)
    assert sorted(by_file.values()) == [5, 10]  # one file whole, one half read
    done_file = next(f for f, n in by_file.items() if n == 10)
    assert queue.stats()["completed"] == 1  # the half-read item is held, not done
    it.close()  # as dropping the iterator: the held items go back
    stats = queue.stats()
    assert stats["completed"] == 1 and stats["leased"] == 0 and stats["released"] >= 1

    second = list(shardq.data.from_queue(queue, reader="text", cycle_length=1))
    # The completed item is never read again; every other record is read
    # by the second iterator exactly once (the half-read item from its start).
    rest = [line for line in lines_of(files) if line.split()[1] != done_file]
    assert collections.Counter(second) == collections.Counter(rest)
    assert queue.stats()["completed"] == 4


def test_a_batch_too_few_held_items_cannot_fill_goes_on_short_or_counts_them_early(
        tmp_path, capfd):
    # One item may be held, a batch needs two: it is handed on short at the
    # stall, or (drop_remainder) its records count as consumed early and it
    # is filled; either way the pass reads on to the end, and says once why
    # it paused.
    files = write_files(tmp_path, 2, 10, width=1)
    queue = queue_of(files, num_clients=1)
    it = iter(shardq.data.from_queue(queue, reader="tfrecord", complete="consumed").batch(16))
    assert [len(b) for b in it] == [10, 10]
    assert it.stats()["short_batches"] == 2 and it.stats()["records_consumed_early"] == 0
    assert queue.stats()["finished"]
    assert capfd.readouterr().err.count("reading paused: every item this pipeline may hold") == 1

    queue = queue_of(files, num_clients=1)
    it = iter(shardq.data.from_queue(queue, reader="tfrecord", complete="consumed")
              .batch(16, drop_remainder=True))
    batches = list(it)
    assert [len(b) for b in batches] == [16] and len(set(batches[0])) == 16
    # (The second item's last 4 too: at the limit again, the queue's end is
    # not seen until that item completes; then they are the dropped rest.)
    assert it.stats()["records_consumed_early"] == 14 and it.stats()["records_dropped"] == 4
    assert queue.stats()["finished"] and queue.records_lost == 0
    err = capfd.readouterr().err
    assert err.count("reading paused") == 1 and err.count("counted as consumed before") == 1

    # Room for both items: no pause, nothing said.
    queue = queue_of(files, num_clients=4)
    assert [len(b) for b in shardq.data.from_queue(queue, reader="tfrecord").batch(16)] == [16, 4]
    assert "reading paused" not in capfd.readouterr().err


def test_a_million_threads_are_refused_at_once_not_started(tmp_path):
    files = write_files(tmp_path, 2, 10, width=4)
    ds = shardq.data.from_queue(queue_of(files), reader="tfrecord").batch(4)
    # (Started, they took minutes: the refusal comes before any thread.)
    with pytest.raises(shardq.InvalidArgumentError, match="num_threads = 1000000.*<= 1024"):
        list(ds.parse_example(SPEC, num_parallel_calls=10**6))
    with pytest.raises(shardq.InvalidArgumentError, match="num_parallel_reads = 1000000"):
        list(shardq.data.from_queue(queue_of(files, num_clients=10**6), reader="tfrecord",
                                    num_parallel_reads=10**6))


def test_default_queue_batches_across_items_completing_them_when_read(tmp_path):
    # num_clients=1 (the default): "auto" completes an item once it is read
    # into the pipeline, so batches of 16 span the 10-record items.
    files = write_files(tmp_path, 5, 10, width=1)
    queue = queue_of(files, num_epochs=2)
    batches = list(shardq.data.from_queue(queue, reader="tfrecord").batch(16))
    records = [r for b in batches for r in b]
    assert [len(b) for b in batches[:-1]] == [16] * (len(batches) - 1)
    assert collections.Counter(records) == collections.Counter(
        {r: 2 for r in set(records)})
    assert len(records) == 2 * 5 * 10
    stats = queue.stats()
    assert stats["finished"] and stats["completed"] == 10


def _blocked_pipeline(text_files):
    """A pipeline whose only item is held by another worker, so its next()
    waits until `holder` completes `item`."""
    files = text_files(1, 3)
    name = f"pipe-{uuid.uuid4().hex[:8]}"
    holder = shardq.WorkQueue(files, name=name, worker_id="holder")
    item = holder.take()
    waiter = shardq.WorkQueue(files, name=name, worker_id="waiter")
    return holder, item, iter(shardq.data.from_queue(waiter, reader="text"))


def test_a_blocked_next_releases_the_gil(text_files, hang_guard):
    holder, item, it = _blocked_pipeline(text_files)
    consumer_waiting = threading.Event()
    ticks = []

    def other_thread():
        consumer_waiting.wait()
        while len(ticks) < 20:  # runs only if next() let go of the GIL
            ticks.append(time.monotonic())
            time.sleep(0.005)
        holder.complete(item)  # ends the data: the waiting next() returns

    t = threading.Thread(target=other_thread)
    t.start()
    consumer_waiting.set()
    remaining = list(it)
    t.join()
    assert remaining == [] and len(ticks) == 20


def test_ctrl_c_interrupts_a_blocked_next_and_the_iterator_goes_on(text_files, hang_guard):
    holder, item, it = _blocked_pipeline(text_files)
    consumer_waiting = threading.Event()

    def press_ctrl_c():
        consumer_waiting.wait()
        time.sleep(0.05)
        _thread.interrupt_main()

    t = threading.Thread(target=press_ctrl_c)
    t.start()
    with pytest.raises(KeyboardInterrupt):
        consumer_waiting.set()
        next(it)  # waits: the only item is held by `holder`
    t.join()
    holder.release(item)  # now this worker can read it
    assert list(it) == [b"f 0 line 0", b"f 0 line 1", b"f 0 line 2"]


def test_a_python_map_that_raises_surfaces_with_its_message(tmp_path):
    files = write_files(tmp_path, 1, 12, width=1)

    def fail_on_third(batch):
        if fail_on_third.calls == 2:
            raise ValueError("cannot use batch 2")
        fail_on_third.calls += 1
        return len(batch)
    fail_on_third.calls = 0
    ds = shardq.data.from_queue(queue_of(files, num_clients=4), reader="tfrecord").batch(4) \
        .map(fail_on_third).prefetch(2)
    it = iter(ds)
    assert [next(it), next(it)] == [4, 4]
    with pytest.raises(ValueError, match="cannot use batch 2"):
        next(it)


def test_a_cpp_stage_error_names_the_stage_and_feature(tmp_path):
    files = write_files(tmp_path, 1, 3, width=4)
    bad = {"x": shardq.FixedLen((5,), "float32")}  # the records hold 4 values
    ds = shardq.data.from_queue(queue_of(files, num_clients=4), reader="tfrecord") \
        .batch(3).parse_example(bad)
    with pytest.raises(shardq.InvalidArgumentError, match=r"parse_example.*'x'"):
        list(ds)


def test_parse_example_before_batch_is_refused(tmp_path):
    files = write_files(tmp_path, 1, 2, width=4)
    ds = shardq.data.from_queue(queue_of(files), reader="tfrecord").parse_example(SPEC)
    with pytest.raises(shardq.InvalidArgumentError, match=r"\.batch\(n\) before it"):
        iter(ds)


def test_split_gives_every_replica_the_same_number_of_batches(tmp_path):
    files = write_files(tmp_path, 3, 10, width=4)  # 30 records: 3 batches of 8 + 6
    pad = shardq.data.from_queue(queue_of(files, num_clients=8), reader="tfrecord") \
        .batch(8).split(2, remainder="pad")
    steps = list(pad)
    assert len(steps) == 4
    real = []
    for step in steps:
        assert len(step) == 2
        for rows, mask in step:
            assert len(rows) == len(mask) == 4
            real += [r for r, m in zip(rows, mask) if m]
            assert all(r == b"" for r, m in zip(rows, mask) if not m)
    assert len(real) == 30 and len(set(real)) == 30

    queue = queue_of(files, num_clients=8)
    drop = list(shardq.data.from_queue(queue, reader="tfrecord").batch(8).split(2))
    assert len(drop) == 3 and all(len(step) == 2 and
                                  all(len(rows) == 4 for rows in step) for step in drop)
    assert queue.stats()["completed"] == 3  # the dropped rows count as consumed


def test_parsed_split_pads_with_masks(tmp_path):
    files = write_files(tmp_path, 3, 10, width=4)
    ds = shardq.data.from_queue(queue_of(files, num_clients=8), reader="tfrecord") \
        .batch(8).parse_example(SPEC).split(2, remainder="pad")
    labels = []
    steps = 0
    for step in ds:
        steps += 1
        for features, mask in step:
            assert features["x"].shape == (4, 4) and features["y"].shape == (4,)
            assert mask.dtype == np.bool_ and mask.shape == (4,)
            labels += features["y"][mask].tolist()
    assert steps == 4 and sorted(labels) == list(range(30))


def test_parse_example_batches_wrap_the_cpp_buffers(tmp_path):
    files = write_files(tmp_path, 2, 20, width=4)
    for parse in (lambda d: d.parse_example(SPEC),
                  lambda d: d.map(shardq.parse_example_fn(SPEC))):
        ds = parse(shardq.data.from_queue(queue_of(files, num_clients=8), reader="tfrecord")
                   .shuffle(16, seed=2).batch(8)).prefetch(2)
        it = iter(ds)
        assert isinstance(it, shardq._shardq._PipelineIterator)  # parsed in C++
        labels = []
        for batch in it:
            x, y = batch["x"], batch["y"]
            assert x.dtype == np.float32 and x.shape == (8, 4)
            assert y.dtype == np.int64 and y.shape == (8,)
            for a in (x, y):
                # Not a copy: the array's memory is owned by a capsule
                # holding the C++ parser's buffer.
                assert not a.flags.owndata and type(a.base).__name__ == "PyCapsule"
                assert a.flags.c_contiguous
            assert torch.from_numpy(x).data_ptr() == x.ctypes.data
            np.testing.assert_allclose(x[:, 1], y + 0.001, rtol=1e-6)
            labels += y.tolist()
        assert sorted(labels) == list(range(40))


def test_table_rows_are_read_by_the_cpp_pipeline_once_per_epoch(tmp_path):
    import sqlite3
    path = tmp_path / "rows.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t(v INTEGER, name TEXT)")
        db.executemany("INSERT INTO t VALUES(?, ?)", [(i, f"n{i}") for i in range(50)])
    queue = queue_of([f"sqlite:{path}?table=t"], num_epochs=2, num_slices=5, num_clients=8)
    ds = shardq.data.from_queue(queue, reader="table").shuffle(8, seed=1).batch(10) \
        .split(2, remainder="pad")
    it = iter(ds)
    assert isinstance(it, shardq._shardq._PipelineIterator)
    values = []
    for step in it:
        for rows, mask in step:
            assert len(rows) == 5
            values += [r["v"] for r, real in zip(rows, mask) if real]
            assert all(r["name"] == f"n{r['v']}" for r, real in zip(rows, mask) if real)
    assert sorted(values) == sorted(list(range(50)) * 2)
    assert queue.stats()["completed"] == 10


def test_a_second_pass_over_a_finished_queue_raises(text_files):
    files = text_files(2, 10)
    queue = queue_of(files, num_slices=4)
    ds = shardq.data.from_queue(queue, reader="text").batch(3)
    first = [r for batch in ds for r in batch]
    assert sorted(first) == sorted(lines_of(files))
    with pytest.raises(shardq.FailedPreconditionError, match="is finished.*earlier pass"):
        list(ds)
    # The same for another dataset over the same queue, and for Python stages.
    with pytest.raises(shardq.FailedPreconditionError, match="is finished"):
        list(shardq.data.from_queue(queue, reader="text").map(len))



def test_skipped_corrupt_records_are_counted_in_the_pipeline_stats(tmp_path):
    # on_corrupt="skip" loses the damaged records; the iterator's stats say
    # how many regions and bytes (before, only a log line did).
    files = write_files(tmp_path, 2, 30, width=2)
    payloads = _tfrecord_payloads(files)
    damaged = bytearray(open(files[1], "rb").read())
    damaged[len(damaged) // 2] ^= 0xFF
    open(files[1], "wb").write(bytes(damaged))
    it = iter(shardq.data.from_queue(queue_of(files), on_corrupt="skip"))
    got = list(it)
    stats = it.stats()
    assert stats["corrupt_regions"] == 1
    assert stats["skipped_bytes"] > 0
    assert len(got) == len(payloads) - 1 and set(got) < set(payloads)
    clean = iter(shardq.data.from_queue(queue_of(files[:1]), on_corrupt="skip"))
    assert len(list(clean)) == 30
    assert clean.stats()["corrupt_regions"] == 0 and clean.stats()["skipped_bytes"] == 0
