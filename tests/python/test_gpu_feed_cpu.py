"""bench/gpu_feed/run in its CPU mode (a small conv net, 32x32 images, a few
hundred records): every row of the GPU feed benchmark runs end to end, so
the script the GPU machine runs cannot rot."""
import json
import math
import os
import pathlib
import subprocess
import sys

import shardq

REPO = pathlib.Path(__file__).resolve().parents[2]
ROWS = ["synthetic", "shardq.data", "WorkQueueDataset", "DataLoader+Python", "shared queue"]


def test_gpu_feed_cpu_mode_runs_every_row(tmp_path):
    out, data = tmp_path / "out", tmp_path / "data"
    env = dict(os.environ)
    # The shardq package these tests run against (conftest put it on the path).
    env["SHARDQ_PYTHONPATH"] = str(pathlib.Path(shardq.__file__).resolve().parents[1])
    proc = subprocess.run(
        [str(REPO / "bench" / "gpu_feed" / "run"), "--device", "cpu", "--minutes", "4",
         "--out", str(out), "--data", str(data)],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    report = json.loads((out / "gpu_feed.json").read_text())
    assert report["device"] == "cpu"
    assert report["data"]["reused"] is False and report["data"]["bytes"] > 512 * 3 * 32 * 32
    rows = report["rows"]
    assert list(rows) == ROWS
    for name, row in rows.items():
        assert row["ok"], (name, row.get("error"))
        assert row["steps"] >= 1 and row["images"] == row["steps"] * 32
        assert 0 < row["images_per_s"] < math.inf and row["step_ms"] > 0, (name, row)
        assert 0 <= row["wait_frac"] <= 1, (name, row)
        assert row["cpu_cores"] > 0 and row["vs_synthetic"] > 0, (name, row)
    assert rows["synthetic"]["vs_synthetic"] == 1.0
    assert len(rows["shared queue"]["processes"]) == 2
    assert "shardq serve" in rows["shared queue"]["note"]

    table = (out / "gpu_feed.md").read_text()
    for name in ROWS:
        assert f"| {name} |" in table
    assert "failed" not in table

    # A second run finds the data set made by the first and reuses it.
    again = subprocess.run(
        [str(REPO / "bench" / "gpu_feed" / "run"), "--device", "cpu", "--minutes", "2",
         "--out", str(tmp_path / "out2"), "--data", str(data), "--rows", "synthetic,shardq.data"],
        capture_output=True, text=True, timeout=300, env=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    second = json.loads((tmp_path / "out2" / "gpu_feed.json").read_text())
    assert second["data"]["reused"] is True and list(second["rows"]) == ROWS[:2]


def test_a_failing_or_crashing_row_is_reported_and_the_others_still_run(tmp_path):
    env = dict(os.environ, SHARDQ_GPU_FEED_FAULT="shardq.data=raise;WorkQueueDataset=crash")
    env["SHARDQ_PYTHONPATH"] = str(pathlib.Path(shardq.__file__).resolve().parents[1])
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(REPO / "bench" / "gpu_feed" / "run"), "--device", "cpu", "--minutes", "2",
         "--out", str(out), "--data", str(tmp_path / "data"),
         "--rows", "shardq.data,WorkQueueDataset,synthetic"],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads((out / "gpu_feed.json").read_text())["rows"]
    assert "RuntimeError: injected fault" in rows["shardq.data"]["error"]
    assert "died of signal SIGSEGV" in rows["WorkQueueDataset"]["error"]
    assert rows["synthetic"]["ok"] and rows["synthetic"]["steps"] >= 1
    table = (out / "gpu_feed.md").read_text()
    assert "| shardq.data | — |" in table and "**failed**: RuntimeError: injected fault" in table


def test_the_python_peer_decodes_what_shardq_parses():
    sys.path.insert(0, str(REPO / "bench" / "gpu_feed"))
    try:
        import gpu_feed
    finally:
        sys.path.pop(0)
    images = [bytes((i * 7 + j) % 256 for j in range(3 * 4 * 5)) for i in range(3)]
    labels = [0, 300, 2**40 + 5]  # one-, two- and six-byte varints
    records = [shardq.serialize_example({"image": img, "label": lab})
               for img, lab in zip(images, labels)]
    parsed = shardq.parse_example(records, {"image": shardq.FixedLen((3, 4, 5), "uint8"),
                                            "label": shardq.FixedLen((), "int64")})
    assert parsed["label"].tolist() == labels
    for i, record in enumerate(records):
        ex = gpu_feed.decode_example(memoryview(record))
        assert ex["label"] == [labels[i]]
        assert bytes(ex["image"][0]) == images[i] == parsed["image"][i].tobytes()


def test_gpu_feed_cuda_without_a_gpu_stops_before_writing_data(tmp_path):
    import pytest
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    out, data = tmp_path / "out", tmp_path / "data"
    env = dict(os.environ)
    env["SHARDQ_PYTHONPATH"] = str(pathlib.Path(shardq.__file__).resolve().parents[1])
    proc = subprocess.run(
        [str(REPO / "bench" / "gpu_feed" / "run"), "--device", "cuda",
         "--out", str(out), "--data", str(data)],
        capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sees no CUDA device" in proc.stderr
    assert not data.exists()
