"""shardq.WorkQueue as ML users call it: the PAI usage pattern, the
input_dataset shape, error mapping, GIL release."""
import pathlib
import threading
import time
import uuid

import pytest

import shardq


def unique(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


def test_pai_pattern_reads_every_line_num_epochs_times(text_files):
    files = text_files(4, 25)
    queue = shardq.WorkQueue(files, num_epochs=3, num_slices=10, name=unique("pai"))
    reader = shardq.TextLineReader()
    producer = queue.input_producer()
    counts = {}
    while True:
        try:
            keys, values = reader.read_up_to(producer, 2)
        except shardq.OutOfRangeError:
            break
        assert 1 <= len(keys) <= 2 and len(keys) == len(values)
        for v in values:
            counts[v] = counts.get(v, 0) + 1
    assert len(counts) == 100
    assert set(counts.values()) == {3}
    stats = queue.stats()
    assert stats["completed"] == queue.num_items * 3 and stats["finished"]


def test_input_producer_called_in_a_loop_is_the_one_producer(text_files):
    # PAI code calls input_producer() inside its read loop: every call must be
    # the queue's one producer, not a new one taking items past num_clients.
    files = text_files(4, 25)
    queue = shardq.WorkQueue(files, num_epochs=2, num_slices=8, name=unique("pai-loop"))
    reader = shardq.TextLineReader()
    counts = {}
    producers = []  # as graph code keeps every op it builds
    while True:
        producers.append(queue.input_producer())
        try:
            _, values = reader.read_up_to(producers[-1], 7)
        except shardq.OutOfRangeError:
            break
        for v in values:
            counts[v] = counts.get(v, 0) + 1
    assert len(counts) == 100 and set(counts.values()) == {2}
    stats = queue.stats()
    assert stats["finished"] and stats["completed"] == queue.num_items * 2
    assert stats["duplicates"] == 0 and stats["released"] == 0


def test_input_producer_twice_is_the_same_producer(text_files):
    queue = shardq.WorkQueue(text_files(2, 5), num_clients=2, name=unique("pai-twice"))
    first = queue.input_producer()
    second = queue.input_producer()
    assert first.capacity == second.capacity == 2
    assert queue.input_producer(capacity=2).capacity == 2
    with pytest.raises(shardq.InvalidArgumentError, match="already has an input producer"):
        queue.input_producer(capacity=1)
    del first, second
    # Still the one producer after the handles are gone: it holds the
    # queue's items, so a new one could take no more.
    reader = shardq.TextLineReader()
    _, values = reader.read_up_to(queue.input_producer(), 100)
    assert len(values) > 0


def test_take_returns_items_and_ends_with_out_of_range(text_files):
    files = text_files(3, 5)
    queue = shardq.WorkQueue(files, num_epochs=2, shuffle=False, name=unique("take"))
    taken = []
    while True:
        try:
            taken.append(queue.take())
        except shardq.OutOfRangeError as e:
            assert e.code == shardq.errors.OUT_OF_RANGE
            break
    # take() completes the previous item itself (PAI semantics, num_clients=1).
    assert taken == files + files


def test_input_dataset_yields_every_item_once_per_epoch(text_files):
    files = text_files(5, 3)
    queue = shardq.WorkQueue(files, num_epochs=2, name=unique("ds"))
    items = list(queue.input_dataset())
    assert sorted(items) == sorted(files * 2)
    assert queue.stats()["completed"] == 10


def test_two_workers_share_one_queue(text_files):
    files = text_files(6, 2)
    name = unique("share")
    a = shardq.WorkQueue(files, name=name, worker_id="a")
    b = shardq.WorkQueue(files, name=name, worker_id="b")
    got = []
    for q in (a, b, a, b, a, b):
        item = q.take()
        got.append(item)
        q.complete(item)
    assert sorted(got) == sorted(files)
    with pytest.raises(shardq.OutOfRangeError):
        a.take()
    assert set(a.stats()["workers"]) == {"a", "b"}


def test_seed_none_is_drawn_and_reported(text_files):
    queue = shardq.WorkQueue(text_files(2, 2), name=unique("seed"))
    assert isinstance(queue.seed, int)
    assert queue.stats()["seed"] == queue.seed


def test_errors_map_to_python_exceptions(text_files, tmp_path):
    with pytest.raises(KeyError) as missing:
        shardq.WorkQueue([str(tmp_path / "absent.txt")], name=unique("e"))
    assert isinstance(missing.value, shardq.NotFoundError)
    assert "absent.txt" in str(missing.value)
    with pytest.raises(ValueError, match="num_epochs"):
        shardq.WorkQueue(text_files(1, 1), num_epochs=0, name=unique("e"))
    with pytest.raises(ValueError, match="num_slices"):
        shardq.WorkQueue(text_files(1, 1), num_slices=0, name=unique("e"))
    with pytest.raises(ValueError, match="works"):
        shardq.WorkQueue([], name=unique("e"))
    with pytest.raises(ValueError, match="single string"):
        shardq.WorkQueue("data.txt", name=unique("e"))
    name = unique("cfg")
    shardq.WorkQueue(text_files(1, 1), num_epochs=1, name=name)
    with pytest.raises(shardq.FailedPreconditionError, match="num_epochs") as err:
        shardq.WorkQueue(text_files(1, 1), num_epochs=2, name=name)
    assert err.value.code_name == "FAILED_PRECONDITION"
    with pytest.raises(shardq.Error):
        shardq.WorkQueue.attach(unique("nonexistent"))
    queue = shardq.WorkQueue(text_files(1, 1), name=unique("c"))
    with pytest.raises(KeyError, match="not held"):
        queue.complete("never-taken")


def test_works_that_read_the_same_data_are_refused(text_files, tmp_path):
    # A file (or table) named twice would be handed out twice every epoch.
    import sqlite3
    path = text_files(1, 3)[0]
    with pytest.raises(ValueError, match="is listed twice") as twice:
        shardq.WorkQueue([path, path], name=unique("same"))
    assert isinstance(twice.value, shardq.InvalidArgumentError)
    with pytest.raises(ValueError, match="are the same file"):
        shardq.WorkQueue([path, f"{tmp_path}/./{pathlib.Path(path).name}"],
                         num_slices=4, name=unique("same"))
    db = tmp_path / "t.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE clicks(v)")
        conn.execute("CREATE TABLE views(v)")
        conn.executemany("INSERT INTO clicks VALUES (?)", [(i,) for i in range(10)])
        conn.executemany("INSERT INTO views VALUES (?)", [(i,) for i in range(10)])
    with pytest.raises(ValueError, match="are the same table"):
        shardq.WorkQueue([f"sqlite:{db}?table=clicks", f"sqlite:{tmp_path}/./t.db?table=clicks"],
                         name=unique("same"))
    # Two tables of one database are two works.
    queue = shardq.WorkQueue([f"sqlite:{db}?table=clicks", f"sqlite:{db}?table=views"],
                             num_slices=4, name=unique("same"))
    items = []
    while True:
        try:
            items.append(queue.take())
        except shardq.OutOfRangeError:
            break
    assert sorted(str(item).split("?table=")[1].split("&")[0] for item in items) == \
        ["clicks", "clicks", "views", "views"]


def test_blocked_take_releases_the_gil_and_times_out(text_files):
    files = text_files(1, 1)
    name = unique("gil")
    holder = shardq.WorkQueue(files, name=name, worker_id="holder")
    holder.take()
    waiter = shardq.WorkQueue(files, name=name, worker_id="waiter")
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    t = threading.Thread(target=ticker)
    t.start()
    start = time.monotonic()
    with pytest.raises(TimeoutError) as err:
        waiter.take(timeout=0.5)
    stop.set()
    t.join()
    assert time.monotonic() - start >= 0.45
    assert "0.5 s" in str(err.value)
    # The other Python thread kept running during the blocked take.
    assert len([x for x in ticks if x >= start]) >= 20


def test_blocked_take_wakes_when_the_holder_releases(text_files):
    files = text_files(1, 1)
    name = unique("wake")
    holder = shardq.WorkQueue(files, name=name, worker_id="holder")
    item = holder.take()
    waiter = shardq.WorkQueue(files, name=name, worker_id="waiter")
    threading.Timer(0.2, lambda: holder.release(item)).start()
    assert waiter.take(timeout=10) == item


def test_context_manager_gives_items_back(text_files):
    files = text_files(1, 1)
    name = unique("ctx")
    with shardq.WorkQueue(files, name=name, worker_id="first") as q:
        q.take()
    other = shardq.WorkQueue(files, name=name, worker_id="second")
    assert other.take(timeout=5) == files[0]


def _per_epoch_completed(q):
    return [e["completed"] for e in q.stats()["per_epoch"]]


def test_an_item_held_in_two_epochs_is_completed_in_the_epoch_given(text_files):
    # One item, two epochs, two clients: take() hands out both copies.
    # Completing epoch 1's copy completed epoch 0's before (the first
    # copy with that string): its records counted as read in epoch 0.
    files = text_files(1, 1)
    q = shardq.WorkQueue(files, num_epochs=2, num_clients=2, name=unique("epochs"))
    first, second = q.take(timeout=10), q.take(timeout=10)
    assert (first.epoch, second.epoch) == (0, 1) and str(first) == str(second)
    with pytest.raises(shardq.InvalidArgumentError, match=r"several epochs \(0, 1\)"):
        q.complete(str(second))  # a bare string: which one?
    with pytest.raises(shardq.InvalidArgumentError, match="several epochs"):
        q.release(str(first))
    assert _per_epoch_completed(q) == [0, 0]  # nothing done by the refusals
    q.complete(second)
    assert _per_epoch_completed(q) == [0, 1]
    with pytest.raises(shardq.NotFoundError, match="of epoch 1 is not held"):
        q.complete(second)
    q.complete(str(first))  # the one copy held: a string is enough
    assert _per_epoch_completed(q) == [1, 1]
    assert q.stats()["finished"]


def test_releasing_one_epochs_copy_keeps_the_other(text_files):
    files = text_files(1, 1)
    q = shardq.WorkQueue(files, num_epochs=2, num_clients=2, name=unique("epochs-rel"))
    first, second = q.take(timeout=10), q.take(timeout=10)
    q.release(second)
    per_epoch = q.stats()["per_epoch"]
    assert [e["leased"] for e in per_epoch] == [1, 0]
    assert [e["pending"] for e in per_epoch] == [0, 1]
    q.complete(first)
    assert _per_epoch_completed(q) == [1, 0]


def _read_with_a_straggler(tmp_path, split):
    """Two workers over 2 slices of 1200 equal lines; "slow" sleeps 2 ms a line."""
    path = tmp_path / f"lines-{split}.txt"
    path.write_text("".join(f"line-{i:06d}\n" for i in range(1200)))
    name = unique("tail")
    queues = {w: shardq.WorkQueue([str(path)], num_slices=2, shuffle=False, name=name,
                                  worker_id=w, split=split)
              for w in ("slow", "fast")}
    lines = {"slow": [], "fast": []}

    def work(w):
        reader = shardq.TextLineReader()
        while True:
            try:
                _, values = reader.read_up_to(queues[w], 4)
            except shardq.OutOfRangeError:
                return
            for v in values:
                if w == "slow":
                    time.sleep(0.002)
                lines[w].append(v)

    threads = [threading.Thread(target=work, args=(w,)) for w in ("slow", "fast")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lines, queues["fast"].stats()


def test_a_stragglers_item_is_split_and_every_line_is_read_once(tmp_path):
    # Deterministic: "slow" takes its slice first, reads 4 lines and stops
    # (no sleep: this thread reads on only once "fast", having read the other
    # slice, was handed the split-off rest of slow's slice).
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"line-{i:06d}\n" for i in range(1200)))
    name = unique("tail")
    queues = {w: shardq.WorkQueue([str(path)], num_slices=2, shuffle=False, name=name,
                                  worker_id=w) for w in ("slow", "fast")}
    slow_reader = shardq.TextLineReader()
    _, head = slow_reader.read_up_to(queues["slow"], 4)  # slow holds slice 0
    lines = {"slow": list(head), "fast": []}
    split_rest_read = threading.Event()

    def fast():
        reader = shardq.TextLineReader()
        while True:
            try:
                _, values = reader.read_up_to(queues["fast"], 4)
            except shardq.OutOfRangeError:
                return
            lines["fast"] += values
            if any(v < b"line-000600" for v in values):  # from slow's slice
                split_rest_read.set()

    t = threading.Thread(target=fast, daemon=True)
    t.start()
    # Bounded only against a hang; nothing here depends on speed.
    assert split_rest_read.wait(timeout=120), queues["fast"].stats()
    while True:
        try:
            _, values = slow_reader.read_up_to(queues["slow"], 4)
        except shardq.OutOfRangeError:
            break
        lines["slow"] += values
    t.join(timeout=120)
    assert not t.is_alive()
    stats = queues["fast"].stats()
    everything = sorted(lines["slow"] + lines["fast"])
    assert everything == [f"line-{i:06d}".encode() for i in range(1200)]
    assert stats["splits"] >= 1
    assert stats["split_items_open"] == 0 and stats["finished"]
    # Without the split the slow worker reads its whole 600-line slice.
    assert len(lines["slow"]) < 600


def test_split_false_keeps_whole_slices(tmp_path):
    lines, stats = _read_with_a_straggler(tmp_path, split=False)
    assert stats["splits"] == 0
    assert sorted(map(len, lines.values())) == [0, 1200] or len(lines["slow"]) % 600 == 0


@pytest.mark.parametrize("lease", [float("nan"), float("inf"), 1e300, 86401.0])
def test_a_lease_timeout_a_dead_worker_would_never_end_is_refused(text_files, lease):
    # An infinite lease (NaN converts to one) would hold a dead worker's item forever.
    with pytest.raises(shardq.InvalidArgumentError, match="lease_timeout .* limit of 24h"):
        shardq.WorkQueue(text_files(1, 3), name=unique("lease"), lease_timeout=lease)
    assert shardq.WorkQueue(text_files(1, 3, prefix="g"), name=unique("lease"),
                            lease_timeout=86400.0).take() is not None


def test_works_may_be_paths_but_not_one_string(text_files):
    files = text_files(1, 1)
    q = shardq.WorkQueue([pathlib.Path(files[0])], name=unique("paths"))
    assert q.take(timeout=10) == files[0]
    with pytest.raises(shardq.InvalidArgumentError, match="not a single string"):
        shardq.WorkQueue(files[0], name=unique("one-string"))
    with pytest.raises(shardq.InvalidArgumentError, match="strings or paths"):
        shardq.WorkQueue([b"bytes.txt"], name=unique("bytes"))
