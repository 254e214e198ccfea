"""Helpers for multi-process tests of the `shardq` command line.

Every coordinator is started on 127.0.0.1 with port 0 (the kernel picks a
free port, written to --port-file) and stopped by its PID.
"""
import os
import pathlib
import re
import signal
import socket
import subprocess
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def shardq_bin():
    path = pathlib.Path(os.environ.get("SHARDQ_BIN", REPO / "build" / "bin")) / "shardq"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make build` first")
    return str(path)


class Coordinator:
    def __init__(self, tmp_path, *extra_args):
        self.port_file = tmp_path / f"port-{time.monotonic_ns()}"
        self.log = open(tmp_path / "serve.log", "ab")
        self.proc = subprocess.Popen(
            [shardq_bin(), "serve", "--listen", "127.0.0.1:0",
             "--port-file", str(self.port_file), *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self.port_file.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"shardq serve exited {self.proc.returncode}: "
                                   f"{(tmp_path / 'serve.log').read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError("shardq serve did not start within 20 s")
            time.sleep(0.02)
        self.port = int(self.port_file.read_text())
        self.address = f"127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()



def http_port(log_path, bound=20):
    """The port of the HTTP page `shardq serve` printed in its log."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", log_path.read_text())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError(f"serve did not print its HTTP address: {log_path.read_text()}")


def run(*args, check=True, timeout=60, env=None):
    """Runs `shardq ARGS...`; returns the CompletedProcess."""
    proc = subprocess.run([shardq_bin(), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"shardq {' '.join(args)} exited {proc.returncode}:\n"
                             f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    return proc


def make_text_files(directory, count, lines):
    paths = []
    for i in range(count):
        path = directory / f"part-{i}.txt"
        path.write_text("".join(f"file {i} line {j}\n" for j in range(lines)))
        paths.append(str(path))
    return paths


def free_port():
    """A port nothing listens on now (bound once, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_serve(port, state_dir, log, *extra, preexec_fn=None):
    """`shardq serve --state-dir` on a fixed loopback port (tests restart it
    there), returned once it accepts connections."""
    proc = subprocess.Popen([shardq_bin(), "serve", "--listen", f"127.0.0.1:{port}",
                             "--state-dir", str(state_dir), *extra], stdout=log, stderr=log,
                            preexec_fn=preexec_fn)
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc
        except OSError:
            assert proc.poll() is None, "shardq serve exited at start"
            assert time.monotonic() < deadline, "shardq serve did not listen"
            time.sleep(0.05)
