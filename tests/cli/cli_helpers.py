"""Helpers for multi-process tests of the `shardq` command line.

Every coordinator is started on 127.0.0.1 with port 0 (the kernel picks a
free port, written to --port-file) and stopped by its PID.
"""
import os
import pathlib
import signal
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
