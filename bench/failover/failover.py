#!/usr/bin/python3
"""bench/failover: how long a highly available shardq job goes without a
leader when its leader is SIGKILLed under load, and that no completion is
lost or counted twice (issue 18).

Set-up, all on 127.0.0.1 free ports and stopped by PID on any exit: a
3-member etcd (tests/cli/etcd_cluster.py), 2 `shardq serve --etcd ... --job
failover --etcd-lease-ttl T` coordinators, one queue of --slices slices x
--epochs epochs, and --workers `shardq worker --address etcd://.../failover`
processes, each item a bash command that sleeps --item-ms and appends
"EPOCH ITEM TIME" to its worker's file.

A prober (one thread per coordinator) calls Status on each coordinator
directly every --probe-ms and logs when it answered and how: served (it
leads), "not leader" (it stands by) or no answer. Then --kills times: wait
--steady-s of load, SIGKILL the leader, wait until the other one serves,
start the killed one again on its port and wait until it stands by.

Per kill, the failover time is the last answer of the old leader to the
first answer of the new one, as the prober saw them (its resolution: one
probe interval). Also shown: kill -> first answer of the new leader, and the
workers' view, the longest time without any item finishing (all workers
together) that spans the kill.

At the end, the accounting: the coordinator's `status --json` must count
every (epoch, slice) completed (per epoch, all slices; finished; nothing
pending, leased or failed), and every one of them must have run on a worker.
Items run twice (a lease in flight at a kill, re-read: at-least-once) are
counted and shown, not hidden.

Exits 0 when every check holds, 1 otherwise (naming what failed), 77 when
etcd is not installed (a skip for ctest). Speed is reported, never asserted:
the target line says whether failover <= TTL + 1 s held.
"""
import argparse
import importlib
import json
import math
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cli"))
from cli_helpers import make_text_files  # noqa: E402  (the works the tests use too)

JOB = "failover"
QUEUE = "q"


class BenchError(Exception):
    """A check or a step of the bench failed; the message says which."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Coordinator:
    """One `shardq serve --etcd` process on a fixed port (restartable)."""

    def __init__(self, shardq, name, etcd, ttl, work):
        self.shardq, self.name, self.etcd, self.ttl = shardq, name, etcd, ttl
        self.address = f"127.0.0.1:{free_port()}"
        self.log_path = work / f"serve-{name}.log"
        self.proc = None

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [self.shardq, "serve", "--etcd", self.etcd, "--job", JOB,
                 "--listen", self.address, "--etcd-lease-ttl", str(self.ttl)],
                stdout=log, stderr=subprocess.STDOUT)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.running():
            self.proc.send_signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self):
        if self.running():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def load_stubs(work):
    """coordinator.proto's Python messages and stub, generated into `work`."""
    try:
        from grpc_tools import protoc
    except ImportError as e:
        raise BenchError(f"{e}: the prober needs python3-grpc-tools (scripts/install-deps)")
    rc = protoc.main(["protoc", f"-I{REPO}", f"--python_out={work}",
                      f"--grpc_python_out={work}",
                      str(REPO / "proto" / "shardq" / "coordinator.proto")])
    if rc != 0:
        raise BenchError("grpc_tools could not compile proto/shardq/coordinator.proto")
    sys.path.insert(0, str(work))
    return (importlib.import_module("proto.shardq.coordinator_pb2"),
            importlib.import_module("proto.shardq.coordinator_pb2_grpc"))


class Prober:
    """Calls Status on every coordinator every `interval` s; thread-safe.

    answers: (time.time() when answered, coordinator name, state, detail),
    state "serves" (it leads), "standby" ("not leader") or "down" (anything
    else; detail: the code and message).
    """

    def __init__(self, coordinators, interval, work):
        try:
            import grpc
        except ImportError as e:
            raise BenchError(f"{e}: the prober needs python3-grpcio and python3-grpc-tools "
                             f"(scripts/install-deps)")
        self.grpc = grpc
        self.pb, self.services = load_stubs(work)
        self.interval = interval
        self.lock = threading.Lock()
        self.answers = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._probe, args=(c,), daemon=True)
                        for c in coordinators]
        for t in self.threads:
            t.start()

    def _probe(self, coordinator):
        # A new channel (and connection) per probe: a standby that wins
        # closes its port and serves on it again, and a kept channel's
        # reconnect backoff and re-resolution delays (seconds, seen here)
        # would be measured instead of the coordinator.
        options = [("grpc.use_local_subchannel_pool", 1)]
        request = self.pb.StatusRequest(queue=QUEUE)
        while not self.stopping.is_set():
            started = time.monotonic()
            detail = ""
            channel = self.grpc.insecure_channel(coordinator.address, options=options)
            try:
                self.services.CoordinatorStub(channel).Status(request, timeout=0.5)
                state = "serves"
            except self.grpc.RpcError as e:
                # NOT_FOUND: it leads, the queue is not made yet.
                if e.code() == self.grpc.StatusCode.NOT_FOUND:
                    state = "serves"
                elif "not leader" in (e.details() or ""):
                    state = "standby"
                else:
                    state = "down"
                    detail = f"{e.code().name}: {e.details()}"
            finally:
                channel.close()
            with self.lock:
                self.answers.append((time.time(), coordinator.name, state, detail))
            self.stopping.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=5)

    def write_log(self, path):
        """Every answer, one a line: TIME COORDINATOR STATE (DETAIL)."""
        with self.lock:
            path.write_text("".join(f"{t:.3f} {n} {s} {d}\n" for t, n, s, d in self.answers))

    def latest(self, name):
        with self.lock:
            for t, n, state, _ in reversed(self.answers):
                if n == name:
                    return t, state
        return None, None

    def first(self, name, state, after):
        with self.lock:
            return next((t for t, n, s, _ in self.answers
                         if n == name and s == state and t > after),
                        None)

    def last(self, name, state, before):
        with self.lock:
            return next((t for t, n, s, _ in reversed(self.answers)
                         if n == name and s == state and t < before), None)


def wait_for(what, predicate, bound, poll=0.02):
    deadline = time.monotonic() + bound
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise BenchError(f"not within {bound:.0f} s: {what}")
        time.sleep(poll)


def worker_lines(outputs):
    """[(epoch, item, finished at)] of every item run on every worker."""
    done = []
    for f in sorted(outputs.iterdir()):
        for line in f.read_text().splitlines():
            parts = line.split(" ")
            if len(parts) == 3:
                done.append((parts[0], parts[1], float(parts[2])))
    return done


def quantile(values, q):
    """Nearest rank: the smallest value with at least q of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def longest_pause(finish_times, kill_t, resumed_t):
    """Longest gap between consecutive item finishes that overlaps [kill_t, resumed_t]."""
    ordered = sorted(finish_times)
    gaps = [b - a for a, b in zip(ordered, ordered[1:]) if b >= kill_t and a <= resumed_t]
    return max(gaps) if gaps else None


class Bench:
    """The processes of one run and its steps; stop() ends them all by PID."""

    def __init__(self, args, work):
        from etcd_cluster import EtcdCluster
        self.args, self.work = args, work
        self.etcd = EtcdCluster(work, members=3)
        self.coordinators, self.workers, self.prober = [], [], None
        self.outputs = work / "out"
        self.address = None

    def start(self):
        """etcd, both coordinators and the prober; returns once one leads."""
        self.etcd.start()
        self.coordinators = [Coordinator(self.args.shardq_bin, n, self.etcd.endpoints,
                                         self.args.lease_ttl, self.work) for n in ("a", "b")]
        for c in self.coordinators:
            c.start()
        self.prober = Prober(self.coordinators, self.args.probe_ms / 1000, self.work)
        wait_for("one coordinator leads and the other stands by", self.leader, bound=60)
        self.address = f"etcd://{self.etcd.endpoints}/{JOB}"

    def leader(self):
        """The coordinator that serves while the other stands by (as last probed), or None."""
        states = {c: self.prober.latest(c.name)[1] for c in self.coordinators}
        serving = [c for c, s in states.items() if s == "serves"]
        if len(serving) == 1 and all(s == "standby" for c, s in states.items()
                                     if c is not serving[0]):
            return serving[0]
        return None

    def start_load(self):
        """The queue, and the workers that run it through the job's etcd:// address."""
        args = self.args
        works = make_text_files(self.work, 10, 20 * args.slices)
        subprocess.run([args.shardq_bin, "create", "--address", self.address, "--name", QUEUE,
                        "--epochs", str(args.epochs), "--slices", str(args.slices),
                        "--lease-timeout", "5", *works],
                       check=True, capture_output=True, timeout=60)
        self.outputs.mkdir()
        script = 'sleep "$1"; echo "$SHARDQ_EPOCH $2 $EPOCHREALTIME" >> "$3"'
        for i in range(args.workers):
            with open(self.work / f"worker-{i}.err", "ab") as err:
                self.workers.append(subprocess.Popen(
                    [args.shardq_bin, "worker", "--address", self.address, "--name", QUEUE,
                     "--worker", f"w{i}", "--", "bash", "-c", script, "item",
                     f"{args.item_ms / 1000:.3f}", "{}", str(self.outputs / f"w{i}")],
                    stdout=subprocess.DEVNULL, stderr=err))

    def check_workers(self):
        """Raises naming the first worker that failed; True once any has finished."""
        for i, w in enumerate(self.workers):
            if w.poll() not in (None, 0):
                raise BenchError(f"worker {i} exited {w.returncode}: "
                                 f"{(self.work / f'worker-{i}.err').read_text()[-2000:]}")
        return any(w.poll() is not None for w in self.workers)

    def kill_leader(self, k):
        """After --steady-s of load, SIGKILLs the leader, waits for the other to
        serve, and starts the killed one again as a standby."""
        args = self.args
        progress_from = len(worker_lines(self.outputs))
        steady_until = time.monotonic() + args.steady_s
        wait_for(f"steady load before kill {k + 1}",
                 lambda: self.check_workers() or (
                     time.monotonic() >= steady_until
                     and len(worker_lines(self.outputs)) >= progress_from + args.workers),
                 bound=args.steady_s + 120, poll=0.1)
        if self.check_workers():
            raise BenchError(f"the queue finished after {k} of {args.kills} kills: "
                             f"give more --slices or --epochs")
        old = wait_for("a leader before the kill", self.leader, bound=30)
        new = next(c for c in self.coordinators if c is not old)
        kill_t = time.time()
        old.kill()
        first_new = wait_for(f"{new.name} serves after {old.name} was killed",
                             lambda: self.prober.first(new.name, "serves", kill_t),
                             bound=10 * args.lease_ttl + 30)
        last_old = self.prober.last(old.name, "serves", kill_t)
        if last_old is None:
            raise BenchError(f"the prober saw no answer of {old.name} before its kill")
        restart_t = time.time()
        old.start()  # back, as a standby
        wait_for(f"{old.name} stands by again after its restart",
                 lambda: self.prober.first(old.name, "standby", restart_t), bound=60)
        print(f"kill {k + 1}: {old.name} killed, {new.name} served "
              f"{first_new - last_old:.2f} s after {old.name}'s last answer",
              file=sys.stderr, flush=True)
        return {"old": old.name, "new": new.name, "kill": kill_t,
                "last_old": last_old, "first_new": first_new}

    def finish(self):
        """Waits for the workers to drain the queue; returns its status --json."""
        deadline = time.monotonic() + self.args.finish_bound_s
        for i, w in enumerate(self.workers):
            try:
                w.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise BenchError(f"worker {i} still running {self.args.finish_bound_s} s "
                                 f"after the last kill")
        self.check_workers()
        return json.loads(subprocess.run(
            [self.args.shardq_bin, "status", "--address", self.address, "--name", QUEUE,
             "--json"], check=True, capture_output=True, text=True, timeout=60).stdout)

    def stop(self):
        if self.prober is not None:
            self.prober.stop()
            self.prober.write_log(self.work / "probe.log")
        for w in self.workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        for c in self.coordinators:
            c.stop()
        self.etcd.stop()


def run_bench(args, work):
    """The kills' timings, the queue's final status and what the workers ran."""
    bench = Bench(args, work)
    try:
        bench.start()
        bench.start_load()
        kills = [bench.kill_leader(k) for k in range(args.kills)]
        status = bench.finish()
        return kills, status, worker_lines(bench.outputs)
    finally:
        bench.stop()


def accounting(args, status, lines):
    """Rows of (check, value, ok) and the number of failed checks."""
    q = status["queues"][0]
    total = args.slices * args.epochs
    runs = [(e, item) for e, item, _ in lines]
    distinct = set(runs)
    per_epoch = [e["completed"] for e in q["per_epoch"]]
    rows = [
        ("(epoch, slice) pairs in the queue", total, True),
        ("completed, per the coordinator", q["completed"], q["completed"] == total),
        ("completed per epoch", f"{min(per_epoch)}–{max(per_epoch)} of {args.slices} "
         f"in each of {len(per_epoch)} epochs",
         len(per_epoch) == args.epochs and all(n == args.slices for n in per_epoch)),
        ("finished; pending, leased, failed", f"{q['finished']}; {q['pending']}, "
         f"{q['leased']}, {q['failed']}",
         q["finished"] and q["pending"] == 0 and q["leased"] == 0 and q["failed"] == 0),
        ("completions lost (pairs not counted completed)", total - q["completed"],
         q["completed"] == total),
        ("pairs never run on a worker", total - len(distinct),
         len(distinct) == total),
        ("completions per worker add up", sum(w["completed"] for w in q["workers"]),
         sum(w["completed"] for w in q["workers"]) == q["completed"]),
        ("items run twice (in flight at a kill, re-read)", len(runs) - len(distinct), True),
        ("late completions counted as duplicates", q["duplicates"], True),
    ]
    return rows, sum(1 for _, _, ok in rows if not ok)


def report_markdown(args, kills, rows, loads):
    ttl_plus = args.lease_ttl + 1
    out = ["| kill | killed | new leader | last answer of the old -> first of the new (s) "
           "| kill -> first answer of the new (s) | workers' longest pause (s) |",
           "|--:|---|---|--:|--:|--:|"]
    for i, k in enumerate(kills, 1):
        pause = k["pause"]
        out.append(f"| {i} | {k['old']} | {k['new']} | {k['failover']:.2f} | "
                   f"{k['first_new'] - k['kill']:.2f} | "
                   f"{'—' if pause is None else f'{pause:.2f}'} |")
    times = [k["failover"] for k in kills]
    met = sum(1 for t in times if t <= ttl_plus)
    out += ["", "| failover (s) | min | median | p90 | max |", "|---|--:|--:|--:|--:|",
            f"| {len(times)} kills | {min(times):.2f} | {statistics.median(times):.2f} | "
            f"{quantile(times, 0.9):.2f} | {max(times):.2f} |", "",
            f"Target: failover <= lease TTL + 1 s = {ttl_plus:g} s: "
            f"{'met' if met == len(times) else 'NOT met'} ({met} of {len(times)} kills; "
            f"max {max(times):.2f} s).", "",
            "| accounting | value | ok |", "|---|--:|---|"]
    out += [f"| {name} | {value} | {'yes' if ok else '**NO**'} |" for name, value, ok in rows]
    out += ["", f"Lease TTL {args.lease_ttl} s; {args.workers} workers, {args.slices} slices x "
            f"{args.epochs} epochs, {args.item_ms} ms per item; prober every {args.probe_ms} ms "
            f"on each coordinator. Load average (1/5/15 min) at the start "
            f"{loads[0][0]:.2f} / {loads[0][1]:.2f} / {loads[0][2]:.2f}, at the end "
            f"{loads[1][0]:.2f} / {loads[1][1]:.2f} / {loads[1][2]:.2f}; "
            f"{os.cpu_count()} CPUs."]
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--shardq-bin", required=True, help="the shardq binary")
    parser.add_argument("--kills", type=int, default=10, help="leader kills")
    parser.add_argument("--lease-ttl", type=int, default=2,
                        help="--etcd-lease-ttl of both coordinators (s)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--slices", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--item-ms", type=int, default=5, help="each item's sleep")
    parser.add_argument("--probe-ms", type=int, default=20, help="prober interval")
    parser.add_argument("--steady-s", type=float, default=2.0,
                        help="load between the standby's return and the next kill")
    parser.add_argument("--finish-bound-s", type=float, default=600,
                        help="how long the workers may take to finish after the last kill")
    parser.add_argument("--markdown", type=pathlib.Path, help="also write the tables here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    if args.kills < 1 or args.slices < 1 or args.epochs < 1 or args.workers < 1:
        parser.error("--kills, --slices, --epochs and --workers must be >= 1")
    if not os.access(args.shardq_bin, os.X_OK):
        parser.error(f"--shardq-bin '{args.shardq_bin}' is not an executable file")
    try:
        from etcd_cluster import etcd_binary
        etcd_binary()
    except BaseException as e:  # pytest's Skipped when etcd is missing
        print(f"failover: skipped: {e}", file=sys.stderr)
        return 77
    # A stop signal unwinds like ^C: every process started is stopped by PID.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = pathlib.Path(tempfile.mkdtemp(prefix="shardq-failover-"))
    loads = [os.getloadavg()]
    try:
        kills, status, lines = run_bench(args, work)
    except (BenchError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        detail = getattr(e, "stderr", None)
        print(f"failover: FAILED: {e}{f': {detail}' if detail else ''}\n"
              f"(logs kept in {work})", file=sys.stderr)
        return 1
    loads.append(os.getloadavg())
    finish_times = [t for _, _, t in lines]
    for k in kills:
        k["failover"] = k["first_new"] - k["last_old"]
        k["pause"] = longest_pause(finish_times, k["kill"], k["first_new"])
    rows, failed = accounting(args, status, lines)
    text = report_markdown(args, kills, rows, loads)
    print(text)
    if args.markdown:
        args.markdown.write_text(text + "\n")
    if not args.keep and failed == 0:
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        print(f"failover: FAILED: {failed} accounting check(s) (logs kept in {work})",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
