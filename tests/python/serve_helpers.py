"""Helpers for Python tests that read a queue to its end or need a real
`shardq serve` on 127.0.0.1 (started on a free port, stopped by PID)."""
import contextlib
import os
import pathlib
import signal
import subprocess
import time
import uuid

import shardq

REPO = pathlib.Path(__file__).resolve().parents[2]
SHARDQ = os.environ.get("SHARDQ_BIN", str(REPO / "build" / "bin")) + "/shardq"


def unique(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


def read_all(reader, producer, n=7):
    """Every value `reader` reads from `producer`, n at a time, to the end."""
    values = []
    while True:
        try:
            _, batch = reader.read_up_to(producer, n)
        except shardq.OutOfRangeError:
            return values
        values.extend(batch)


@contextlib.contextmanager
def served(tmp_path, *flags):
    """`shardq serve` with `flags`; yields (address, log path)."""
    with serve_process(tmp_path, *flags) as (address, _, log):
        yield address, log


@contextlib.contextmanager
def serve_process(tmp_path, *flags):
    """`shardq serve` with `flags`; yields (address, its Popen, log path).
    A test may kill it; otherwise it is stopped with SIGTERM at the end."""
    port_file, log = tmp_path / "port", tmp_path / "serve.log"
    with open(log, "w") as log_file:
        serve = subprocess.Popen([SHARDQ, "serve", "--listen", "127.0.0.1:0", "--port-file",
                                  str(port_file), *flags],
                                 stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while not port_file.exists() or not port_file.read_text().strip():
            assert serve.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.02)
        yield f"127.0.0.1:{int(port_file.read_text())}", serve, log
    finally:
        if serve.poll() is None:
            os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=20)
