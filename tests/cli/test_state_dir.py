"""Nothing silent (issue 15): a damaged state dir makes `shardq serve` exit
non-zero with DATA_LOSS naming the file (item 3); `create` refuses to attach
with other split settings (item 8); `restore` refuses residual ranges that
are not part of their planned item (item 9); names and items with control
characters are refused with INVALID_ARGUMENT naming the field (item 10)."""
import importlib
import os
import signal
import subprocess
import sys

import grpc
import pytest
from grpc_tools import protoc

from cli_helpers import REPO, Coordinator, run, shardq_bin

ITEMS = 200
COMPLETED = 150


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    out = tmp_path_factory.mktemp("stubs")
    rc = protoc.main(["protoc", f"-I{REPO}", f"--python_out={out}", f"--grpc_python_out={out}",
                      str(REPO / "proto" / "shardq" / "coordinator.proto"),
                      str(REPO / "proto" / "shardq" / "journal.proto")])
    assert rc == 0
    sys.path.insert(0, str(out))
    try:
        return (importlib.import_module("proto.shardq.coordinator_pb2"),
                importlib.import_module("proto.shardq.coordinator_pb2_grpc"),
                importlib.import_module("proto.shardq.journal_pb2"))
    finally:
        sys.path.remove(str(out))


def stub_of(pb, address):
    return pb[1].CoordinatorStub(grpc.insecure_channel(address))


def config(pb, name, items, **kw):
    return pb[0].QueueConfig(name=name, items=items, num_epochs=1, shuffle=kw.get("shuffle", True),
                             seed=5, seed_set=True, num_clients=1, lease_timeout_ms=60000)


def acknowledged_state(tmp_path, pb, stop):
    """A state dir whose coordinator acknowledged COMPLETED completions of
    ITEMS, in plan order, then stopped with `stop` (SIGTERM or SIGKILL)."""
    state = tmp_path / "state"
    c = Coordinator(tmp_path, "--state-dir", str(state))
    try:
        stub = stub_of(pb, c.address)
        m = pb[0]
        stub.CreateQueue(m.CreateQueueRequest(
            config=config(pb, "q", [f"i{k}" for k in range(ITEMS)], shuffle=False)))
        for _ in range(COMPLETED):
            item = stub.Take(m.TakeRequest(queue="q", worker="w", max_items=1)).items[0]
            assert not stub.Complete(m.CompleteRequest(queue="q", worker="w",
                                                       lease_id=item.lease_id)).duplicate
    finally:
        if c.proc.poll() is None:
            os.kill(c.proc.pid, stop)
        c.proc.wait(timeout=30)
        c.log.close()
    return state


def serve_refuses(state, *files):
    """`shardq serve --state-dir STATE` exits at once, non-zero, with
    DATA_LOSS naming each of `files`."""
    proc = subprocess.run([shardq_bin(), "serve", "--listen", "127.0.0.1:0",
                           "--state-dir", str(state)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0, proc.stdout
    assert "DATA_LOSS" in proc.stderr, proc.stderr
    for f in files:
        assert f in proc.stderr, proc.stderr
    return proc.stderr


def completed_after_restart(tmp_path, pb, state):
    c = Coordinator(tmp_path, "--state-dir", str(state))
    try:
        stub = stub_of(pb, c.address)
        return stub.Status(pb[0].StatusRequest(queue="q")).queues[0].completed
    finally:
        c.stop()


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_an_undamaged_state_dir_recovers_every_acknowledged_completion(tmp_path, pb, stop):
    state = acknowledged_state(tmp_path, pb, stop)
    assert completed_after_restart(tmp_path, pb, state) == COMPLETED


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL])
def test_a_truncated_database_refuses_to_start(tmp_path, pb, stop):
    state = acknowledged_state(tmp_path, pb, stop)
    os.truncate(state / "state.db", 0)
    serve_refuses(state, "state.db", "COMMITTED")
    assert os.path.getsize(state / "state.db") == 0  # left as found


def test_a_deleted_wal_after_a_crash_refuses_to_start(tmp_path, pb):
    state = acknowledged_state(tmp_path, pb, signal.SIGKILL)
    os.remove(state / "state.db-wal")
    serve_refuses(state, "state.db-wal")


def test_a_truncated_wal_after_a_crash_refuses_to_start(tmp_path, pb):
    state = acknowledged_state(tmp_path, pb, signal.SIGKILL)
    wal = state / "state.db-wal"
    os.truncate(wal, os.path.getsize(wal) // 2)
    serve_refuses(state, "state.db-wal")


def test_a_flipped_byte_in_a_snapshots_completion_bitset_refuses_to_start(tmp_path, pb):
    state = acknowledged_state(tmp_path, pb, signal.SIGTERM)  # a clean stop writes a snapshot
    db = state / "state.db"
    data = bytearray(db.read_bytes())
    # Items 0..149 of 200 completed: 18 bytes of ones, then bits 144..149.
    bitset = b"\xff" * 18 + b"\x3f" + b"\x00" * 6
    at = data.find(bitset)
    assert at >= 0 and data.find(bitset, at + 1) < 0
    data[at + 18] ^= 0x01  # item 144 no longer completed
    db.write_bytes(bytes(data))
    err = serve_refuses(state, "state.db")
    assert "snapshot of queue 'q'" in err


def test_a_deleted_committed_file_refuses_to_start(tmp_path, pb):
    state = acknowledged_state(tmp_path, pb, signal.SIGTERM)
    os.remove(state / "COMMITTED")
    serve_refuses(state, "COMMITTED")


def test_a_new_state_dir_starts(tmp_path, pb):
    c = Coordinator(tmp_path, "--state-dir", str(tmp_path / "fresh"))
    c.stop()
    assert (tmp_path / "fresh" / "COMMITTED").exists()


def test_create_refuses_to_attach_with_other_split_settings(coordinator, tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("x\n" * 100)
    base = ["create", "--address", coordinator.address, "--name", "s"]
    assert "created" in run(*base, "--no-split", str(data)).stdout
    proc = run(*base, str(data), check=False)
    assert proc.returncode != 0 and "attached" not in proc.stdout
    assert "split (existing off (--no-split), requested on)" in proc.stderr, proc.stderr
    assert "attached" in run(*base, "--no-split", str(data)).stdout

    run("create", "--address", coordinator.address, "--name", "r", str(data))
    proc = run("create", "--address", coordinator.address, "--name", "r",
               "--split-min-residual", "4096", str(data), check=False)
    assert proc.returncode != 0
    assert "split_min_residual (existing 1, requested 4096)" in proc.stderr, proc.stderr


def test_restore_refuses_residuals_outside_their_planned_item(coordinator, tmp_path, pb):
    data = tmp_path / "d.txt"
    data.write_text("line\n" * 40000)  # 200,000 bytes
    run("create", "--address", coordinator.address, "--name", "ck", "--slices", "2", str(data))
    ck = tmp_path / "ck.bin"
    run("snapshot", "--address", coordinator.address, "--name", "ck", "--out", str(ck))
    header = b"SHARDQ-CHECKPOINT-1\n"
    raw = ck.read_bytes()
    assert raw.startswith(header)
    checkpoint = pb[2].Checkpoint.FromString(raw[len(header):])
    planned = checkpoint.config.items[0]
    work = planned.split("?")[0]

    def restore_with(residuals):
        doctored = pb[2].Checkpoint()
        doctored.CopyFrom(checkpoint)
        for item in residuals:
            doctored.residual.add(epoch=0, index=0, item_override=item)
        bad = tmp_path / "bad.bin"
        bad.write_bytes(header + doctored.SerializeToString())
        return run("restore", "--address", coordinator.address, "--name", "ck2",
                   "--in", str(bad), check=False)

    # The report: 100,000 residual strings for one planned item.
    proc = restore_with([f"{work}?start={k}&end={k + 1}" for k in range(100000)])
    assert proc.returncode != 0 and "INVALID_ARGUMENT" in proc.stderr, proc.stderr
    assert "epoch 0 item 0" in proc.stderr and "65536" in proc.stderr, proc.stderr
    for residuals, why in [
        ([f"{work}?start=0&end=999999"], "outside the planned item"),
        (["/etc/passwd"], "does not read the planned item"),
        ([f"{work}?start=0&end=100", f"{work}?start=50&end=150"], "overlap"),
    ]:
        proc = restore_with(residuals)
        assert proc.returncode != 0, residuals
        assert "INVALID_ARGUMENT" in proc.stderr and why in proc.stderr, proc.stderr
        assert "item 0" in proc.stderr
    # Nothing was created by the refusals; a sound residual restores.
    assert "restored" in restore_with([f"{work}?start=100&end=200"]).stdout


@pytest.mark.parametrize("name", ["a\nb", "nul\x00inside", "tab\there", "", "x" * 257])
def test_names_with_control_characters_or_bad_lengths_are_refused(coordinator, pb, name):
    m = pb[0]
    stub = stub_of(pb, coordinator.address)
    with pytest.raises(grpc.RpcError) as err:
        stub.CreateQueue(m.CreateQueueRequest(config=config(pb, name, ["a", "b"])))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "queue name" in err.value.details()
    stub.CreateQueue(m.CreateQueueRequest(config=config(pb, "ok", ["a", "b"])))
    with pytest.raises(grpc.RpcError) as err:
        stub.Take(m.TakeRequest(queue="ok", worker=name, max_items=1))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "worker name" in err.value.details()
    # Nothing was created under the bad name.
    assert [q.name for q in stub.Status(m.StatusRequest()).queues] == ["ok"]


def test_items_with_control_characters_are_refused_naming_the_item(coordinator, pb):
    m = pb[0]
    stub = stub_of(pb, coordinator.address)
    with pytest.raises(grpc.RpcError) as err:
        stub.CreateQueue(m.CreateQueueRequest(config=config(pb, "q", ["a", "b\nc", "d"])))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "item 1" in err.value.details() and "0x0a" in err.value.details()


def test_the_cli_refuses_a_queue_name_with_a_newline(coordinator, tmp_path):
    data = tmp_path / "d.txt"
    data.write_text("x\n")
    proc = run("create", "--address", coordinator.address, "--name", "two\nlines", str(data),
               check=False)
    assert proc.returncode != 0
    assert "INVALID_ARGUMENT" in proc.stderr and "queue name" in proc.stderr, proc.stderr
