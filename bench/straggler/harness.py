#!/usr/bin/env python3
"""Real-process straggler benchmark: N worker processes on loopback, one
epoch of a text data set, work emulated by per-record pacing.

Modes (see README.md):
  static            each worker reads its 1/N of the files (files i, i+N, ...)
                    with no coordinator;
  slices-<k>n       one shardq queue on `shardq serve`, num_slices = k*N,
                    fixed slices (`shardq create --no-split`);
  split-<k>n        the same with tail rebalancing (the default): idle
                    workers get the rest of stragglers' in-flight slices;
  slices-<k>n-prefetch<m>
                    the same, read through an InputProducer holding m items
                    (the queue's num_clients = m);
  tfdata            tf.data service, ShardingPolicy.DYNAMIC (peers/tfdata_peer.py);
  ray               Ray Data read_text(files).streaming_split(N, equal=False)
                    with Ray's own block count (peers/ray_peer.py);
  ray-blocks-<k>n   the same with override_num_blocks = k*N.

Every worker of a run connects, reports ready, and is given one common
start time; makespan = last record read by anyone - start. ideal = total
records x per-record time / sum of worker speeds. Every run's record keys
are counted: each of the data set's records must be read exactly once.

Standard library only; the peers run in the venv's python (--venv-python).
Writes every result as JSON (--out-json) and prints a markdown table.
"""

import argparse
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PEERS = os.path.join(HERE, "peers")


def log(message):
    print(message, file=sys.stderr, flush=True)


class Proc:
    """A child process whose stdout lines arrive on a queue (so reads can
    time out), stdin a pipe, stderr a log file."""

    def __init__(self, args, log_path, env=None):
        self.args = args
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.popen = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=env, text=True, bufsize=1)
        self.lines = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.popen.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def read_line(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"{self.name()}: no output in {timeout:.0f} s "
                               f"(log: {self.log_path})")
        if line is None:
            self.popen.wait()
            raise RuntimeError(f"{self.name()}: exited with {self.popen.returncode} "
                               f"(log: {self.log_path}): {self.tail()}")
        return line

    def expect(self, prefix, timeout):
        """The next stdout line that starts with `prefix`; libraries may
        print other lines, which are skipped."""
        while True:
            line = self.read_line(timeout)
            if line.startswith(prefix):
                return line

    def send(self, text):
        self.popen.stdin.write(text + "\n")
        self.popen.stdin.flush()

    def close_stdin(self):
        try:
            self.popen.stdin.close()
        except OSError:
            pass

    def stop(self, grace=10):
        self.close_stdin()
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._log.close()

    def name(self):
        return os.path.basename(self.args[0]) + " " + " ".join(self.args[1:3])

    def tail(self, n=5):
        try:
            with open(self.log_path, errors="replace") as f:
                return " | ".join(f.read().strip().splitlines()[-n:])
        except OSError:
            return ""


# --- data set ----------------------------------------------------------------

def make_data_set(directory, num_workers, files_per_worker, records_per_worker):
    """files_per_worker * N text files, records_per_worker * N lines in all,
    each line "<unique key> <payload>". Returns (files, keys)."""
    os.makedirs(directory, exist_ok=True)
    num_files = files_per_worker * num_workers
    per_file = records_per_worker // files_per_worker
    files, keys = [], []
    for f in range(num_files):
        path = os.path.join(directory, f"part-{f:04d}.txt")
        lines = []
        for r in range(per_file):
            key = f"n{num_workers}-f{f:04d}-r{r:06d}"
            keys.append(key)
            lines.append(key + " " + "x" * ((f * 7919 + r * 104729) % 64) + "\n")
        with open(path, "w") as out:
            out.writelines(lines)
        files.append(path)
    return files, keys


def slowdowns_of(sim_bin, model, num_workers, seed):
    out = subprocess.run(
        [sim_bin, "--print-slowdowns", "--model", model, "--workers", str(num_workers),
         "--seed", str(seed)], check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def parse_mode(mode):
    if mode in ("static", "tfdata", "ray"):
        return {"kind": mode, "blocks_per_worker": None}
    if mode.startswith("ray-blocks-") and mode.endswith("n") and mode[11:-1].isdigit():
        return {"kind": "ray", "blocks_per_worker": int(mode[11:-1])}
    for prefix, split in (("slices-", False), ("split-", True)):
        if not mode.startswith(prefix):
            continue
        rest = mode[len(prefix):]
        prefetch = 0
        if "-prefetch" in rest:
            rest, p = rest.split("-prefetch", 1)
            prefetch = int(p)
        if rest.endswith("n") and rest[:-1].isdigit() and int(rest[:-1]) > 0:
            return {"kind": "queue", "per_worker": int(rest[:-1]), "prefetch": prefetch,
                    "split": split}
    raise SystemExit(f"harness: unknown mode '{mode}' (static, slices-<k>n, split-<k>n, "
                     "slices-<k>n-prefetch<m>, tfdata, ray, ray-blocks-<k>n)")


# --- one run -------------------------------------------------------------------

def start_together(procs, ready_timeout, start_delay=0.3):
    """Waits for "ready" from every process, then sends all one start time."""
    for p in procs:
        p.expect("ready", ready_timeout)
    start_at = time.time() + start_delay
    for p in procs:
        p.send(repr(start_at))
    return start_at


def verify(run, key_files, expected_keys):
    counts = {}
    for path in key_files:
        with open(path) as f:
            for line in f:
                key = line.rstrip("\n")
                counts[key] = counts.get(key, 0) + 1
    expected = set(expected_keys)
    run["expected"] = len(expected)
    run["distinct"] = sum(1 for k in counts if k in expected)
    run["unknown"] = sum(1 for k in counts if k not in expected)
    run["duplicates"] = sum(c - 1 for c in counts.values())
    run["missing"] = len(expected) - run["distinct"]
    run["verified"] = (run["missing"] == 0 and run["duplicates"] == 0 and run["unknown"] == 0)


def finish(run, start_at, results, slowdowns, record_us, total_records):
    run["records_per_worker"] = [r["records"] for r in results]
    if all("items" in r for r in results):
        run["items_per_worker"] = [r["items"] for r in results]
    run["makespan_s"] = max(r["last"] for r in results) - start_at
    run["first_record_delay_s"] = min(r["first"] for r in results) - start_at
    speed_sum = sum(1.0 / s for s in slowdowns)
    run["ideal_s"] = total_records * record_us * 1e-6 / speed_sum
    run["ratio"] = run["makespan_s"] / run["ideal_s"]


def parse_worker_line(line):
    fields = dict(kv.split("=", 1) for kv in line.split())
    return {"records": int(fields["records"]), "items": int(fields["items"]),
            "first": float(fields["first"]), "last": float(fields["last"])}


class Bench:
    def __init__(self, args, workdir):
        self.args = args
        self.workdir = workdir
        self.address = None
        self.server = None
        self.runs = []

    def start_shardq(self):
        port_file = os.path.join(self.workdir, "shardq.port")
        self.server = Proc([self.args.shardq, "serve", "--listen", "127.0.0.1:0",
                            "--port-file", port_file],
                           os.path.join(self.workdir, "shardq-serve.log"))
        for _ in range(200):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            if self.server.popen.poll() is not None:
                raise RuntimeError("shardq serve exited: " + self.server.tail())
            time.sleep(0.05)
        else:
            raise RuntimeError("shardq serve wrote no port file in 10 s")
        self.address = "127.0.0.1:" + open(port_file).read().strip()
        log(f"shardq serve pid {self.server.popen.pid} on {self.address}")

    def run_workers(self, run, n, files, slowdowns, mode, keys_dir):
        """static and queue modes: N straggler_worker processes."""
        a = self.args
        common = ["--record-us", str(a.record_us), "--batch", str(a.batch)]
        if mode["kind"] == "queue":
            name = f"straggler-{os.getpid()}-{len(self.runs)}"
            create = [a.shardq, "create", "--address", self.address, "--name", name,
                      "--slices", str(mode["per_worker"] * n), "--epochs", "1",
                      "--seed", str(a.seed), "--lease-timeout", "30",
                      "--num-clients", str(max(1, mode["prefetch"]))]
            # slices-<k>n: fixed slices; split-<k>n: with tail rebalancing.
            if not mode["split"]:
                create.append("--no-split")
            create += files
            out = subprocess.run(create, capture_output=True, text=True)
            if out.returncode != 0:
                raise RuntimeError("shardq create failed: " + out.stderr.strip())
            run["queue"] = out.stdout.strip()
            common += ["--address", self.address, "--name", name,
                       "--heartbeat-ms", str(a.heartbeat_ms)]
            if mode["prefetch"]:
                common += ["--prefetch", str(mode["prefetch"])]
        procs = []
        key_files = []
        try:
            for i in range(n):
                keys = os.path.join(keys_dir, f"keys-{i}.txt")
                key_files.append(keys)
                args = [a.worker, "--worker-index", str(i), "--slowdown", repr(slowdowns[i]),
                        "--keys-out", keys] + common
                if mode["kind"] == "static":
                    args += ["--static-files"] + files[i::n]
                procs.append(Proc(args, os.path.join(keys_dir, f"worker-{i}.log")))
            start_at = start_together(procs, ready_timeout=60)
            for p in procs:
                p.close_stdin()
            results = [parse_worker_line(p.expect("worker=", a.run_timeout)) for p in procs]
        finally:
            for p in procs:
                p.stop(grace=5)
        return start_at, results, key_files

    def run_mode(self, n, model, slowdowns, mode_name, files, keys, peers):
        a = self.args
        mode = parse_mode(mode_name)
        run = {"workers": n, "model": model, "mode": mode_name}
        keys_dir = os.path.join(self.workdir, f"n{n}-{model}-{mode_name}")
        os.makedirs(keys_dir, exist_ok=True)
        t0 = time.time()
        try:
            if mode["kind"] in ("static", "queue"):
                start_at, results, key_files = self.run_workers(run, n, files, slowdowns, mode,
                                                                keys_dir)
            else:
                peer = peers.get(mode["kind"])
                if peer.skip_reason:
                    run["skipped"] = peer.skip_reason
                    log(f"  {mode_name}: SKIPPED: {peer.skip_reason}")
                    self.runs.append(run)
                    return
                start_at, results, key_files = peer.run(n, files, slowdowns, keys_dir, mode)
            finish(run, start_at, results, slowdowns, a.record_us, len(keys))
            verify(run, key_files, keys)
        except Exception as e:  # one failed run must not lose the others
            run["error"] = str(e)
            log(f"  {mode_name}: ERROR: {e}")
        run["wall_s"] = time.time() - t0
        if "ratio" in run:
            log(f"  N={n} {model:9s} {mode_name:24s} makespan {run['makespan_s']:6.2f} s  "
                f"ideal {run['ideal_s']:5.2f} s  ratio {run['ratio']:.3f}  "
                f"{'all records once' if run.get('verified') else 'VERIFY FAILED'}  "
                f"records/worker {run['records_per_worker']}")
        self.runs.append(run)
        shutil.rmtree(keys_dir, ignore_errors=True)


# --- peers ---------------------------------------------------------------------

class Peer:
    """Long-lived peer processes, started once for the largest N and reused
    by every run (a run of N workers uses the first N consumers): importing
    TensorFlow in 16 processes on 2 cores takes over a minute."""

    def __init__(self, args, workdir, kind, skip_reason):
        self.args = args
        self.workdir = workdir
        self.kind = kind
        self.skip_reason = skip_reason
        self.n = None
        self.procs = []
        self.runs_done = 0
        self.warmed = False

    def env(self):
        env = dict(os.environ)
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        return env

    def ensure_started(self, n):
        if self.procs or self.skip_reason:
            return
        n = self.n = max(int(x) for x in self.args.workers.split(","))
        py = self.args.venv_python
        t0 = time.time()
        logs = os.path.join(self.workdir, self.kind)
        os.makedirs(logs, exist_ok=True)
        try:
            if self.kind == "tfdata":
                server = Proc([py, os.path.join(PEERS, "tfdata_peer.py"), "server",
                               "--workers", str(self.args.tfdata_workers)],
                              os.path.join(logs, "server.log"), env=self.env())
                self.procs = [server]
                target = server.expect("ready", 300).split()[1]
                for i in range(n):
                    self.procs.append(Proc(
                        [py, os.path.join(PEERS, "tfdata_peer.py"), "consumer",
                         "--dispatcher", target, "--index", str(i)],
                        os.path.join(logs, f"consumer-{i}.log"), env=self.env()))
                for p in self.procs[1:]:
                    p.expect("loaded", 600)
            else:
                self.procs = [Proc([py, os.path.join(PEERS, "ray_peer.py"), "--workers", str(n)],
                                   os.path.join(logs, "driver.log"), env=self.env())]
                self.procs[0].expect("loaded", 600)
        except Exception as e:
            self.skip_reason = f"{self.kind} peer did not start: {e}"
            self.stop()
            return
        log(f"  {self.kind}: started for N={n} in {time.time() - t0:.1f} s")

    def run(self, n, files, slowdowns, keys_dir, mode):
        self.ensure_started(n)
        if self.skip_reason:
            raise RuntimeError(self.skip_reason)
        if not self.warmed:
            # One unpaced pass first, not measured: the first job of a peer
            # pays one-time costs (Ray starts its read-task workers, TF
            # traces the dataset), which a long training job pays once.
            t0 = time.time()
            warm_dir = os.path.join(self.workdir, f"{self.kind}-warm-up")
            os.makedirs(warm_dir, exist_ok=True)
            self._run_once(n, files, [1.0] * n, warm_dir, mode, record_us=0)
            shutil.rmtree(warm_dir, ignore_errors=True)
            self.warmed = True
            log(f"  {self.kind}: warm-up pass (unpaced, not measured) {time.time() - t0:.1f} s")
        return self._run_once(n, files, slowdowns, keys_dir, mode, self.args.record_us)

    def _run_once(self, n, files, slowdowns, keys_dir, mode, record_us):
        a = self.args
        self.runs_done += 1
        key_files = [os.path.join(keys_dir, f"keys-{i}.txt") for i in range(n)]
        if self.kind == "tfdata":
            consumers = self.procs[1:1 + n]
            job = f"straggler-{os.getpid()}-{self.runs_done}"
            for i, p in enumerate(consumers):
                p.send(json.dumps({"job": job, "files": files, "batch": a.batch,
                                   "slowdown": slowdowns[i], "record_us": record_us,
                                   "keys_out": key_files[i]}))
            start_at = start_together(consumers, ready_timeout=120)
            results = [json.loads(p.expect("result ", a.run_timeout)[len("result "):])
                       for p in consumers]
        else:
            driver = self.procs[0]
            blocks = mode["blocks_per_worker"] and mode["blocks_per_worker"] * n
            driver.send(json.dumps({"workers": n, "files": files, "blocks": blocks,
                                    "batch": a.batch, "slowdowns": slowdowns,
                                    "record_us": record_us, "keys_dir": keys_dir}))
            start_at = start_together([driver], ready_timeout=120, start_delay=0.5)
            results = json.loads(driver.expect("result ", a.run_timeout)[len("result "):])
        return start_at, results, key_files

    def stop(self):
        if not self.procs:
            return
        # Tell all to quit first, so they shut down in parallel; the server last.
        for p in self.procs[1:] + self.procs[:1]:
            try:
                p.send(json.dumps({"quit": True}))
            except (OSError, ValueError):
                pass
            p.close_stdin()
        for p in self.procs[1:] + self.procs[:1]:
            p.stop(grace=30)
        self.procs = []


class Peers:
    def __init__(self, args, workdir):
        self.peers = {}
        for kind, module in (("tfdata", "tensorflow"), ("ray", "ray")):
            self.peers[kind] = Peer(args, workdir, kind, self.check(args, kind, module))

    @staticmethod
    def check(args, kind, module):
        reason = dict(args.skip_peer or []).get(kind)
        if reason:
            return reason
        if not args.venv_python:
            return "no peer venv (--venv-python not given)"
        probe = subprocess.run([args.venv_python, "-c", f"import {module}"],
                               capture_output=True, text=True,
                               env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["?"])[-1]
            return f"`import {module}` fails in {args.venv_python}: {last}"
        return None

    def get(self, kind):
        return self.peers[kind]

    def stop(self):
        for p in self.peers.values():
            p.stop()


def print_table(runs):
    print("| N | speed model | mode | makespan (s) | ideal (s) | makespan / ideal | "
          "every record once | records per worker |")
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        head = f"| {r['workers']} | {r['model']} | {r['mode']} |"
        if "skipped" in r:
            print(head + f" skipped: {r['skipped']} | | | | |")
        elif "error" in r:
            print(head + f" ERROR: {r['error']} | | | | |")
        else:
            once = "yes" if r["verified"] else (
                f"NO: {r['missing']} missing, {r['duplicates']} repeated")
            print(head + f" {r['makespan_s']:.2f} | {r['ideal_s']:.2f} | {r['ratio']:.3f} | "
                  f"{once} | {' '.join(map(str, r['records_per_worker']))} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shardq", required=True, help="the shardq binary")
    p.add_argument("--worker", required=True, help="the straggler_worker binary")
    p.add_argument("--sim", required=True, help="the straggler_sim binary (speed models)")
    p.add_argument("--venv-python", help="python of the peers' venv")
    p.add_argument("--skip-peer", nargs=2, action="append", metavar=("PEER", "REASON"),
                   help="do not run PEER (tfdata, ray); REASON goes into the table")
    p.add_argument("--workers", default="8,16")
    p.add_argument("--models", default="uniform,two-slow,lognormal")
    p.add_argument("--modes", default="static,slices-10n,slices-50n,split-10n,"
                                      "slices-10n-prefetch2,tfdata,ray-blocks-10n")
    # 3000 x 2 ms: a 6.5 s ideal epoch, long enough that start-up and the
    # last rounds of splitting are not most of the tail.
    p.add_argument("--records-per-worker", type=int, default=3000)
    p.add_argument("--record-us", type=float, default=2000)
    p.add_argument("--files-per-worker", type=int, default=4)
    p.add_argument("--batch", type=int, default=16, help="records per read call")
    p.add_argument("--heartbeat-ms", type=int, default=50,
                   help="workers' heartbeat interval; the epochs here last seconds, so "
                        "this is shorter than the client's 1 s default in proportion")
    p.add_argument("--tfdata-workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--run-timeout", type=float, default=120,
                   help="seconds a run may take before it is failed")
    p.add_argument("--out-json", required=True)
    p.add_argument("--keep-workdir", action="store_true")
    args = p.parse_args()
    if args.records_per_worker % args.files_per_worker:
        raise SystemExit("harness: --records-per-worker must be a multiple of --files-per-worker")
    for m in args.modes.split(","):
        parse_mode(m)

    load_before = os.getloadavg()[0]
    workdir = tempfile.mkdtemp(prefix="shardq-straggler-")
    bench = Bench(args, workdir)
    peers = Peers(args, workdir)
    t0 = time.time()
    try:
        bench.start_shardq()
        for n in [int(x) for x in args.workers.split(",")]:
            files, keys = make_data_set(os.path.join(workdir, f"data-n{n}"), n,
                                        args.files_per_worker, args.records_per_worker)
            log(f"N={n}: {len(files)} files, {len(keys)} records, "
                f"{args.record_us:.0f} us per record at 1x")
            for model in args.models.split(","):
                slowdowns = slowdowns_of(args.sim, model, n, args.seed)
                for mode in args.modes.split(","):
                    bench.run_mode(n, model, slowdowns, mode, files, keys, peers)
    finally:
        peers.stop()
        if bench.server:
            bench.server.stop(grace=0)
        if not args.keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"work directory kept: {workdir}")
    settings = {k: v for k, v in vars(args).items()
                if k in ("workers", "models", "modes", "records_per_worker", "record_us",
                         "files_per_worker", "batch", "tfdata_workers", "seed")}
    settings["wall_s"] = time.time() - t0
    # Other work on the machine delays wake-ups; the report shows the load.
    settings["load_before"] = load_before
    settings["load_after"] = os.getloadavg()[0]
    with open(args.out_json, "w") as out:
        json.dump({"settings": settings, "runs": bench.runs}, out, indent=1)
    print_table(bench.runs)
    failed = [r for r in bench.runs if "error" in r or ("verified" in r and not r["verified"])]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
