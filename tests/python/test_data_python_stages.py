"""shardq.data with Python stages (a Python map and what follows it) over a
queue with complete="consumed": a record counts as consumed only once what
it became reaches the user, so a pass that stops (a break, a failing map)
loses nothing held in a Python buffer, and Python stages that hold more
items than the queue allows drain instead of hanging."""
import collections
import faulthandler
import os
import pathlib
import subprocess
import sys
import time
import uuid

import pytest

import shardq

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARDQ = str(REPO / "build" / "bin" / "shardq")


@pytest.fixture
def hang_guard():
    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)  # not captured
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def lines(text_files):
    """4 files of 100 lines; the queue cuts them in 16 items of about 25."""
    return text_files(4, 100)


def all_lines(paths):
    return collections.Counter(line.encode() for p in paths for line in
                               open(p).read().splitlines())


def queue_of(paths, num_clients):
    return shardq.WorkQueue(paths, num_slices=16, num_clients=num_clients,
                            name=f"pystages-{uuid.uuid4().hex[:8]}")


def failing_on(n):
    """A map function that raises ValueError("bad record") on its n-th call;
    its ``calls`` lists what it was called with."""
    def fn(x):
        fn.calls.append(x)
        if len(fn.calls) == n:
            raise ValueError("bad record")
        return x
    fn.calls = []
    return fn


def rest_of(queue):
    return [bytes(r) for r in shardq.data.from_queue(queue, reader="text")]


def test_the_record_a_python_map_failed_on_and_those_batched_with_it_are_read_again(lines):
    # Records count consumed when they reach Python's stages: the one the
    # map raised on, and the 5 already mapped into the batch being filled,
    # were lost (their items completed). Now they are read again.
    queue = queue_of(lines, num_clients=8)
    got = []
    with pytest.raises(ValueError, match="bad record"):
        for batch in shardq.data.from_queue(queue, reader="text").map(failing_on(156)).batch(10):
            got += [bytes(r) for r in batch]
    assert len(got) == 150
    rest = rest_of(queue)
    assert collections.Counter(got + rest) == all_lines(lines)  # each once
    assert queue.records_read_again == 0
    assert queue.stats()["finished"]


@pytest.mark.parametrize("prefetch", [False, True])
def test_a_pass_left_with_records_in_a_python_shuffle_loses_none(lines, prefetch):
    # 50 records waited in the Python shuffle buffer when the loop broke:
    # their items were completed, and the records lost. Now nothing is
    # lost; records delivered out of order ahead of their item's rest are
    # read again, and counted (records_read_again) and logged, as with the
    # C++ shuffle.
    queue = queue_of(lines, num_clients=8)
    ds = shardq.data.from_queue(queue, reader="text").map(lambda x: x).shuffle(50, seed=3)
    if prefetch:
        ds = ds.prefetch(3)
    got = []
    it = iter(ds.batch(10))
    for batch in it:
        got += [bytes(r) for r in batch]
        if len(got) >= 150:
            break
    it.close()
    rest = rest_of(queue)
    both = collections.Counter(got + rest)
    assert set(both) == set(all_lines(lines))  # nothing lost
    assert sum(both.values()) - len(both) == queue.records_read_again
    assert queue.stats()["finished"]


def test_python_stages_holding_more_items_than_allowed_drain_and_read_all_once(
        lines, hang_guard):
    # A Python shuffle of 200 holds records of up to 8 items, 2 may be
    # held: the pipeline stalls, the shuffle is told to drain (as the C++
    # one drains), and the pass goes on. A batch of 120 spans 5 items: it
    # is handed on short at each stall, as the C++ batch is.
    for build in (lambda ds: ds.shuffle(200, seed=1).batch(30),
                  lambda ds: ds.batch(120),
                  lambda ds: ds.shuffle(200, seed=1).prefetch(2).batch(30)):
        queue = queue_of(lines, num_clients=2)
        ds = build(shardq.data.from_queue(queue, reader="text", cycle_length=1).map(bytes))
        batches = list(ds)
        got = [r for batch in batches for r in batch]
        assert collections.Counter(got) == all_lines(lines)
        assert queue.stats()["finished"]
        if len(batches[0]) != 30:
            assert len(batches) > 4 and min(len(b) for b in batches[:-1]) < 120


def test_a_batch_that_may_not_be_short_counts_what_it_holds_consumed_at_a_stall(
        lines, hang_guard):
    # drop_remainder, or a split that drops short batches: no short batch
    # mid-pass; what the batch holds at a stall counts consumed so that the
    # pass goes on, and only the last remainder is dropped.
    for build, width in ((lambda ds: ds.batch(120, drop_remainder=True), 120),
                         (lambda ds: ds.batch(120).split(2, remainder="drop"), 60)):
        queue = queue_of(lines, num_clients=2)
        ds = build(shardq.data.from_queue(queue, reader="text", cycle_length=1).map(bytes))
        got = []
        for element in ds:
            for rows in (element if width == 60 else [element]):
                assert len(rows) == width
                got.extend(rows)
        assert len(got) == 360 and len(set(got)) == 360
        assert set(got) <= set(all_lines(lines))
        assert queue.stats()["finished"]


def test_records_a_python_batch_counted_early_and_never_returned_are_reported_lost(
        lines, hang_guard):
    # A Python batch that may not be short (drop_remainder) holds the
    # records of both items the pipeline may hold: at the stall they count
    # as consumed early, so that it can fill. A map that fails before it is
    # full ends the pass: those records are lost, and reported as such
    # (records_lost, logged); the record it failed on is read again.
    queue = queue_of(lines, num_clients=2)
    fail = failing_on(55)
    ds = shardq.data.from_queue(queue, reader="text", cycle_length=1).map(fail)
    with pytest.raises(ValueError, match="bad record"):
        list(ds.batch(60, drop_remainder=True))
    rest = rest_of(queue)
    missing = set(all_lines(lines)) - set(rest)
    assert len(missing) >= 25 and len(missing) == queue.records_lost
    assert fail.calls[54] not in missing
    assert queue.stats()["finished"]


def test_closing_a_pass_with_a_python_prefetch_gives_its_items_back_at_once(lines):
    # The prefetch thread closed the C++ iterator whenever it noticed the
    # stop, after close() returned: a new pass right after found the items
    # still held (the held-item limit) about half the time.
    for _ in range(5):
        queue = queue_of(lines, num_clients=8)
        it = iter(shardq.data.from_queue(queue, reader="text").map(bytes).prefetch(4).batch(10))
        next(it)
        it.close()
        assert queue.stats()["leased"] == 0
        assert len(rest_of(queue)) >= 390  # the 10 delivered, at most, are not read again


@pytest.fixture
def coordinator(tmp_path):
    port_file = tmp_path / "port"
    serve = subprocess.Popen([SHARDQ, "serve", "--listen", "127.0.0.1:0", "--port-file",
                              str(port_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not port_file.exists() or not port_file.read_text().strip():
        assert time.monotonic() < deadline and serve.poll() is None
        time.sleep(0.02)
    yield f"127.0.0.1:{int(port_file.read_text())}"
    serve.terminate()
    serve.wait(timeout=30)


@pytest.mark.parametrize("stages", ["shuffle", "batch"])
def test_a_checkpoint_saved_mid_pass_resumes_what_python_stages_had_not_delivered(
        lines, tmp_path, coordinator, stages):
    # The checkpoint's resume points are what was consumed: records waiting
    # in a Python shuffle or batch were skipped by a restore (lost). Now a
    # restore reads them, and what it reads again of the delivered ones is
    # what save_checkpoint counted.
    name = f"ckpt-{stages}-{os.getpid()}"
    queue = shardq.WorkQueue(lines, num_slices=16, num_clients=8, name=name, address=coordinator)
    ds = shardq.data.from_queue(queue, reader="text").map(bytes)
    ds = ds.shuffle(50, seed=2).batch(10) if stages == "shuffle" else ds.batch(7)
    got = []
    it = iter(ds)
    while len(got) < 150:
        got += next(it)
    beyond = queue.save_checkpoint(str(tmp_path / "ckpt"))
    it.close()
    queue.close()
    subprocess.run([SHARDQ, "restore", "--address", coordinator, "--name", name + "-r",
                    "--in", str(tmp_path / "ckpt")], check=True, capture_output=True)
    restored = shardq.WorkQueue.attach(name + "-r", address=coordinator)
    both = collections.Counter(got + rest_of(restored))
    assert set(both) == set(all_lines(lines))
    assert sum(both.values()) - len(both) == beyond
    assert (beyond > 0) == (stages == "shuffle")
