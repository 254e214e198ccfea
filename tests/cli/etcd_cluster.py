"""An etcd cluster of 1 or 3 members for multi-process tests.

Every member listens on 127.0.0.1 (client and peer ports picked free), keeps
its data under the test's temporary directory and is stopped by its PID.
The `etcd` binary comes from Debian's etcd-server package (scripts/install-deps);
tests that need it are skipped, naming the package, only when it is missing.

    cluster = EtcdCluster(tmp_path, members=3)
    cluster.start()
    cluster.endpoints          # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
    cluster.kill(0); cluster.restart(0)
    cluster.stop()
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request

import pytest


def etcd_binary():
    """The etcd server binary; skips the calling test when it is missing."""
    path = os.environ.get("SHARDQ_ETCD") or shutil.which("etcd")
    if not path:
        pytest.skip("etcd is not installed (Debian package etcd-server; see scripts/install-deps)")
    return path


def _free_ports(count):
    """`count` distinct ports nothing listens on now (bound together, then released)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class EtcdMember:
    def __init__(self, name, client_port, peer_port, data_dir, log_path):
        self.name = name
        self.client_port = client_port
        self.peer_port = peer_port
        self.data_dir = data_dir
        self.log_path = log_path
        self.proc = None

    @property
    def endpoint(self):
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self):
        return f"http://127.0.0.1:{self.peer_port}"

    def running(self):
        return self.proc is not None and self.proc.poll() is None


class EtcdCluster:
    """1 or 3 etcd members on loopback. Not thread-safe (one test drives it)."""

    def __init__(self, tmp_path, members=3, heartbeat_ms=50, election_ms=500):
        self.binary = etcd_binary()
        self.root = tmp_path / f"etcd-{time.monotonic_ns()}"
        self.root.mkdir(parents=True)
        self.heartbeat_ms = heartbeat_ms
        self.election_ms = election_ms
        ports = _free_ports(2 * members)
        self.members = [
            EtcdMember(f"m{i}", ports[2 * i], ports[2 * i + 1], self.root / f"m{i}.data",
                       self.root / f"m{i}.log")
            for i in range(members)]
        self.token = f"shardq-test-{os.getpid()}-{time.monotonic_ns()}"

    @property
    def endpoints(self):
        """HOST:PORT,HOST:PORT,... of every member (what --etcd takes)."""
        return ",".join(m.endpoint for m in self.members)

    def _launch(self, member, state):
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        log = open(member.log_path, "ab")
        try:
            member.proc = subprocess.Popen(
                [self.binary,
                 "--name", member.name,
                 "--data-dir", str(member.data_dir),
                 "--listen-client-urls", f"http://{member.endpoint}",
                 "--advertise-client-urls", f"http://{member.endpoint}",
                 "--listen-peer-urls", member.peer_url,
                 "--initial-advertise-peer-urls", member.peer_url,
                 "--initial-cluster", initial,
                 "--initial-cluster-state", state,
                 "--initial-cluster-token", self.token,
                 "--heartbeat-interval", str(self.heartbeat_ms),
                 "--election-timeout", str(self.election_ms),
                 "--logger", "zap", "--log-outputs", "stderr"],
                stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()

    def start(self, timeout=60):
        for m in self.members:
            self._launch(m, "new")
        self.wait_healthy(timeout=timeout)
        return self

    def healthy_member(self, member):
        """True when `member` answers /health with a cluster that has quorum."""
        try:
            with urllib.request.urlopen(f"http://{member.endpoint}/health", timeout=2) as r:
                return json.loads(r.read().decode()).get("health") == "true"
        except OSError:
            return False
        except ValueError:
            return False

    def wait_healthy(self, timeout=60, members=None):
        """Waits until every running member (or those given) reports a healthy cluster."""
        deadline = time.monotonic() + timeout
        targets = members if members is not None else [m for m in self.members if m.running()]
        while True:
            for m in targets:
                if m.proc is not None and m.proc.poll() is not None:
                    raise RuntimeError(f"etcd member {m.name} exited {m.proc.returncode}:\n"
                                       f"{m.log_path.read_text(errors='replace')[-4000:]}")
            if all(self.healthy_member(m) for m in targets):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd members {[m.name for m in targets]} not healthy "
                                   f"within {timeout} s; see {self.root}")
            time.sleep(0.05)

    def kill(self, index, sig=signal.SIGKILL):
        """Stops member `index` by its PID (SIGKILL unless told otherwise)."""
        m = self.members[index]
        if m.running():
            os.kill(m.proc.pid, sig)
            m.proc.wait(timeout=30)

    def restart(self, index, timeout=60):
        """Starts member `index` again over its data dir and waits for it to be healthy."""
        m = self.members[index]
        if m.running():
            raise RuntimeError(f"etcd member {m.name} is running")
        self._launch(m, "existing")
        self.wait_healthy(timeout=timeout, members=[m])

    def etcdctl(self, *args, check=True):
        """Runs etcdctl (v3 API) against every running member; returns its stdout."""
        ctl = shutil.which("etcdctl")
        if not ctl:
            pytest.skip("etcdctl is not installed (Debian package etcd-client)")
        endpoints = ",".join(m.endpoint for m in self.members if m.running())
        proc = subprocess.run([ctl, "--endpoints", endpoints, "--command-timeout=10s", *args],
                              capture_output=True, text=True, timeout=30,
                              env={**os.environ, "ETCDCTL_API": "3"})
        if check and proc.returncode != 0:
            raise AssertionError(f"etcdctl {' '.join(args)} exited {proc.returncode}: "
                                 f"{proc.stderr}")
        return proc.stdout

    def stop(self):
        for m in self.members:
            if m.running():
                os.kill(m.proc.pid, signal.SIGTERM)
                try:
                    m.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.kill(m.proc.pid, signal.SIGKILL)
                    m.proc.wait()
