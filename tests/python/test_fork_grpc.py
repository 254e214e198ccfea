"""A process that used shardq over gRPC, then forks (as PyTorch's DataLoader
forks its workers): a child whose parent had closed its queues reads like
any process; a child forked while its parent had a queue open fails at
once with an error naming the cause, never hangs; the parent goes on.

Each case runs in a fresh interpreter (this pytest process's own gRPC state
is not the one under test), under a timeout that a hang would run into."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE_DIR = os.environ.get("SHARDQ_PYTHONPATH", str(REPO / "build" / "python"))

PRELUDE = """
import json, os, subprocess, sys, time
sys.path.insert(0, {pkg!r})
import shardq
port_file = sys.argv[1]
serve = subprocess.Popen([{shardq_bin!r}, "serve", "--listen", "127.0.0.1:0",
                          "--port-file", port_file],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 30
while not (os.path.exists(port_file) and open(port_file).read().strip()):
    assert time.monotonic() < deadline and serve.poll() is None
    time.sleep(0.02)
address = "127.0.0.1:" + open(port_file).read().strip()
works = []
for i in range(8):
    works.append(os.path.join(os.path.dirname(port_file), "w%d.txt" % i))
    with open(works[-1], "w") as f:
        f.write("line\\n")

def drain(q):
    # Takes and completes q's items to the end: their files' names.
    got = []
    while True:
        try:
            item = q.take()
        except shardq.OutOfRangeError:
            break
        got.append(os.path.basename(item.work))
        q.complete(item)
    return got

def read_all(name):
    q = shardq.WorkQueue(works, address=address, name=name, shuffle=False, num_clients=4)
    got = drain(q)
    q.close()
    return got

def in_child(fn):
    # fn's result (or its error) as JSON through a pipe; the child _exits.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            out = dict(ok=fn())
        except Exception as e:
            out = dict(error=type(e).__name__, message=str(e))
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)
"""


def _run(tmp_path, body, timeout=120):
    shardq_bin = str(REPO / "build" / "bin" / "shardq")
    script = PRELUDE.format(pkg=PACKAGE_DIR, shardq_bin=shardq_bin) + body + """
serve.terminate()
serve.wait(timeout=10)
"""
    child = subprocess.run([sys.executable, "-c", script, str(tmp_path / "port")],
                           capture_output=True, text=True, timeout=timeout)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_a_child_forked_after_the_parent_closed_its_queue_reads_every_item(tmp_path):
    out = _run(tmp_path, """
first = read_all("before")
child = in_child(lambda: read_all("in-child"))
after = read_all("after")
print(json.dumps(dict(first=first, child=child, after=after)))
""")
    expected = sorted(f"w{i}.txt" for i in range(8))
    assert sorted(out["first"]) == expected
    assert "ok" in out["child"], out["child"]
    assert sorted(out["child"]["ok"]) == expected
    assert sorted(out["after"]) == expected


def test_many_children_forked_one_after_another_each_read_their_queue(tmp_path):
    out = _run(tmp_path, """
read_all("parent")
children = [in_child(lambda i=i: read_all("child-%d" % i)) for i in range(4)]
print(json.dumps(children))
""")
    for child in out:
        assert sorted(child.get("ok", [])) == sorted(f"w{i}.txt" for i in range(8)), child


def test_a_child_forked_while_the_parent_holds_an_open_queue_fails_at_once(tmp_path):
    out = _run(tmp_path, """
q = shardq.WorkQueue(works, address=address, name="held", shuffle=False, num_clients=4)
item = q.take()
started = time.monotonic()
child = in_child(lambda: read_all("in-child"))
child["seconds"] = time.monotonic() - started
# The parent's own queue goes on working after the fork.
q.complete(item)
rest = drain(q)
q.close()
print(json.dumps(dict(child=child, parent=[os.path.basename(item.work)] + rest)))
""")
    child = out["child"]
    assert child.get("error") == "FailedPreconditionError", child
    assert "was forked from pid" in child["message"]
    assert "multiprocessing_context='spawn'" in child["message"]
    assert child["seconds"] < 60  # an answer, not a hang (the bound is generous)
    assert sorted(out["parent"]) == sorted(f"w{i}.txt" for i in range(8))


def test_a_child_using_a_queue_it_inherited_fails_at_once(tmp_path):
    out = _run(tmp_path, """
q = shardq.WorkQueue(works, address=address, name="inherited", shuffle=False, num_clients=4)
item = q.take()
def use_inherited():
    # The first item taken ahead is in the inherited object already: the
    # take must refuse it rather than hand it out here too.
    it = q.take()
    return os.path.basename(it.work)
started = time.monotonic()
child = in_child(use_inherited)
child["seconds"] = time.monotonic() - started
q.complete(item)
print(json.dumps(dict(child=child, stats=q.stats()["completed"])))
q.close()
""")
    child = out["child"]
    assert child.get("error") == "FailedPreconditionError", child
    assert "is a fork of it" in child["message"], child
    assert "multiprocessing_context='spawn'" in child["message"]
    assert child["seconds"] < 60
    assert out["stats"] == 1


def test_a_child_cannot_use_the_embedded_queue_its_parent_made(tmp_path):
    # A queue made without an address lives in its process's embedded
    # coordinator, which a fork copies: a child taking from the copy would
    # get again every item the parent gets. It is refused, whether through
    # the inherited WorkQueue or a new one naming the same queue; a queue the
    # child makes under a new name is its own.
    out = _run(tmp_path, """
q = shardq.WorkQueue(works, name="embedded-parent", shuffle=False)
first = q.take()
def child_uses():
    out = {}
    attempts = [
        ("inherited", lambda: q.take()),
        ("same_name", lambda: shardq.WorkQueue(works, name="embedded-parent",
                                               shuffle=False).take()),
        ("own", lambda: os.path.basename(
            shardq.WorkQueue(works, name="child-own", shuffle=False).take().work)),
    ]
    for what, fn in attempts:
        try:
            out[what] = dict(ok=str(fn()))
        except Exception as e:
            out[what] = dict(error=type(e).__name__, message=str(e))
    return out
child = in_child(child_uses)["ok"]
q.complete(first)
got = [os.path.basename(first.work)] + drain(q)
print(json.dumps(dict(child=child, parent=got, stats=q.stats()["completed"])))
q.close()
""")
    child = out["child"]
    assert child["inherited"].get("error") == "FailedPreconditionError", child
    assert "is a fork of it" in child["inherited"]["message"]
    assert child["same_name"].get("error") == "FailedPreconditionError", child
    assert "embedded coordinator of process" in child["same_name"]["message"]
    assert "shardq serve" in child["same_name"]["message"]
    assert child["own"] == dict(ok="w0.txt"), child
    # The parent still reads every item once.
    assert sorted(out["parent"]) == sorted(f"w{i}.txt" for i in range(8))
    assert out["stats"] == 8


def test_a_dataloader_pass_with_workers_after_one_without(tmp_path):
    pytest.importorskip("torch")
    out = _run(tmp_path, """
import torch, shardq.torch
path = os.path.join(os.path.dirname(port_file), "lines.txt")
with open(path, "w") as f:
    f.write("".join("%d\\n" % i for i in range(60)))
def labels(workers, name):
    ds = shardq.torch.WorkQueueDataset([path], reader="text", batch_size=5, num_slices=6,
                                       name=name, address=address)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    return sorted(int(v) for batch in loader for v in batch)
print(json.dumps(dict(inline=labels(0, "inline"), workers=labels(2, "workers"))))
""", timeout=240)
    assert out["inline"] == list(range(60))
    assert out["workers"] == list(range(60))


def test_close_in_a_child_leaves_the_parents_queue_alone(tmp_path):
    # close() of an inherited queue (a DataLoader worker closing the queue
    # it got through the fork) gives back nothing of the parent's, stops
    # none of its threads, and returns at once.
    out = _run(tmp_path, """
q = shardq.WorkQueue(works, address=address, name="closed-in-child", shuffle=False,
                     num_clients=4)
item = q.take()
def close_inherited():
    q.close()
    return "closed"
started = time.monotonic()
child = in_child(close_inherited)
child["seconds"] = time.monotonic() - started
q.complete(item)
stats = q.stats()
print(json.dumps(dict(child=child, completed=stats["completed"], leased=stats["leased"])))
q.close()
""")
    assert out["child"].get("ok") == "closed", out["child"]
    assert out["child"]["seconds"] < 60  # an answer, not a hang (the bound is generous)
    assert out["completed"] == 1
