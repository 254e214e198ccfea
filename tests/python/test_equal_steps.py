"""equal_steps=True: every rank yields the same number of batches per epoch
(agreed through the coordinator), so synchronous DDP training never hangs
on uneven shares; padding rows are masked, real records used once."""
import collections
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")

import shardq  # noqa: E402
import shardq.data  # noqa: E402
import shardq.torch  # noqa: E402
from example_data import write_files  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = os.environ.get("SHARDQ_PYTHONPATH", str(REPO / "build" / "python"))


def _serve(tmp_path):
    port_file = tmp_path / "port"
    serve = subprocess.Popen([str(REPO / "build" / "bin" / "shardq"), "serve", "--listen",
                              "127.0.0.1:0", "--port-file", str(port_file)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not port_file.exists() or not port_file.read_text().strip():
        assert time.monotonic() < deadline and serve.poll() is None
        time.sleep(0.02)
    return serve, f"127.0.0.1:{int(port_file.read_text())}"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


RANK = """
import json, sys, time
sys.path.insert(0, {pkg!r})
import torch, torch.distributed as dist
import shardq, shardq.torch
files, address, slow = json.loads(sys.argv[1]), sys.argv[2], float(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
features = {{"x": shardq.FixedLen((4,), "float32"), "y": shardq.FixedLen((), "int64")}}
ds = shardq.torch.WorkQueueDataset(files, reader="tfrecord", features=features, batch_size=4,
                                   num_epochs=2, seed=3, name="ddp", address=address,
                                   equal_steps=True)
loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
out = []
for epoch in range(2):
    ds.set_epoch(epoch)
    steps, labels, padding_rows, bad_padding = 0, [], 0, 0
    for batch in loader:
        mask = batch["_mask"]
        assert mask.dtype == torch.bool and mask.shape[0] == batch["x"].shape[0]
        labels += batch["y"][mask].tolist()
        padding_rows += int((~mask).sum())
        bad_padding += int(batch["x"][~mask].abs().sum() != 0)
        pred = model(batch["x"]).squeeze(-1)
        loss = ((pred - batch["y"].float()) ** 2 * mask.float()).sum() / max(1, int(mask.sum()))
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        time.sleep(slow)
    out.append(dict(steps=steps, labels=labels, padding_rows=padding_rows,
                    bad_padding=bad_padding))
dist.destroy_process_group()
print(json.dumps(out))
"""


def test_ddp_with_equal_steps_finishes_with_the_same_steps_on_every_rank(tmp_path):
    # 3 items (one per file) for 2 ranks x 2 DataLoader workers: some worker
    # reads nothing in each epoch, so padding is certain, and the shares of
    # the ranks differ; rank 1 trains 4x slower than rank 0.
    files = write_files(tmp_path, 3, 20, width=4)
    serve, address = _serve(tmp_path)
    port = _free_port()
    ranks = []
    try:
        for rank, slow in ((0, 0.005), (1, 0.02)):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
            ranks.append(subprocess.Popen(
                [sys.executable, "-c", RANK.format(pkg=PACKAGE), json.dumps(files), address,
                 str(slow)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
        results = []
        for p in ranks:
            try:
                out, err = p.communicate(timeout=300)  # a hang guard only
            except subprocess.TimeoutExpired:
                for q in ranks:
                    q.kill()
                pytest.fail("a rank hung")
            assert p.returncode == 0, err[-4000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=10)
    total_padding = 0
    for epoch in range(2):
        r0, r1 = results[0][epoch], results[1][epoch]
        assert r0["steps"] == r1["steps"], f"epoch {epoch}: {r0['steps']} != {r1['steps']}"
        counts = collections.Counter(r0["labels"] + r1["labels"])
        assert sorted(counts) == list(range(60)), f"epoch {epoch}"
        assert set(counts.values()) == {1}, f"epoch {epoch}: a record used twice"
        assert r0["bad_padding"] == 0 and r1["bad_padding"] == 0
        total_padding += r0["padding_rows"] + r1["padding_rows"]
    assert total_padding > 0


def test_data_equal_steps_gives_two_participants_the_same_batches(tmp_path):
    # Two participants (threads standing for two ranks) share a queue of
    # 2 items: whatever each reads, both yield the same number of batches.
    import threading
    files = write_files(tmp_path, 2, 6, width=2)
    features = {"y": shardq.FixedLen((), "int64")}
    got = {}

    def run(worker):
        q = shardq.WorkQueue(files, name="steps-data", num_clients=8, worker_id=worker, seed=1)
        ds = (shardq.data.from_queue(q, equal_steps=True, participants=2)
              .batch(4).parse_example(features))
        got[worker] = list(ds)

    threads = [threading.Thread(target=run, args=(w,)) for w in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)  # a hang guard only
    assert not any(t.is_alive() for t in threads), "a participant hung"
    assert len(got["a"]) == len(got["b"])
    batches = got["a"] + got["b"]
    real = [int(y) for batch in batches for y in batch["y"][batch["_mask"]]]
    assert sorted(real) == list(range(12))
    for batch in batches:
        if not batch["_mask"].any():
            assert batch["y"].shape == (4,) and not batch["y"].any()


def test_equal_steps_needs_batches(tmp_path):
    files = write_files(tmp_path, 1, 2, width=2)
    q = shardq.WorkQueue(files, name="steps-nobatch", worker_id="a")
    ds = shardq.data.from_queue(q, equal_steps=True, participants=1)
    with pytest.raises(shardq.InvalidArgumentError, match="batch"):
        list(ds)



def _participant(paths, name, worker, got, steps_timeout, consume=lambda b: b,
                 num_clients=8, participants=2):
    """One participant of an equal-steps pass over `paths` (batches of 2):
    consume(batch) for each; got[worker] = the batches, or the exception."""
    try:
        q = shardq.WorkQueue(paths, name=name, num_clients=num_clients, worker_id=worker,
                             seed=1)
        ds = (shardq.data.from_queue(q, equal_steps=True, participants=participants,
                                     steps_timeout=steps_timeout)
              .batch(2).parse_example({"y": shardq.FixedLen((), "int64")}))
        out = []
        for batch in ds:
            consume(batch)
            out.append(batch)
        got[worker] = out
    except Exception as e:  # noqa: BLE001 - handed to the test
        got[worker] = e


def _started(*args, **kwargs):
    """_participant in a thread of its own, started."""
    import threading
    t = threading.Thread(target=_participant, args=args, kwargs=kwargs)
    t.start()
    return t


def _joined(*threads):
    for t in threads:
        t.join(timeout=120)  # a hang guard only
        assert not t.is_alive(), "a participant hung"


def test_a_participant_that_never_reports_ends_the_wait_with_an_error(tmp_path):
    # Two participants expected, one runs (the other died before its first
    # report): the one with no batch left raises instead of waiting forever.
    got = {}
    _joined(_started(write_files(tmp_path, 2, 8, width=2), "steps-missing", "a", got, 1.0))
    error = got["a"]
    assert isinstance(error, shardq.DeadlineExceededError), error
    assert isinstance(error, TimeoutError)
    message = str(error)
    assert "'a'" in message and "1 of 2 participants done" in message
    assert "1 ever reported" in message and "steps_timeout" in message


def test_a_participant_that_stops_reporting_mid_pass_ends_the_wait_with_an_error(tmp_path):
    # Participant b reports its first batch, then stops (as a rank killed
    # mid-pass does): a pads up to b's count, then raises.
    class Died(Exception):
        pass

    def consume_b(batch):
        raise Died()

    paths = write_files(tmp_path, 2, 8, width=2)
    got = {}
    # b first, alone, so that it holds real records when it dies (a
    # participant that ran dry first and then died is done already).
    _joined(_started(paths, "steps-died", "b", got, 1.0, consume_b, num_clients=1))
    _joined(_started(paths, "steps-died", "a", got, 1.0, num_clients=1))
    assert isinstance(got["b"], Died)
    assert isinstance(got["a"], shardq.DeadlineExceededError), got["a"]
    assert "1 of 2 participants done" in str(got["a"])
    assert "2 ever reported" in str(got["a"])


def test_a_slow_participant_that_keeps_reporting_is_waited_for(tmp_path):
    # b starts first and takes 0.2 s a batch over at least 30 batches (it
    # holds one item or both); a, started once b has its first batch, runs
    # dry at once and waits for b for 6 s or more, longer than
    # steps_timeout (4 s) in all, but hears a report every 0.2 s: no error,
    # the same count.
    import threading
    paths = write_files(tmp_path, 2, 60, width=2)
    got = {}
    b_started = threading.Event()

    def slowly(batch):
        b_started.set()
        time.sleep(0.2)

    slow = _started(paths, "steps-slow", "b", got, 4.0, slowly)
    assert b_started.wait(timeout=60) and "b" not in got
    _joined(_started(paths, "steps-slow", "a", got, 4.0), slow)
    for worker in "ab":
        assert not isinstance(got[worker], Exception), got[worker]
    assert len(got["a"]) == len(got["b"])
    real = sorted(int(y) for w in "ab" for batch in got[w] for y in batch["y"][batch["_mask"]])
    assert real == list(range(120))


def test_steps_timeout_must_be_positive(tmp_path):
    files = write_files(tmp_path, 1, 2, width=2)
    q = shardq.WorkQueue(files, name="steps-timeout", worker_id="a")
    with pytest.raises(shardq.InvalidArgumentError, match="steps_timeout"):
        shardq.data.from_queue(q, equal_steps=True, participants=1, steps_timeout=0)
    with pytest.raises(shardq.InvalidArgumentError, match="steps_timeout"):
        shardq.torch.WorkQueueDataset(files, equal_steps=True, steps_timeout=-1)


def test_a_job_restarted_by_torchrun_agrees_its_steps_afresh(tmp_path, monkeypatch):
    # The coordinator outlives the job: the participant's counts from
    # before the restart stay on it. After torchrun restarts the job (its
    # restart count rises), the pass starts from count 0 again: a pass of
    # its own, not an error. Without the restart count it is refused,
    # naming the restart.
    paths = write_files(tmp_path, 4, 8, width=2)
    features = {"y": shardq.FixedLen((), "int64")}

    def run(batches=None):
        q = shardq.WorkQueue(paths, name="steps-restart", num_clients=4, worker_id="a",
                             seed=1)
        ds = (shardq.data.from_queue(q, equal_steps=True, participants=1)
              .batch(2).parse_example(features))
        it = iter(ds)
        got = [next(it) for _ in range(batches)] if batches else list(it)
        it.close()
        q.close()  # gives back what it holds, as a killed worker's lease would
        return got

    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    first = run(batches=3)
    with pytest.raises(shardq.InvalidArgumentError, match="restarted participant"):
        run()
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    rest = run()
    assert len(rest) > 0
    labels = [int(y) for batch in first + rest for y in batch["y"][batch["_mask"]]]
    # Every record at least once (a restart may repeat what was in flight).
    assert set(labels) == set(range(32))
