"""WorkQueue(address=...) at a coordinator that does not answer raises
ConnectionError naming the address after connect_timeout, and Ctrl-C ends
the wait at once; a TF cluster of several workers without a coordinator is
refused instead of reading the data once per worker."""
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

import shardq

GENEROUS = 60  # a failure shows as a hang past this, never as a race


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_work_queue_at_a_closed_port_raises_connection_error_naming_the_address(text_files):
    address = f"127.0.0.1:{closed_port()}"
    with pytest.raises(ConnectionError, match=address) as raised:
        shardq.WorkQueue(text_files(1, 3), address=address, connect_timeout=2)
    assert isinstance(raised.value, shardq.UnavailableError)
    with pytest.raises(ConnectionError, match=address):
        shardq.WorkQueue.attach("q", address=address, connect_timeout=1)


def test_connect_timeout_must_be_positive(text_files):
    with pytest.raises(shardq.InvalidArgumentError, match="connect_timeout"):
        shardq.WorkQueue(text_files(1, 3), address="127.0.0.1:1", connect_timeout=0)


def test_ctrl_c_ends_a_work_queue_that_waits_for_the_coordinator(text_files):
    files = text_files(1, 3)
    script = (
        "import sys, shardq\n"
        "try:\n"
        f"    shardq.WorkQueue({files!r}, address={f'127.0.0.1:{closed_port()}'!r},\n"
        "                     connect_timeout=600)\n"
        "except KeyboardInterrupt:\n"
        "    print('KeyboardInterrupt', file=sys.stderr, flush=True)\n"
        "    sys.exit(42)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env,
                            stderr=subprocess.PIPE, text=True)
    seen = []
    waiting = threading.Event()

    def read():
        for line in proc.stderr:
            seen.append(line)
            if "waiting for the coordinator" in line:
                waiting.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert waiting.wait(GENEROUS), "".join(seen)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=GENEROUS) == 42, "".join(seen)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(GENEROUS)
    assert "KeyboardInterrupt" in "".join(seen)


def test_tf_cluster_of_two_workers_without_a_coordinator_is_served_by_task_zero(
        text_files, monkeypatch):
    # Issue 19: no longer refused; worker 0 serves the queue from this
    # process on SHARDQ_PORT (tests/python/test_cluster_coordinator.py runs
    # the whole cluster).
    import socket
    import shardq.cluster
    for name in ("SHARDQ_ADDRESS", "MASTER_ADDR", "SHARDQ_PORT", "WORLD_SIZE",
                 "SHARDQ_EMBEDDED"):
        monkeypatch.delenv(name, raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("SHARDQ_PORT", str(port))
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}, '
                                    '"task": {"type": "worker", "index": 0}}')
    files = text_files(1, 3)
    served = shardq.WorkQueue(files, name="tf-served")
    try:
        assert shardq.cluster.serving() == port
        assert served.take() == files[0]
        # Opting in gives this process its own queue.
        monkeypatch.setenv("SHARDQ_EMBEDDED", "1")
        queue = shardq.WorkQueue(files, name="tf-opted-in")
        assert queue.take() == files[0]
    finally:
        # The coordinator this process serves would outlive the test, and
        # with it gRPC in this process: DataLoader workers that later tests
        # fork from it would then refuse to use gRPC.
        served.close()
        shardq.cluster._stop()
    assert shardq.cluster.serving() is None
