"""High availability on etcd (issue 18): several `shardq serve --etcd`
processes of one job, one leading and the others standing by; the leader
killed, paused or cut off from etcd, with nothing lost or repeated.

Every process (etcd members, coordinators, workers) runs on 127.0.0.1 free
ports and is stopped by its PID. Waits are on events (a log line, a metric,
an answer) under generous bounds; the bounds are no assertion of speed."""
import base64
import json
import os
import re
import signal
import subprocess
import time
import urllib.request

import pytest

from cli_helpers import free_port, make_text_files, run, shardq_bin

TTL = 2  # seconds of the election lease in these tests


class HaServe:
    """One `shardq serve --etcd` process on a fixed port (restartable)."""

    def __init__(self, tmp_path, name, etcd, job, port=None, ttl=TTL):
        self.name = name
        self.etcd = etcd
        self.job = job
        self.ttl = ttl
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"serve-{name}.log"
        self.proc = None
        self.http = None

    def start(self):
        # This run's lines start here (a restart appends to the same log).
        self.log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [shardq_bin(), "serve", "--etcd", self.etcd, "--job", self.job,
                 "--listen", self.address, "--etcd-lease-ttl", str(self.ttl),
                 "--http", "127.0.0.1:0", "--http-public"],
                stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        self.http = None
        return self

    def log(self):
        return self.log_path.read_text(errors="replace")

    def metrics(self):
        """Its /metrics text, or None while it does not answer."""
        if self.http is None:
            found = re.findall(r"http://127\.0\.0\.1:(\d+)/", self.log()[self.log_start:])
            if not found:
                return None
            self.http = int(found[-1])
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/metrics",
                                        timeout=2) as r:
                return r.read().decode()
        except OSError:
            return None

    def leading(self):
        text = self.metrics()
        return text is not None and f'shardq_leader{{job="{self.job}"}} 1' in text

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def kill(self):
        if self.running():
            self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.running():
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def wait_for(what, predicate, bound=60, poll=0.05):
    deadline = time.monotonic() + bound
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound} s: {what}")
        time.sleep(poll)


def leader_among(coordinators):
    leading = [c for c in coordinators if c.running() and c.leading()]
    return leading[0] if len(leading) == 1 else None


def etcd_address(cluster, job):
    return f"etcd://{cluster.endpoints}/{job}"


def status_json(address, queue=None, timeout=60):
    args = ["status", "--address", address, "--json"]
    if queue:
        args += ["--name", queue]
    return json.loads(run(*args, timeout=timeout).stdout)


def start_workers(address, queue, count, outputs, tmp_path, delay=0.03):
    """`count` `shardq worker` processes; each appends "EPOCH ITEM" per item."""
    workers = []
    for i in range(count):
        err = open(tmp_path / f"worker-{i}.err", "ab")
        workers.append(subprocess.Popen(
            [shardq_bin(), "worker", "--address", address, "--name", queue,
             "--worker", f"w{i}", "--", "sh", "-c",
             f'sleep {delay}; echo "$SHARDQ_EPOCH {{}}" >> {outputs}/w{i}'],
            stdout=subprocess.DEVNULL, stderr=err))
        err.close()
    return workers


def wait_workers(workers, tmp_path, bound):
    deadline = time.monotonic() + bound
    for i, w in enumerate(workers):
        try:
            w.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {i} still running after {bound} s: "
                                 f"{(tmp_path / f'worker-{i}.err').read_text()[-2000:]}")
        assert w.returncode == 0, (tmp_path / f"worker-{i}.err").read_text()[-3000:]


def lines_done(outputs):
    done = []
    for f in outputs.iterdir():
        done.extend(tuple(line.split(" ", 1)) for line in f.read_text().splitlines())
    return done


def stop_all(processes):
    for p in processes:
        if isinstance(p, HaServe):
            p.stop()
        elif p.poll() is None:
            p.kill()
            p.wait()


def test_a_standby_answers_not_leader_naming_the_leader_and_takes_over_on_a_clean_stop(
        tmp_path, etcd_single):
    job = "train"
    a = HaServe(tmp_path, "a", etcd_single.endpoints, job).start()
    b = None
    try:
        wait_for("a leads", a.leading)
        b = HaServe(tmp_path, "b", etcd_single.endpoints, job).start()
        wait_for("b stands by naming a", lambda: f"{a.address} leads" in b.log())
        assert not b.leading()
        assert f'shardq_failovers_total{{job="{job}"}} 0' in b.metrics()
        # The page's header data: b stands by and names the leader.
        with urllib.request.urlopen(f"http://127.0.0.1:{b.http}/api/server", timeout=10) as r:
            page = json.loads(r.read().decode())["leadership"]
        assert page["job"] == job and not page["leading"] and page["leader"] == a.address, page
        assert page["term"] > 0
        # A standby serves nothing: every call is refused naming the leader,
        # at once for a client given only the standby's address (not after
        # its connect timeout: the run's own timeout is far below it).
        for verb in (["status"], ["create", "--name", "q0", "--slices", "1", str(tmp_path)]):
            refused = run(*verb, "--address", b.address, "--connect-timeout", "600",
                          check=False, timeout=120)
            assert refused.returncode != 0
            assert "not leader" in refused.stderr and a.address in refused.stderr, refused.stderr
            assert "is a standby" in refused.stderr, refused.stderr
        files = make_text_files(tmp_path, 4, 20)
        run("create", "--address", a.address, "--name", "q", "--slices", "8", *files)
        taken = run("take", "--address", a.address, "--name", "q", "--worker", "t1")
        item = taken.stdout.strip()
        assert item
        # status --json of the leader: who leads, its term, the standbys.
        shown = status_json(a.address)
        leadership = shown["leadership"]
        assert leadership["job"] == job
        # The leader, the standbys and the term at the top level too.
        assert (shown["leader"], shown["standbys"], shown["term"]) == (
            leadership["leader"], leadership["standbys"], leadership["term"])
        assert leadership["leader"] == a.address
        assert leadership["term"] > 0
        assert leadership["standbys"] == [b.address]
        first_term = leadership["term"]
        # report finds the leader's page from a job's address forms too.
        for address in (f"etcd://{etcd_single.endpoints}/{job}", f"{b.address},{a.address}"):
            out = tmp_path / "report.html"
            run("report", "--address", address, "--name", "q", "--out", str(out))
            assert "<html" in out.read_text().lower()
            out.unlink()
        # A clean stop gives the lease up: b takes over, with the state.
        a.stop()
        wait_for("b leads", b.leading, bound=10 * TTL)
        after = status_json(b.address, "q")
        q = after["queues"][0]
        assert q["items"] == 8 and q["leased"] + q["pending"] == 8, q
        assert after["leadership"]["leader"] == b.address
        assert after["leadership"]["term"] > first_term
        assert f'shardq_failovers_total{{job="{job}"}} 1' in b.metrics()
    finally:
        stop_all([c for c in (a, b) if c is not None])


def test_the_leader_killed_twice_loses_nothing_and_repeats_no_completion(tmp_path,
                                                                         etcd_cluster):
    """3 etcd members, 2 coordinators, 8 workers over 200 slices x 2 epochs;
    the leader is SIGKILLed twice mid-run and restarted as a standby."""
    job = "kills"
    coordinators = [HaServe(tmp_path, n, etcd_cluster.endpoints, job).start()
                    for n in ("a", "b")]
    workers = []
    try:
        first = wait_for("a leader", lambda: leader_among(coordinators))
        address = etcd_address(etcd_cluster, job)
        files = make_text_files(tmp_path, 10, 100)
        run("create", "--address", address, "--name", "q", "--epochs", "2",
            "--slices", "200", "--lease-timeout", "5", *files)
        outputs = tmp_path / "out"
        outputs.mkdir()
        workers = start_workers(address, "q", 8, outputs, tmp_path)
        leader = first
        failovers = []
        for kill in range(2):
            wait_for("progress before the kill",
                     lambda: len(lines_done(outputs)) >= 60 * (kill + 1), bound=120)
            assert any(w.poll() is None for w in workers)
            # The last answer of the old leader, then the kill.
            status_json(leader.address, "q")
            last_answer = time.monotonic()
            leader.kill()
            standby = next(c for c in coordinators if c is not leader)
            wait_for("the standby leads", standby.leading, bound=10 * TTL + 10)
            # The first answer of the new leader, through the job's address.
            status_json(address, "q")
            failovers.append(time.monotonic() - last_answer)
            leader.start()  # back, as a standby
            wait_for("the restarted one stands by",
                     lambda: leader.metrics() is not None and not leader.leading())
            leader = standby
        print(f"failover times (last answer of the old leader -> first answer of the new): "
              f"{', '.join(f'{t:.2f} s' for t in failovers)} (lease TTL {TTL} s)")
        wait_workers(workers, tmp_path, 300)
        q = status_json(address, "q")["queues"][0]
        assert q["completed"] == 400 and q["finished"]
        assert [e["completed"] for e in q["per_epoch"]] == [200, 200]
        assert q["pending"] == 0 and q["leased"] == 0
        assert sum(w["completed"] for w in q["workers"]) == 400
        # A repeat needs a lease in flight at a kill: per worker at most
        # its held item and the one taken ahead, per kill.
        assert q["duplicates"] <= 8 * 2 * 2
        done = lines_done(outputs)
        assert len(set(done)) == 400  # at least once: every (epoch, slice) ran
        assert len(done) - 400 <= 8 * 2 * 2
    finally:
        stop_all(workers + coordinators)


def test_a_paused_leader_is_fenced_and_steps_down_by_itself(tmp_path, etcd_single):
    """SIGSTOP the leader past its lease: the standby takes over and serves;
    SIGCONT the old one: it commits nothing, hands out nothing, and stands
    by on its own."""
    job = "fence"
    a = HaServe(tmp_path, "a", etcd_single.endpoints, job).start()
    b = None
    take = None
    try:
        wait_for("a leads", a.leading)
        b = HaServe(tmp_path, "b", etcd_single.endpoints, job).start()
        wait_for("b stands by", lambda: f"{a.address} leads" in b.log())
        files = make_text_files(tmp_path, 4, 20)
        run("create", "--address", a.address, "--name", "q", "--slices", "20",
            "--lease-timeout", "3", *files)
        a.signal(signal.SIGSTOP)
        wait_for("b takes over", b.leading, bound=10 * TTL + 10)
        # The new leader serves.
        served = run("take", "--address", b.address, "--name", "q", "--worker", "new")
        assert served.stdout.strip()
        before = status_json(b.address, "q")["queues"][0]
        # A worker that still dials the old leader asks it for an item while
        # it is paused; the request reaches it when it wakes.
        take = subprocess.Popen(
            [shardq_bin(), "take", "--address", a.address, "--name", "q", "--worker", "old",
             "--connect-timeout", "5"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)  # let the request reach the paused process's socket (no assertion)
        a.signal(signal.SIGCONT)
        wait_for("a stepped down by itself", lambda: "stepped down" in a.log(), bound=30)
        wait_for("a stands by naming b", lambda: f"{b.address} leads" in a.log(), bound=30)
        assert a.running() and not a.leading()
        assert b.leading()
        # The old leader handed nothing out: the take got no item (it keeps
        # retrying a coordinator that refuses it, so it is stopped here).
        time.sleep(1)  # a wrongly granted item would be printed by now (no assertion)
        if take.poll() is None:
            take.kill()
        out, err = take.communicate(timeout=30)
        assert out.strip() == "", f"the fenced leader handed out {out!r}"
        after = status_json(b.address, "q")["queues"][0]
        # Nothing the old leader did reached the job's state.
        for key in ("completed", "taken", "released", "expired"):
            assert after[key] == before[key], (key, before, after)
        assert "old" not in {w["worker"] for w in after["workers"]}
        # The leader key in etcd names b.
        got = json.loads(etcd_single.etcdctl("get", f"/shardq/{job}/leader", "-w", "json"))
        assert b.address.encode() in base64.b64decode(got["kvs"][0]["value"])
        # The new leader finishes the queue (the taken item after its lease).
        run("worker", "--address", b.address, "--name", "q", "--worker", "finisher", "--",
            "true", timeout=120)
        final = status_json(b.address, "q")["queues"][0]
        assert final["completed"] == 20 and final["finished"], final
    finally:
        if take is not None and take.poll() is None:
            take.kill()
        stop_all([c for c in (a, b) if c is not None])


def test_etcd_losing_one_member_loses_nothing_and_losing_quorum_stops_then_resumes(
        tmp_path, etcd_cluster):
    job = "quorum"
    coordinators = [HaServe(tmp_path, n, etcd_cluster.endpoints, job).start()
                    for n in ("a", "b")]
    workers = []
    try:
        wait_for("a leader", lambda: leader_among(coordinators))
        address = etcd_address(etcd_cluster, job)
        files = make_text_files(tmp_path, 6, 50)
        run("create", "--address", address, "--name", "q", "--slices", "120",
            "--lease-timeout", "5", *files)
        outputs = tmp_path / "out"
        outputs.mkdir()
        workers = start_workers(address, "q", 4, outputs, tmp_path)
        wait_for("progress", lambda: len(lines_done(outputs)) >= 20, bound=120)
        etcd_cluster.kill(2)  # one of three: quorum holds
        wait_for("progress with 2 of 3 members",
                 lambda: len(lines_done(outputs)) >= 50, bound=120)
        etcd_cluster.kill(1)  # two of three: no quorum
        # The leader's commits fail: it stops handing out work and steps
        # down; both coordinators then refuse every call, naming etcd.
        def refused_naming_etcd():
            answers = [run("status", "--address", c.address, "--name", "q",
                           "--connect-timeout", "2", check=False, timeout=60)
                       for c in coordinators]
            return (all(r.returncode != 0 and "etcd" in r.stderr for r in answers)
                    and answers[0].stderr)
        message = wait_for("calls refused naming etcd", refused_naming_etcd, bound=60, poll=0.5)
        assert "UNAVAILABLE" in message, message
        assert all(w.poll() is None for w in workers)  # waiting for the coordinator, not failed
        stalled = len(lines_done(outputs))
        etcd_cluster.restart(1)
        etcd_cluster.restart(2)
        wait_workers(workers, tmp_path, 300)
        assert len(lines_done(outputs)) > stalled
        q = status_json(address, "q")["queues"][0]
        assert q["completed"] == 120 and q["finished"]
        assert len({line for line in lines_done(outputs)}) == 120
    finally:
        stop_all(workers + coordinators)


def test_serve_refuses_bad_high_availability_flags(tmp_path):
    r = run("serve", "--etcd", "127.0.0.1:2379", "--listen", "127.0.0.1:0", check=False)
    assert r.returncode == 2 and "--job" in r.stderr, r.stderr
    r = run("serve", "--job", "j", "--listen", "127.0.0.1:0", check=False)
    assert r.returncode == 2 and "--etcd" in r.stderr, r.stderr
    r = run("serve", "--etcd", "127.0.0.1:2379", "--job", "a/b", "--listen", "127.0.0.1:0",
            check=False)
    assert r.returncode == 2 and "--job" in r.stderr, r.stderr
    r = run("serve", "--etcd", "127.0.0.1:2379", "--job", "j", "--state-dir",
            str(tmp_path / "s"), "--listen", "127.0.0.1:0", check=False)
    assert r.returncode == 2 and "--state-dir" in r.stderr, r.stderr
    r = run("serve", "--etcd", "127.0.0.1:", "--job", "j", "--listen", "127.0.0.1:0",
            check=False)
    assert r.returncode == 2 and "--etcd" in r.stderr, r.stderr
