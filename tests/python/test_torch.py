"""shardq.torch.WorkQueueDataset with DataLoader workers and across
processes sharing one `shardq serve`."""
import json
import os
import pathlib
import pickle
import signal
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")

import shardq  # noqa: E402
import shardq.torch  # noqa: E402
from example_data import write_files  # noqa: E402

FEATURES = {"x": shardq.FixedLen((784,), "float32"), "y": shardq.FixedLen((), "int64")}
REPO = pathlib.Path(__file__).resolve().parents[2]


def test_dataloader_workers_share_one_queue_over_two_epochs(tmp_path):
    files = write_files(tmp_path, 4, 25)
    dataset = shardq.torch.WorkQueueDataset(files, reader="tfrecord", features=FEATURES,
                                            batch_size=16, num_epochs=2, num_slices=12)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    labels = []
    for batch in loader:
        assert batch["x"].dtype == torch.float32 and batch["y"].dtype == torch.int64
        assert batch["x"].shape[1:] == (784,) and batch["x"].shape[0] == batch["y"].shape[0]
        assert batch["x"][0, 1].item() == pytest.approx(batch["y"][0].item() + 0.001, rel=1e-5)
        labels += batch["y"].tolist()
    counts = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    assert sorted(counts) == list(range(100))
    assert set(counts.values()) == {2}


def test_text_reader_without_workers(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"{i}\n" for i in range(50)))
    dataset = shardq.torch.WorkQueueDataset([str(path)], reader="text", batch_size=8,
                                            num_slices=5)
    lines = [int(v) for batch in torch.utils.data.DataLoader(dataset, batch_size=None)
             for v in batch]
    assert sorted(lines) == list(range(50))


CHILD = """
import sys, json
sys.path.insert(0, {pkg!r}); sys.path.insert(0, {tests!r})
import torch, shardq, shardq.torch
files = json.loads(sys.argv[1])
ds = shardq.torch.WorkQueueDataset(files, reader="tfrecord", batch_size=8, num_epochs=1,
    num_slices=20, seed=5, name="shared", address=sys.argv[2],
    features={{"y": shardq.FixedLen((), "int64")}})
labels = [int(y) for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1)
          for y in b["y"]]
print(json.dumps(labels))
"""


def test_two_processes_sharing_one_coordinator_split_the_data(tmp_path):
    import json
    files = write_files(tmp_path, 4, 30, width=4)
    port_file = tmp_path / "port"
    serve = subprocess.Popen([str(REPO / "build" / "bin" / "shardq"), "serve", "--listen",
                              "127.0.0.1:0", "--port-file", str(port_file)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        address = f"127.0.0.1:{int(port_file.read_text())}"
        package_dir = os.environ.get("SHARDQ_PYTHONPATH", str(REPO / "build" / "python"))
        script = CHILD.format(pkg=package_dir, tests=str(pathlib.Path(__file__).parent))
        children = [subprocess.Popen([sys.executable, "-c", script, json.dumps(files), address],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                    for _ in range(2)]
        results = []
        for c in children:
            out, err = c.communicate(timeout=120)
            assert c.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
        assert sorted(results[0] + results[1]) == list(range(120))
    finally:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=10)


def test_under_torchrun_without_a_coordinator_is_a_clear_error(tmp_path, monkeypatch):
    files = write_files(tmp_path, 1, 2, width=4)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.delenv("SHARDQ_ADDRESS", raising=False)
    monkeypatch.delenv("SHARDQ_PORT", raising=False)
    with pytest.raises(shardq.FailedPreconditionError, match="SHARDQ_PORT"):
        shardq.torch.WorkQueueDataset(files, reader="tfrecord")


def test_a_worker_waiting_only_for_items_its_parked_siblings_hold_ends_its_pass(text_files):
    # The DataLoader deadlock, without the DataLoader: worker w0 of a pass
    # holds the last item and is parked (a DataLoader worker that yielded a
    # batch is asked for more only after the loop took it, and the loop waits
    # for w1's batch). w1 must end its pass rather than wait for w0's item.
    name = f"parked-{os.getpid()}-{time.monotonic_ns()}"
    files = text_files(1, 10)
    parked = shardq.WorkQueue(files, name=name, split=False, worker_id="rank0-passT-w0")
    reader0 = shardq.TextLineReader()
    _, first = reader0.read_up_to(parked, 3)  # w0 holds the only item, mid-read
    assert len(first) == 3
    waiting = shardq.WorkQueue(files, name=name, split=False, worker_id="rank0-passT-w1")
    source = shardq._shardq._PassSource(waiting, "rank0-passT-")
    result = {}

    def read():
        try:
            shardq.TextLineReader().read_up_to(source, 5)
        except shardq.OutOfRangeError as e:
            result["end"] = str(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive(), "w1 waits forever for the item its parked sibling holds"
    assert "held by the other DataLoader workers" in result["end"]
    # The sibling reads the rest: nothing was skipped.
    _, rest = reader0.read_up_to(parked, 100)
    assert len(first) + len(rest) == 10
    with pytest.raises(shardq.OutOfRangeError):
        reader0.read_up_to(parked, 1)
    assert parked.stats()["finished"]


def test_a_worker_waits_for_an_item_held_by_another_pass(text_files):
    # Items held by a worker outside the pass (another rank, a dead process
    # whose lease will expire) are waited for, as before.
    name = f"other-{os.getpid()}-{time.monotonic_ns()}"
    files = text_files(1, 10)
    other = shardq.WorkQueue(files, name=name, split=False, worker_id="rank1-passU-w0")
    item = other.take()
    waiting = shardq.WorkQueue(files, name=name, split=False, worker_id="rank0-passT-w1")
    source = shardq._shardq._PassSource(waiting, "rank0-passT-")
    got = {}
    t = threading.Thread(
        target=lambda: got.setdefault("lines", shardq.TextLineReader().read_up_to(source, 100)[1]),
        daemon=True)
    t.start()
    t.join(timeout=1.0)
    assert t.is_alive()  # still waiting: rank1 may die and its item come back
    other.release(item)
    t.join(timeout=60)
    assert not t.is_alive() and len(got["lines"]) == 10


def test_waiting_workers_of_two_ranks_end_when_parked_workers_hold_items_crosswise(
        text_files, tmp_path):
    # The torchrun deadlock, without DataLoaders: each rank has a parked
    # worker holding an item and a waiting worker, so rank 0's waiting
    # worker needs rank 1's parked item and rank 1's needs rank 0's. Neither
    # loop moves again unless both waiting workers end their passes (with
    # only siblings counted, test_cluster_coordinator's torchrun test hung
    # about one run in ten). Over gRPC: the holders are live session clients.
    name = f"crosswise-{os.getpid()}-{time.monotonic_ns()}"
    files = text_files(2, 10)
    serve, address = _serve(tmp_path)
    opts = dict(name=name, split=False, take_ahead=0, address=address)
    queues = []
    try:
        parked, readers = {}, {}
        for rank, token in ((0, "T"), (1, "U")):
            parked[rank] = shardq.WorkQueue(files, worker_id=f"rank{rank}-pass{token}-w0", **opts)
            queues.append(parked[rank])
            readers[rank] = shardq.TextLineReader()
            _, first = readers[rank].read_up_to(parked[rank], 3)  # holds one item, mid-read
            assert len(first) == 3
        assert {w: v["held"] for w, v in parked[0].stats()["workers"].items()} == \
            {"rank0-passT-w0": 1, "rank1-passU-w0": 1}
        ends = {}

        def wait(rank, token):
            waiting = shardq.WorkQueue(files, worker_id=f"rank{rank}-pass{token}-w1", **opts)
            queues.append(waiting)
            try:
                shardq.TextLineReader().read_up_to(
                    shardq._shardq._PassSource(waiting, f"rank{rank}-pass{token}-"), 5)
            except shardq.OutOfRangeError as e:
                ends[rank] = str(e)

        threads = [threading.Thread(target=wait, args=a, daemon=True)
                   for a in ((0, "T"), (1, "U"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not any(t.is_alive() for t in threads), "a waiting worker waits for the other rank"
        assert sorted(ends) == [0, 1]
        # The parked workers read the rest of what they hold: nothing
        # skipped. (Each ends once the other has completed its item.)
        rest = {}

        def finish(rank):
            rest[rank] = len(readers[rank].read_up_to(parked[rank], 100)[1])

        threads = [threading.Thread(target=finish, args=(r,), daemon=True) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert rest == {0: 7, 1: 7}
        assert parked[0].stats()["finished"]
    finally:
        for q in queues:
            q.close()
        serve.terminate()
        serve.wait(timeout=60)


STRESS = """
import sys, json
sys.path.insert(0, {pkg!r})
import torch, shardq, shardq.torch
path, address, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
for run in range(runs):
    ds = shardq.torch.WorkQueueDataset([path], reader="text", batch_size=7, num_slices=40,
                                       name=f"stress-{{run}}", address=address)
    lines = sorted(int(v) for batch in torch.utils.data.DataLoader(ds, batch_size=None,
                                                                   num_workers=2)
                   for v in batch)
    assert lines == list(range(200)), (run, len(lines))
    print("run", run, "ok", flush=True)
"""


def _serve(tmp_path):
    port_file = tmp_path / "port"
    serve = subprocess.Popen([str(REPO / "build" / "bin" / "shardq"), "serve", "--listen",
                              "127.0.0.1:0", "--port-file", str(port_file)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not port_file.exists() or not port_file.read_text().strip():
        assert time.monotonic() < deadline and serve.poll() is None
        time.sleep(0.02)
    return serve, f"127.0.0.1:{int(port_file.read_text())}"


def test_dataloader_with_two_workers_never_hangs_over_40_passes(tmp_path):
    # Each pass: a fresh queue and DataLoader(num_workers=2) over 40 slices;
    # before the fix some hung forever (the parked-sibling deadlock above).
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"{i}\n" for i in range(200)))
    serve, address = _serve(tmp_path)
    try:
        package_dir = os.environ.get("SHARDQ_PYTHONPATH", str(REPO / "build" / "python"))
        child = subprocess.Popen([sys.executable, "-c", STRESS.format(pkg=package_dir),
                                  str(path), address, "40"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = child.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            pytest.fail(f"a DataLoader pass hung; finished: {out.count('ok')} of 40\n{err[-3000:]}")
        assert child.returncode == 0, err[-3000:]
        assert out.count("ok") == 40
    finally:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=10)


def test_a_second_pass_over_a_finished_dataset_raises(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"{i}\n" for i in range(30)))
    for workers in (0, 2):
        dataset = shardq.torch.WorkQueueDataset([str(path)], reader="text", batch_size=4,
                                                num_slices=5)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers)
        assert sorted(int(v) for b in loader for v in b) == list(range(30))
        with pytest.raises(shardq.FailedPreconditionError, match="earlier pass"):
            list(loader)


def test_a_worker_that_cannot_reach_its_coordinator_fails_the_dataloader(tmp_path):
    import inspect
    if "connect_timeout" not in inspect.signature(shardq.WorkQueue).parameters:
        pytest.skip("needs WorkQueue(connect_timeout=) (issue 15 item 12)")
    path = tmp_path / "lines.txt"
    path.write_text("0\n")
    with socket_bound_but_not_listening() as address:
        dataset = shardq.torch.WorkQueueDataset([str(path)], reader="text", address=address,
                                                connect_timeout=2)
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2,
                                             timeout=120)
        started = time.monotonic()
        with pytest.raises(shardq.UnavailableError, match=address):
            list(loader)
        assert time.monotonic() - started < 100  # failed, not DataLoader's own timeout


class socket_bound_but_not_listening:
    """127.0.0.1:PORT where nothing accepts: connections are refused."""

    def __enter__(self):
        import socket
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{self._sock.getsockname()[1]}"

    def __exit__(self, *exc):
        self._sock.close()


def test_coordinator_discovery_is_the_cpp_one(tmp_path, monkeypatch):
    # shardq.torch does not parse TF_CONFIG itself: the C++ discovery decides,
    # its errors included.
    files = write_files(tmp_path, 1, 2, width=4)
    for var in ("SHARDQ_ADDRESS", "SHARDQ_PORT", "MASTER_ADDR", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(shardq.InvalidArgumentError, match="TF_CONFIG"):
        shardq.torch.WorkQueueDataset(files, reader="tfrecord")
    # "shardq" as a word but no "shardq" job: no coordinator there, so the
    # dataset starts its own for its DataLoader workers.
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"chief": ["localhost:1"]}, "task": {"type": "chief", "index": 0},
         "environment": "shardq"}))
    dataset = shardq.torch.WorkQueueDataset(files, reader="tfrecord", batch_size=1)
    assert dataset.address.startswith("unix:")
    assert len(list(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2))) == 2


# --- Items are completed when their records are consumed ---
# gRPC state must not be inherited by forked DataLoader workers, so the
# steps that talk to a coordinator run in child processes, and the queue
# is watched from processes of its own.

def _run_child(script, *args, timeout=300):
    package_dir = os.environ.get("SHARDQ_PYTHONPATH", str(REPO / "build" / "python"))
    child = subprocess.run([sys.executable, "-c", script.format(pkg=package_dir), *args],
                           capture_output=True, text=True, timeout=timeout)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


STATS = """
import sys, json
sys.path.insert(0, {pkg!r})
import shardq
queue = shardq.WorkQueue.attach(sys.argv[1], address=sys.argv[2])
stats = queue.stats()
queue.close()
print(json.dumps({{k: v for k, v in stats.items() if k not in ("per_epoch", "workers")}}))
"""


def _stats(name, address):
    return _run_child(STATS, name, address, timeout=60)


CONSUMED = """
import sys, json, subprocess
sys.path.insert(0, {pkg!r})
import shardq, shardq.torch
path, address, name = sys.argv[1], sys.argv[2], sys.argv[3]
dataset = shardq.torch.WorkQueueDataset([path], reader="text", batch_size=7, num_slices=1,
                                        seed=3, name=name, address=address)
it = iter(dataset)  # no DataLoader workers: read in this process
lines = [int(v) for v in next(it)]
stats = shardq.WorkQueue.attach(name, address=address).stats()
lines += [int(v) for batch in it for v in batch]
print(json.dumps(dict(lines=lines, completed=stats["completed"], leased=stats["leased"])))
"""


def test_an_item_is_completed_only_once_its_records_were_consumed(tmp_path):
    # One item of 100 lines, batches of 7: the worker's pipeline reads the
    # whole item ahead at once, but completes it only when the last of its
    # lines has left in a batch.
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"{i}\n" for i in range(100)))
    serve, address = _serve(tmp_path)
    try:
        name = f"consumed-{os.getpid()}"
        r = _run_child(CONSUMED, str(path), address, name)
        assert r["completed"] == 0 and r["leased"] == 1  # after the first batch
        assert sorted(r["lines"]) == list(range(100))
        stats = _stats(name, address)
        assert stats["finished"] and stats["duplicates"] == 0 and stats["released"] == 0
    finally:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=10)


KILLED = """
import sys, os, signal, json, time
sys.path.insert(0, {pkg!r})
import torch, shardq, shardq.torch
path, address, name, workers, mode = sys.argv[1:6]
flag = path + ".first-batch-taken"


class Dying(shardq.torch.WorkQueueDataset):
    # The worker dies mid-item at a point of its own choosing: inside its
    # dataset, once the loop has the first batch (killed from outside, it
    # could die holding a lock of the DataLoader's queues or events, which
    # hangs the loop's shutdown).
    def __iter__(self):
        for i, batch in enumerate(super().__iter__()):
            if i == 2:
                while not os.path.exists(flag):
                    time.sleep(0.01)
                os.kill(os.getpid(), signal.SIGKILL)
            yield batch


make = Dying if mode == "kill" else shardq.torch.WorkQueueDataset
dataset = make([path], reader="text", batch_size=7, num_slices=1, seed=9, name=name,
               address=address, lease_timeout=2)
it = iter(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=int(workers)))
first = [int(v) for v in next(it)]
open(flag, "w").close()
try:
    rest = [int(v) for b in it for v in b]
    died = False
except RuntimeError:
    rest, died = None, True
print(json.dumps(dict(first=first, rest=rest, died=died)))
"""


def test_a_dataloader_worker_killed_mid_item_leaves_it_to_be_read_again(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"{i}\n" for i in range(100)))
    serve, address = _serve(tmp_path)
    try:
        name = f"killed-{os.getpid()}"
        killed = _run_child(KILLED, str(path), address, name, "1", "kill")
        assert killed["died"] and killed["first"] == list(range(7))
        # Completed when read, the item would be lost with the worker; it
        # is still held by the dead worker instead ...
        stats = _stats(name, address)
        assert stats["completed"] == 0 and stats["leased"] == 1
        # ... and another run (a new dataset, as after a restart) reads it
        # again, whole, once its lease expired.
        again = _run_child(KILLED, str(path), address, name, "2", "no")
        assert not again["died"] and sorted(again["first"] + again["rest"]) == list(range(100))
        stats = _stats(name, address)
        assert stats["finished"] and stats["expired"] == 1 and stats["duplicates"] == 0
    finally:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=10)


FULL = """
import sys, json
sys.path.insert(0, {pkg!r})
import torch, shardq, shardq.torch
files, address, name, workers = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
dataset = shardq.torch.WorkQueueDataset(
    files, reader="tfrecord", batch_size=8, num_slices=15, num_epochs=2, seed=4,
    name=name, address=address,
    features={{"x": shardq.FixedLen((4,), "float32"), "y": shardq.FixedLen((), "int64")}})
labels = []
for batch in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers):
    assert isinstance(batch["y"], torch.Tensor) and batch["x"].shape == (len(batch["y"]), 4)
    labels += batch["y"].tolist()
print(json.dumps(labels))
"""


@pytest.mark.parametrize("workers", [2, 3])
def test_a_full_pass_reads_every_record_once_with_consumed_completion(tmp_path, workers):
    files = write_files(tmp_path, 3, 40, width=4)  # 120 records
    serve, address = _serve(tmp_path)
    try:
        name = f"full-{workers}-{os.getpid()}"
        labels = _run_child(FULL, json.dumps(files), address, name, str(workers))
        assert sorted(labels) == sorted(list(range(120)) * 2)
        stats = _stats(name, address)
        assert stats["finished"] and stats["duplicates"] == 0
        assert stats["released"] == 0 and stats["expired"] == 0
    finally:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=10)


def test_a_workers_batch_travels_as_one_shared_storage_and_arrives_as_a_dict():
    # A DataLoader worker copies the parser's arrays into one shared-memory
    # storage; pickled for the training process it is one tensor, rebuilt
    # there as a plain dict of views (no copy).
    import pickle

    import numpy as np
    from torch.multiprocessing.reductions import ForkingPickler

    arrays = {"x": np.arange(12, dtype=np.float32).reshape(3, 4),
              "y": np.array([7, 8, 9], dtype=np.int64),
              "s": np.array([b"a", b"b", b"c"], dtype=object)}
    batch = shardq.torch._pack(arrays)
    # The DataLoader's default_convert rebuilds it from a dict of the same values.
    batch = torch.utils.data._utils.collate.default_convert(batch)
    assert batch["x"].is_shared()
    out = pickle.loads(ForkingPickler.dumps(batch))
    assert type(out) is dict and out["s"] == [b"a", b"b", b"c"]
    assert out["x"].dtype == torch.float32 and out["x"].tolist() == arrays["x"].tolist()
    assert out["y"].tolist() == [7, 8, 9]
    # A value replaced by one outside the storage: sent feature by feature.
    batch["y"] = torch.tensor([1, 2, 3])
    out = pickle.loads(ForkingPickler.dumps(batch))
    assert type(out) is dict and out["y"].tolist() == [1, 2, 3]
    assert out["x"].tolist() == arrays["x"].tolist()


def test_a_slot_is_reused_only_once_the_loop_dropped_every_tensor_of_its_batch():
    # In one process: pickle.loads stands for the training process's side.
    import gc
    import pickle

    import numpy as np
    from torch.multiprocessing.reductions import ForkingPickler

    def batch(v):
        return {"x": np.full((2, 3), v, dtype=np.float32), "y": np.array([v, v], dtype=np.int64)}

    first = pickle.loads(ForkingPickler.dumps(shardq.torch._pack(batch(1))))
    kept_view = first["x"][1]  # a view keeps the slot in use too
    del first
    gc.collect()
    second = pickle.loads(ForkingPickler.dumps(shardq.torch._pack(batch(2))))
    assert kept_view.tolist() == [1, 1, 1] and second["x"].tolist() == [[2] * 3] * 2
    second_ptr = second["x"].data_ptr()
    del second
    gc.collect()
    third = pickle.loads(ForkingPickler.dumps(shardq.torch._pack(batch(3))))
    assert third["x"].data_ptr() == second_ptr  # the freed slot, reused
    assert kept_view.tolist() == [1, 1, 1] and third["y"].tolist() == [3, 3]


def test_a_worker_keeps_as_many_slots_as_its_busiest_moment_needed():
    # Ten batches in flight at once (a DataLoader with a larger
    # prefetch_factor), all let go by the loop, then ten in flight again:
    # the same ten slots serve them. Dropping the free ones beyond a fixed
    # few made a new shared-memory segment (sent to the training process
    # again) for most batches of such a loader: over a hundred a pass.
    ts = shardq._torch_slots
    slots = ts._Slots()
    held = [slots.acquire(4096) for _ in range(10)]
    assert slots.next_id == 10
    for slot in held:
        slot.header[ts._IN_USE] = 0  # as the training process does
    again = [slots.acquire(4096) for _ in range(10)]
    assert slots.next_id == 10 and slots.dropped == []
    assert sorted(s.id for s in again) == list(range(10))
    # Batches that grew: none of the free slots holds one, so each gets a
    # new slot; the worker keeps at most that peak (10) and _SPARE more
    # slots, dropping the smallest free ones beyond that.
    for slot in again:
        slot.header[ts._IN_USE] = 0
    large = [slots.acquire(8192) for _ in range(6)]
    assert [s.id for s in large] == list(range(10, 16))
    assert len(slots.slots) == 10 + ts._SPARE
    assert len(slots.dropped) == 2 and all(sid < 10 for sid in slots.dropped)


def test_batches_kept_by_the_loop_are_never_overwritten(tmp_path):
    files = write_files(tmp_path, 4, 40)  # x[r, 1] = y[r] + 0.001 in every record
    dataset = shardq.torch.WorkQueueDataset(files, reader="tfrecord", features=FEATURES,
                                            batch_size=8, num_slices=8)
    kept = list(torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2))
    labels = []
    for batch in kept:
        assert torch.allclose(batch["x"][:, 1], batch["y"].to(torch.float32) + 0.001)
        labels += batch["y"].tolist()
    assert sorted(labels) == list(range(160))


def test_a_worker_parses_batches_straight_into_its_free_slots(tmp_path):
    # As in a DataLoader worker (one process here: pickle.loads stands for
    # the training process): once the worker has slots, the parser writes
    # each batch into a free one and _pack sends it without a copy.
    import gc
    import pickle

    from torch.multiprocessing.reductions import ForkingPickler

    files = write_files(tmp_path, 4, 80, width=16)  # 320 records, 40 batches of 8
    queue = shardq.WorkQueue(files, num_slices=8, num_clients=8,  # items a pipeline may hold
                             name=f"slots-{os.getpid()}")
    slots = shardq._torch_slots._Slots()
    slots.parsing = True
    features = {"x": shardq.FixedLen((16,), "float32"), "y": shardq.FixedLen((), "int64")}
    ds = (shardq.data.from_queue(queue, reader="tfrecord", complete="consumed").batch(8)
          ._parse_example_into(features, 0, slots.pool).prefetch(2))
    old, shardq._torch_slots._slots = shardq._torch_slots._slots, slots
    try:
        placed, batches, labels = 0, 0, []
        for arrays in ds:
            batches += 1
            into = shardq._torch_slots._placed(slots, arrays)
            placed += into is not None
            out = pickle.loads(ForkingPickler.dumps(shardq.torch._pack(arrays)))
            del arrays
            assert torch.allclose(out["x"][:, 1], out["y"].to(torch.float32) + 0.001)
            labels += out["y"].tolist()
            if into is not None:  # the loop's tensors are views of that slot
                end = into.base + shardq._torch_slots._HEADER + into.capacity
                assert into.base <= out["x"].data_ptr() < end
            del out
            gc.collect()
    finally:
        shardq._torch_slots._slots = old
        queue.close()
    assert sorted(labels) == list(range(320))
    # Each batch the parser could not place was copied into a new slot, so
    # only the first few are copied: about as many as are in flight at once
    # (the prefetch buffers, the one being parsed, the loop's), not a fixed
    # count, which the threads' timing decides.
    made = slots.next_id
    assert placed == batches - made, (placed, batches, made)
    assert placed >= 3 * batches // 4, (placed, batches, made)


def test_a_strided_view_of_a_slot_is_copied_and_frees_that_slot():
    # A batch whose array lies in a slot but is not contiguous (a strided
    # view) cannot be sent as a view of that slot's bytes: it is copied into
    # another slot, with its values, and the slot it lay in is free again.
    import numpy as np

    slots = shardq._torch_slots._Slots()
    old, shardq._torch_slots._slots = shardq._torch_slots._slots, slots
    try:
        held = slots.acquire(64 * 4)
        area = held.flat[shardq._torch_slots._HEADER:].numpy()[:64 * 4].view(np.float32)
        area[:] = np.arange(64, dtype=np.float32)
        strided = area.reshape(8, 8)[:, ::2]  # in the slot, not contiguous
        assert slots.holding(strided) is held and held.header[0] == 1
        out = shardq.torch._pack({"x": strided})
        assert out["x"].tolist() == strided.tolist()
        assert slots.holding(out["x"].numpy()) is not held
        assert held.header[0] == 0  # free again: its batch was copied out
    finally:
        shardq._torch_slots._slots = old


def test_works_given_as_one_string_are_refused(tmp_path):
    # list("a.tfrecord") is its characters: refused as WorkQueue does.
    path = write_files(tmp_path, 1, 2, width=2)[0]
    with pytest.raises(shardq.InvalidArgumentError, match="not a single string"):
        shardq.torch.WorkQueueDataset(path)
    with pytest.raises(shardq.InvalidArgumentError, match="works must be strings or paths"):
        shardq.torch.WorkQueueDataset([3])
    assert shardq.torch.WorkQueueDataset([pathlib.Path(path)]).works == [path]


def test_a_job_of_several_ranks_must_name_its_queue(tmp_path, monkeypatch):
    # Without a name each rank made a queue of its own (a fresh default
    # name) and read all the data: every record once per rank, silently.
    files = write_files(tmp_path, 1, 4, width=2)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(shardq.InvalidArgumentError, match="same name"):
        shardq.torch.WorkQueueDataset(files, reader="tfrecord", address="127.0.0.1:1")


def test_ranks_without_a_seed_share_one_queue(tmp_path):
    # seed=None on every rank: the coordinator draws one seed when the
    # queue is made and the other ranks attach to it (a seed drawn by each
    # rank's dataset made the second rank's attach fail).
    files = write_files(tmp_path, 2, 5, width=2)
    serve, address = _serve(tmp_path)
    try:
        name = f"seedless-{os.getpid()}"
        datasets = [shardq.torch.WorkQueueDataset(files, reader="tfrecord", batch_size=2,
                                                  name=name, address=address,
                                                  features={"y": shardq.FixedLen((), "int64")})
                    for _ in range(2)]
        its = [iter(d) for d in datasets]
        labels = []
        done = [False, False]
        while not all(done):  # the two "ranks" take turns
            for k, it in enumerate(its):
                if done[k]:
                    continue
                try:
                    labels += next(it)["y"].tolist()
                except StopIteration:
                    done[k] = True
        assert sorted(labels) == list(range(10))
    finally:
        serve.terminate()
        serve.wait(timeout=30)


# The DataLoader's prefetch_factor and start method as given. The queue
# lets a worker hold enough items (num_clients) that none completes early
# for want of room, so only the counting of consumed batches decides.
DIES_MID_PASS = """
import sys, json, os
sys.path.insert(0, {pkg!r})
import torch, shardq, shardq.torch
files, address, name, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
if __name__ == "__main__":
    dataset = shardq.torch.WorkQueueDataset(
        files, reader="tfrecord", batch_size=4, num_slices=30, seed=2, name=name,
        address=address, lease_timeout=2.0, num_clients=64,
        features={{"y": shardq.FixedLen((), "int64")}})
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2,
                                         prefetch_factor={prefetch}, multiprocessing_context={context!r})
    with open(out, "w") as f:
        for step, batch in enumerate(loader):
            if step == 5:
                os._exit(9)  # the training process dies, its workers with it
            f.write(json.dumps(batch["y"].tolist()) + "\\n")  # trained on
            f.flush()
"""


def test_a_worker_reads_prefetch_factor_from_its_dataloader_or_warns(tmp_path):
    files = write_files(tmp_path, 1, 4, width=2)

    def dataset():
        return shardq.torch.WorkQueueDataset(files, reader="tfrecord", address="127.0.0.1:1")

    class Fetches(torch.utils.data.dataloader._BaseDataLoaderIter):
        def __init__(self, dataset, prefetch_factor):  # as torch's iterator keeps them
            self._dataset, self._prefetch_factor = dataset, prefetch_factor

        def start_worker(self, copy):  # what a forked worker runs on
            return copy._worker_defer()

    mine = dataset()
    assert Fetches(mine, 5).start_worker(mine) == 6
    assert mine._worker_defer() == 6  # kept for the worker's later passes
    one = dataset()
    assert Fetches(one, 1).start_worker(one) == 2
    # A loader with workers over a dataset wrapping this one is this one's;
    # one without workers (prefetch_factor None) is not.
    wrapped = dataset()
    wrapper = torch.utils.data.ChainDataset([wrapped])
    loader = Fetches(wrapper, 7)
    loader._num_workers = 2
    assert loader.start_worker(wrapped) == 8
    lost = dataset()
    with pytest.warns(RuntimeWarning, match="prefetch_factor could not be found.*assuming 2"):
        assert Fetches(dataset(), None).start_worker(lost) == 3
    # Pickled inside the loader (for a spawned worker), the dataset carries
    # the factor to the worker.
    sent = dataset()

    class Spawns(Fetches):
        def pickle_for_worker(self):
            return pickle.dumps(self._dataset)

    copy = pickle.loads(Spawns(sent, 4).pickle_for_worker())
    assert copy._worker_defer() == 5


@pytest.mark.parametrize("prefetch,context", [(2, "fork"), (6, "fork"), (4, "spawn")])
def test_a_training_process_that_dies_loses_no_record(tmp_path, prefetch, context):
    # The DataLoader fetches batches from its workers ahead of the loop
    # (prefetch_factor per worker). Their items were completed on hand-over,
    # so when the training process died, the records of the fetched but
    # untrained batches were lost. Now an item completes only once the loop
    # is done with its batches: what the dead process did not train on is
    # read again after the lease timeout. A worker is asked for its batch k
    # once the loop has taken its batch k - prefetch_factor; counting a batch
    # consumed three batches later (right for the default 2 only) lost 7 of
    # 12 fetched batches with 6. The worker counts prefetch_factor + 1, read
    # from the DataLoader that runs it (in the worker's frames when forked,
    # kept when the dataset is pickled for a spawned one).
    files = write_files(tmp_path, 3, 40, width=2)  # 120 records, 30 items
    serve, address = _serve(tmp_path)
    try:
        name = f"dies-p{prefetch}-{context}-{os.getpid()}"
        trained_file = tmp_path / "trained.jsonl"
        package_dir = os.environ.get("SHARDQ_PYTHONPATH", str(REPO / "build" / "python"))
        script = tmp_path / "dies.py"  # a file: a spawned worker imports the main module
        script.write_text(DIES_MID_PASS.format(pkg=package_dir, prefetch=prefetch,
                                               context=context))
        child = subprocess.run(
            [sys.executable, str(script), json.dumps(files), address, name, str(trained_file)],
            capture_output=True, text=True, timeout=300)
        assert child.returncode == 9, child.stderr[-3000:]
        trained = [y for line in trained_file.read_text().splitlines() for y in json.loads(line)]
        assert len(trained) == 5 * 4
        # The dead process's DataLoader workers may outlive it for a moment,
        # holding items (their open sessions keep them leased). A pass that
        # finds the rest held by such live workers ends rather than wait for
        # them (py_torch_support.cc), so read the rest once they gave their
        # items back (or their leases expired): seen once in ~40 runs.
        watcher = shardq.WorkQueue.attach(name, address=address)
        deadline = time.monotonic() + 120
        while watcher.stats()["leased"] > 0:
            assert time.monotonic() < deadline, watcher.stats()
            time.sleep(0.05)
        watcher.close()
        rest = shardq.torch.WorkQueueDataset(
            files, reader="tfrecord", batch_size=4, num_slices=30, seed=2, name=name,
            address=address, lease_timeout=2.0, num_clients=64,
            features={"y": shardq.FixedLen((), "int64")})
        again = [y for batch in rest for y in batch["y"].tolist()]
        stats = shardq.WorkQueue.attach(name, address=address).stats()
        assert set(trained) | set(again) == set(range(120)), \
            f"lost: {sorted(set(range(120)) - set(trained) - set(again))}, queue: {stats}"
        assert stats["finished"]
    finally:
        serve.terminate()
        serve.wait(timeout=30)
