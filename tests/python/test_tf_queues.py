"""shardq's TF 1.x queues (shardq.FIFOQueue, RandomShuffleQueue,
PriorityQueue, QueueRunner, Coordinator, batch, shuffle_batch, batch_join)
against TensorFlow's documented semantics: order, blocking, close (with and
without cancel_pending_enqueues), OutOfRangeError after close and drain,
min_after_dequeue, allow_smaller_final_batch. Nothing here asserts on time:
a blocked call is seen blocked through the queue's waiting counters, and
every wait has a generous bound."""
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import numpy as np
import pytest

import shardq

REPO = pathlib.Path(__file__).resolve().parents[2]
BOUND = 30.0  # seconds any wait may take before the test fails


def wait_until(predicate, what):
    deadline = time.monotonic() + BOUND
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.005)


class Background:
    """Runs fn in a thread, keeping its result or exception."""

    def __init__(self, fn):
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except BaseException as e:  # noqa: B902
            self.error = e

    def join(self):
        self.thread.join(BOUND)
        assert not self.thread.is_alive(), "the call never returned"
        return self


def name():
    return f"q-{uuid.uuid4().hex[:8]}"


# --- the queues ---

def test_fifo_queue_dequeues_tuples_in_enqueue_order():
    q = shardq.FIFOQueue(10, name=name())
    for i in range(5):
        q.enqueue((i, f"v{i}".encode(), np.full(3, i, np.float32)))
    assert q.size() == 5
    out = [q.dequeue() for _ in range(5)]
    assert [o[0] for o in out] == list(range(5))
    assert [o[1] for o in out] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert out[3][2].dtype == np.float32 and out[3][2].tolist() == [3.0] * 3


def test_a_one_component_queue_takes_and_returns_the_value_itself():
    q = shardq.FIFOQueue(4, dtypes=[np.int64], name=name())
    q.enqueue(7)
    q.enqueue([8])  # TF accepts a one-element list too
    assert q.dequeue() == 7
    assert q.dequeue_many(1).tolist() == [8]


def test_dict_elements_with_names_come_back_as_dicts():
    q = shardq.FIFOQueue(4, dtypes=["float32", "string"], names=["x", "label"], name=name())
    q.enqueue({"x": [1.0, 2.0], "label": "cat"})
    q.enqueue({"x": [3.0, 4.0], "label": b"dog"})
    first = q.dequeue()
    assert set(first) == {"x", "label"} and first["label"] == b"cat"
    assert first["x"].dtype == np.float32
    rest = q.dequeue_many(1)
    assert rest["x"].shape == (1, 2) and list(rest["label"]) == [b"dog"]
    with pytest.raises(shardq.InvalidArgumentError, match="names"):
        q.enqueue({"x": [1.0, 2.0]})


def test_dequeue_many_stacks_each_component_and_strings_become_object_arrays():
    q = shardq.FIFOQueue(10, name=name())
    q.enqueue_many((np.arange(6).reshape(3, 2), [b"a", b"b", b"c"]))
    xs, ss = q.dequeue_many(3)
    assert xs.shape == (3, 2) and xs.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert ss.dtype == object and ss.tolist() == [b"a", b"b", b"c"]


def test_enqueue_many_refuses_components_of_different_lengths():
    q = shardq.FIFOQueue(10, name=name())
    with pytest.raises(shardq.InvalidArgumentError, match="component 1 has 2 elements"):
        q.enqueue_many(([1, 2, 3], [b"a", b"b"]))
    assert q.size() == 0


def test_declared_dtypes_and_shapes_are_enforced_at_enqueue():
    q = shardq.FIFOQueue(10, dtypes=[np.float32, np.int64], shapes=[(2,), ()], name=name())
    q.enqueue(([1, 2], 3))  # ints cast to float32
    with pytest.raises(shardq.InvalidArgumentError, match=r"shape \(2,\)"):
        q.enqueue(([1, 2, 3], 3))
    with pytest.raises(shardq.InvalidArgumentError, match="int64, got float64"):
        q.enqueue(([1, 2], 3.5))
    with pytest.raises(shardq.InvalidArgumentError, match="has 2 components, got 3"):
        q.enqueue(([1, 2], 3, 4))
    x, y = q.dequeue()
    assert x.dtype == np.float32 and y == 3


def test_dequeue_blocks_until_an_element_arrives():
    q = shardq.FIFOQueue(4, name=name())
    consumer = Background(q.dequeue)
    wait_until(lambda: q._native.waiting_consumers == 1, "the consumer blocks")
    assert consumer.thread.is_alive()
    q.enqueue((b"x",))
    assert consumer.join().result == b"x"


def test_enqueue_blocks_while_the_queue_is_full():
    q = shardq.FIFOQueue(2, name=name())
    q.enqueue(1)
    q.enqueue(2)
    producer = Background(lambda: q.enqueue(3))
    wait_until(lambda: q._native.waiting_producers == 1, "the producer blocks")
    assert q.size() == 2
    assert q.dequeue() == 1
    producer.join()
    assert producer.error is None
    assert q.dequeue_many(2).tolist() == [2, 3]


def test_close_drains_then_raises_out_of_range_and_refuses_enqueues():
    q = shardq.FIFOQueue(10, name=name())
    q.enqueue_many(np.arange(5))
    q.close()
    assert q.is_closed()
    with pytest.raises(shardq.CancelledError, match="closed"):
        q.enqueue(9)  # TF: CancelledError for an enqueue to a closed queue
    # dequeue_many with fewer left fails and removes nothing ...
    with pytest.raises(shardq.OutOfRangeError):
        q.dequeue_many(6)
    assert q.dequeue_many(2).tolist() == [0, 1]
    # ... dequeue_up_to returns the short rest, then OutOfRangeError.
    assert q.dequeue_up_to(10).tolist() == [2, 3, 4]
    with pytest.raises(shardq.OutOfRangeError):
        q.dequeue()
    with pytest.raises(shardq.OutOfRangeError):
        q.dequeue_up_to(1)


def test_close_wakes_a_blocked_consumer_with_out_of_range():
    q = shardq.FIFOQueue(4, name=name())
    consumer = Background(lambda: q.dequeue_many(2))
    wait_until(lambda: q._native.waiting_consumers == 1, "the consumer blocks")
    q.enqueue(1)
    q.close()
    assert isinstance(consumer.join().error, shardq.OutOfRangeError)
    assert q.dequeue_up_to(2).tolist() == [1]


def test_close_lets_blocked_producers_finish_unless_cancelled():
    q = shardq.FIFOQueue(1, name=name())
    q.enqueue(1)
    producer = Background(lambda: q.enqueue(2))
    wait_until(lambda: q._native.waiting_producers == 1, "the producer blocks")
    q.close()  # pending enqueues stay pending ...
    assert q.dequeue() == 1
    assert producer.join().error is None  # ... and complete as room frees up
    assert q.dequeue() == 2
    with pytest.raises(shardq.OutOfRangeError):
        q.dequeue()

    q = shardq.FIFOQueue(1, name=name())
    q.enqueue(1)
    producer = Background(lambda: q.enqueue(2))
    wait_until(lambda: q._native.waiting_producers == 1, "the producer blocks")
    q.close(cancel_pending_enqueues=True)
    assert isinstance(producer.join().error, shardq.CancelledError)
    assert q.dequeue_up_to(1).tolist() == [1]


def test_a_timeout_raises_deadline_exceeded_a_timeout_error():
    q = shardq.FIFOQueue(1, name=name())
    with pytest.raises(shardq.DeadlineExceededError):
        q.dequeue(timeout=0.01)
    q.enqueue(1)
    with pytest.raises(TimeoutError):
        q.enqueue(2, timeout=0.01)
    assert q.size() == 1


def test_random_shuffle_queue_keeps_min_after_dequeue_until_closed():
    q = shardq.RandomShuffleQueue(capacity=10, min_after_dequeue=3, seed=1, name=name())
    q.enqueue_many(np.arange(3))
    with pytest.raises(shardq.DeadlineExceededError):
        q.dequeue(timeout=0.01)  # 3 held, all kept behind
    consumer = Background(lambda: q.dequeue_many(2))
    wait_until(lambda: q._native.waiting_consumers == 1, "the consumer blocks")
    q.enqueue(3)
    assert consumer.thread.is_alive() or consumer.result is None  # 1 above the floor: not 2
    q.enqueue(4)
    assert len(consumer.join().result) == 2
    assert q.size() == 3
    q.close()  # now the floor no longer applies
    rest = q.dequeue_up_to(7)
    assert len(rest) == 3
    assert sorted(consumer.result.tolist() + rest.tolist()) == [0, 1, 2, 3, 4]


def test_random_shuffle_queue_order_is_a_seeded_permutation():
    def order(seed):
        q = shardq.RandomShuffleQueue(100, 0, seed=seed, name=name())
        q.enqueue_many(np.arange(100))
        return q.dequeue_many(100).tolist()
    assert order(5) == order(5)
    assert sorted(order(5)) == list(range(100))
    assert order(5) != list(range(100))
    assert order(5) != order(6)


def test_random_shuffle_queue_refuses_min_after_dequeue_not_below_capacity():
    with pytest.raises(shardq.InvalidArgumentError, match="min_after_dequeue"):
        shardq.RandomShuffleQueue(capacity=4, min_after_dequeue=4)


def test_priority_queue_dequeues_smallest_priority_first_in_arrival_order():
    q = shardq.PriorityQueue(10, types=[bytes], name=name())
    for priority, value in [(3, "c"), (1, "a"), (2, "b"), (1, "a2"), (-5, "neg")]:
        q.enqueue((priority, value))
    assert [q.dequeue() for _ in range(3)] == [(-5, b"neg"), (1, b"a"), (1, b"a2")]
    q.enqueue_many(([0, 9], [b"zero", b"nine"]))
    priorities, values = q.dequeue_many(3)
    assert priorities.tolist() == [0, 2, 3] and values.tolist() == [b"zero", b"b", b"c"]
    with pytest.raises(shardq.InvalidArgumentError, match="priority"):
        shardq.PriorityQueue(4, names=["a"])


# --- readers, batching, runners ---

@pytest.fixture
def numbered_files(tmp_path):
    """Three text files whose lines are the numbers 0..299, once each."""
    paths = []
    for i in range(3):
        p = tmp_path / f"part-{i}.txt"
        p.write_text("".join(f"{n}\n" for n in range(i * 100, i * 100 + 100)))
        paths.append(str(p))
    return paths


def test_shuffle_batch_from_a_reader_reads_every_record_once_per_epoch(numbered_files):
    queue = shardq.WorkQueue(numbered_files, num_epochs=2, num_slices=9, name=name())
    key, value = shardq.TextLineReader().read(queue.input_producer())
    batches = shardq.shuffle_batch([key, value], batch_size=32, capacity=200,
                                   min_after_dequeue=50, num_threads=2, seed=7,
                                   allow_smaller_final_batch=True)
    coord = shardq.Coordinator()
    threads = shardq.start_queue_runners(coord=coord)
    sizes, numbers, keys = [], [], []
    try:
        while not coord.should_stop():
            k, v = batches.dequeue()
            sizes.append(len(v))
            numbers += [int(x) for x in v]
            keys += list(k)
    except shardq.OutOfRangeError:
        pass
    finally:
        coord.request_stop()
    coord.join(threads)
    assert sorted(numbers) == sorted(list(range(300)) * 2)
    assert sizes[:-1] == [32] * (len(sizes) - 1) and 0 < sizes[-1] <= 32
    assert numbers[:300] != sorted(numbers[:300])  # shuffled
    assert all(b":" in k for k in keys)  # TF's key: "<item>:<offset>"


def test_shuffle_batch_without_smaller_final_batch_leaves_the_short_rest(numbered_files):
    queue = shardq.WorkQueue(numbered_files[:1], num_epochs=1, name=name())
    value = shardq.TextLineReader().read(queue)[1]
    batches = shardq.shuffle_batch([value], batch_size=30, capacity=60, min_after_dequeue=20,
                                   seed=3)
    got = [b for (b,) in batches]  # the first dequeue starts the runner
    assert [len(b) for b in got] == [30, 30, 30]  # 10 left: not a full batch
    assert batches.queue.size() == 10


def test_batch_with_one_thread_keeps_the_reader_order(numbered_files):
    queue = shardq.WorkQueue(numbered_files, num_epochs=1, shuffle=False, name=name())
    _, value = shardq.TextLineReader().read(queue)
    batches = shardq.batch({"line": value}, batch_size=64, capacity=100,
                           allow_smaller_final_batch=True)
    lines = [int(x) for b in batches for x in b["line"]]
    assert lines == list(range(300))


def test_batch_join_runs_one_thread_per_reader(numbered_files):
    queue = shardq.WorkQueue(numbered_files, num_epochs=1, num_slices=6, name=name())
    producer = queue.input_producer()
    reads = [shardq.TextLineReader().read(producer) for _ in range(3)]
    batches = shardq.batch_join([[v] for _, v in reads], batch_size=50, capacity=100)
    assert batches.runner._started is False
    lines = sorted(int(x) for (b,) in batches for x in b)
    assert lines == list(range(300))


def test_shuffle_batch_of_tfrecords_then_parse_example(tmp_path):
    from example_data import write_files
    files = write_files(tmp_path, 2, 25, width=4)
    queue = shardq.WorkQueue(files, num_epochs=1, num_slices=4, name=name())
    _, value = shardq.TFRecordReader().read(queue.input_producer())
    batches = shardq.shuffle_batch([value], batch_size=10, capacity=40, min_after_dequeue=10,
                                   num_threads=2, seed=1)
    features = {"x": shardq.FixedLen((4,), "float32"), "y": shardq.FixedLen((), "int64")}
    labels = []
    for (records,) in batches:
        labels += shardq.parse_example(list(records), features)["y"].tolist()
    assert sorted(labels) == list(range(50))


def test_queue_runner_with_python_callables_fills_a_queue_until_they_end():
    q = shardq.FIFOQueue(8, name=name())
    source, lock = iter(range(200)), threading.Lock()

    def next_pair():
        with lock:
            n = next(source)  # StopIteration ends the thread
        return (n, str(n).encode())
    runner = shardq.QueueRunner(q, [next_pair] * 3)
    coord = shardq.Coordinator()
    threads = runner.create_threads(coord=coord, start=True)
    got = []
    while True:
        try:
            n, s = q.dequeue()
        except shardq.OutOfRangeError:
            break
        assert s == str(n).encode()
        got.append(n)
    coord.join(threads)
    assert sorted(got) == list(range(200))


def test_enqueue_many_runner_splits_each_batch():
    chunks = iter([np.arange(i, i + 5) for i in range(0, 50, 5)])
    batches = shardq.batch(chunks, batch_size=7, capacity=16, enqueue_many=True,
                           allow_smaller_final_batch=True)
    sizes, values = [], []
    for b in batches:  # one component: each batch is the array itself
        sizes.append(len(b))
        values += b.tolist()
    assert values == list(range(50)) and sizes == [7] * 7 + [1]


def test_a_failing_enqueue_op_stops_the_coordinator_and_join_raises_it():
    q = shardq.FIFOQueue(4, name=name())
    calls = iter(range(10))

    def op():
        n = next(calls)
        if n == 3:
            raise ValueError("record 3 is bad")
        return n
    coord = shardq.Coordinator()

    def until_stopped():  # a second thread that does not end by itself
        coord.wait_for_stop()
        return 0
    threads = shardq.QueueRunner(q, [op, until_stopped]).create_threads(coord=coord, start=True)
    wait_until(coord.should_stop, "the error stops the coordinator")
    with pytest.raises(ValueError, match="record 3 is bad"):
        coord.join(threads)
    assert q.is_closed()


def test_batches_raise_a_runner_error_instead_of_ending_quietly():
    def bad():
        raise KeyError("no such feature")
    batches = shardq.batch(bad, batch_size=2)
    with pytest.raises(KeyError, match="no such feature"):
        batches.dequeue()


def test_request_stop_ends_runner_threads_blocked_on_a_full_queue():
    q = shardq.FIFOQueue(2, name=name())
    coord = shardq.Coordinator()
    threads = shardq.QueueRunner(q, [iter(lambda: 1, None)] * 2).create_threads(
        coord=coord, start=True)
    wait_until(lambda: q._native.waiting_producers >= 1, "a runner thread blocks")
    coord.request_stop()
    coord.join(threads, stop_grace_period_secs=BOUND)  # raises if a thread still runs
    assert q.is_closed()


def test_coordinator_stop_on_exception_keeps_the_exception_for_join():
    coord = shardq.Coordinator()
    with coord.stop_on_exception():
        raise RuntimeError("worker failed")
    assert coord.should_stop()
    with pytest.raises(RuntimeError, match="worker failed"):
        coord.join()
    clean = shardq.Coordinator()
    with clean.stop_on_exception():
        raise shardq.OutOfRangeError("end of input")
    assert clean.should_stop()
    clean.join()  # a clean stop raises nothing


def test_coordinator_join_also_joins_python_threads():
    coord = shardq.Coordinator()
    done = []

    def work():
        coord.wait_for_stop()
        done.append(1)
    t = threading.Thread(target=work)
    t.start()
    coord.register_thread(t)
    coord.request_stop()
    coord.join(stop_grace_period_secs=BOUND)
    assert done == [1] and not t.is_alive()


def test_batch_refuses_graph_style_values():
    with pytest.raises(shardq.InvalidArgumentError, match="reader's read"):
        shardq.batch([np.zeros(3)], batch_size=2)
    with pytest.raises(shardq.InvalidArgumentError, match="batch_size"):
        shardq.batch(lambda: 1, batch_size=0)


# --- Ctrl-C and exit ---

def run_child(code, env_extra=None):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    env.update(env_extra or {})
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_ctrl_c_interrupts_a_dequeue_blocked_on_the_main_thread():
    child = run_child("""
        import shardq
        q = shardq.FIFOQueue(2)
        try:
            print("ready", flush=True)
            q.dequeue()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
    """)
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=BOUND)
    assert "interrupted" in out, err
    assert child.returncode == 0


def test_the_process_exits_while_runner_threads_still_run():
    child = run_child("""
        import shardq
        q = shardq.FIFOQueue(2)
        coord = shardq.Coordinator()
        shardq.QueueRunner(q, [iter(lambda: b"x", None)] * 2).create_threads(
            coord=coord, start=True)
        print(q.dequeue(), flush=True)
    """)
    out, err = child.communicate(timeout=BOUND)
    assert child.returncode == 0, err
    assert "b'x'" in out


# --- README ---

def test_readme_migrating_from_tf_queues_block_runs(tmp_path, monkeypatch):
    text = (REPO / "README.md").read_text()
    section = text.split("### Migrating from TF 1.x queues", 1)
    assert len(section) == 2, "README.md has no 'Migrating from TF 1.x queues' section"
    blocks = re.findall(r"```python\n(.*?)\n```", section[1].split("\n## ", 1)[0], flags=re.S)
    assert blocks, "the section has no python block"
    for i in range(2):
        (tmp_path / f"part-{i}.txt").write_text("".join(f"{i}-{j}\n" for j in range(50)))
    monkeypatch.chdir(tmp_path)
    namespace = {"files": [str(tmp_path / f"part-{i}.txt") for i in range(2)]}
    for block in blocks:
        # test_readme.py runs the block too, in this process's coordinator
        block = block.replace('name="readme-tf-queues"', 'name="readme-tf-queues-test"')
        exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102
    assert sorted(namespace["tf_lines"]) == sorted(
        f"{i}-{j}".encode() for i in range(2) for j in range(50) for _ in range(2))
