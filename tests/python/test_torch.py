"""shardq.torch.WorkQueueDataset with DataLoader workers and across
processes sharing one `shardq serve`."""
import os
import pathlib
import signal
import subprocess
import sys
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
