"""What the coordinator publishes: /metrics in Prometheus text, the status
page, and TensorBoard event files read back with the TFRecord framing and
protobuf messages generated from proto/shardq/tensorboard.proto."""
import importlib
import re
import struct
import sys
import time
import urllib.request

import pytest
from grpc_tools import protoc

from cli_helpers import REPO, make_text_files, run


@pytest.fixture(scope="module")
def tb_pb2(tmp_path_factory):
    out = tmp_path_factory.mktemp("tbstubs")
    assert protoc.main(["protoc", f"-I{REPO}", f"--python_out={out}",
                        str(REPO / "proto" / "shardq" / "tensorboard.proto")]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("proto.shardq.tensorboard_pb2")
    finally:
        sys.path.remove(str(out))


def read_records(path):
    """TFRecord framing: u64 length, u32 crc, data, u32 crc (crcs checked
    by the C++ tests; here only the framing)."""
    data = path.read_bytes()
    pos, out = 0, []
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        out.append(data[pos + 12:pos + 12 + length])
        pos += 12 + length + 4
    return out


def http_port(log_path):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", log_path.read_text())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError("serve did not print its HTTP address")


def test_metrics_status_page_and_event_files(start_coordinator, tmp_path, tb_pb2):
    logs = tmp_path / "logs"
    c = start_coordinator("--http", "127.0.0.1:0", "--summary-dir", str(logs),
                          "--summary-interval", "0.1")
    files = make_text_files(tmp_path, 3, 10)
    run("create", "--address", c.address, "--name", "obs", "--slices", "6", "--epochs", "2",
        *files)
    run("worker", "--address", c.address, "--name", "obs", "--worker", "w0", "--", "true")
    port = http_port(tmp_path / "serve.log")
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    assert 'shardq_items_completed{queue="obs"} 12' in metrics
    assert 'shardq_items_pending{queue="obs"} 0' in metrics
    assert 'shardq_epoch_items{queue="obs",epoch="1",state="completed"} 6' in metrics
    assert 'shardq_worker_items_completed{queue="obs",worker="w0"} 12' in metrics
    assert "# TYPE shardq_lease_expiries_total counter" in metrics
    # One worker never finds another's item to split.
    assert "# TYPE shardq_splits_total counter" in metrics
    assert 'shardq_splits_total{queue="obs"} 0' in metrics
    assert "# TYPE shardq_split_items_open gauge" in metrics
    assert 'shardq_split_items_open{queue="obs"} 0' in metrics
    assert "shardq_journal" not in metrics  # in memory: no journal
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/").read().decode()
    assert "queue obs" in page and "w0" in page
    assert "splits 0 (0 open)" in page

    time.sleep(0.3)  # at least one sample after the run
    c.stop()         # writes the final sample
    event_files = list(logs.glob("events.out.tfevents.*"))
    assert len(event_files) == 1
    records = read_records(event_files[0])
    first = tb_pb2.Event.FromString(records[0])
    assert first.file_version == "brain.Event:2"
    last = tb_pb2.Event.FromString(records[-1])
    values = {v.tag: v.simple_value for v in last.summary.value}
    # Zeros must be on the wire too (TensorBoard skips values without one).
    assert all(v.HasField("simple_value") for v in last.summary.value)
    assert values["shardq/obs/completed"] == 12
    assert values["shardq/obs/epoch_0/completed"] == 6
    assert values["shardq/obs/leased"] == 0
    assert values["shardq/obs/splits"] == 0
    assert values["shardq/obs/worker/w0/completed"] == 12
    steps = [tb_pb2.Event.FromString(r).step for r in records[1:]]
    assert steps == sorted(steps) and len(steps) >= 2


def test_a_durable_coordinator_publishes_its_journal(start_coordinator, tmp_path):
    c = start_coordinator("--http", "127.0.0.1:0", "--state-dir", str(tmp_path / "state"))
    files = make_text_files(tmp_path, 3, 10)
    run("create", "--address", c.address, "--name", "dur", "--slices", "6", "--epochs", "2",
        *files)
    run("worker", "--address", c.address, "--name", "dur", "--worker", "w0", "--", "true")
    port = http_port(tmp_path / "serve.log")
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    for name in ("commits", "entries", "bytes", "snapshots"):
        assert f"# TYPE shardq_journal_{name}_total counter" in metrics
    values = {k: int(v) for k, v in
              re.findall(r"^(shardq_journal_\w+_total) (\d+)$", metrics, re.M)}
    # Stored before the last completion was answered: the creation, 12
    # grants and 12 completions, in at most that many commits.
    assert values["shardq_journal_entries_total"] >= 25
    assert 1 <= values["shardq_journal_commits_total"] <= values["shardq_journal_entries_total"]
    assert values["shardq_journal_bytes_total"] > 0
