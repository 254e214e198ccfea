#!/usr/bin/python3
"""bench/coordinator_throughput/row_cpu.py: the server's CPU a pair, row by row.

Starts one `shardq serve` (durable, with a fresh --state-dir, unless --memory)
and a redis-server on free 127.0.0.1 ports, runs the coordinator_throughput
driver against them with --repeats 1, and after each row the driver prints
reads the server's utime+stime from /proc/PID/stat: the CPU the server spent
on that row (its warm-up included), divided by the row's items. Prints those
lines and the driver's session table lines. Both servers are stopped by PID.

--perf-stat also counts, over the first row only (the session row), the
server's sendmsg/futex/recvmsg/epoll_wait syscalls and context switches
(`perf stat`; needs perf and the syscalls tracepoints).

Examples (the figures of bench/results/coordinator_throughput.md, 2026-12-06):
  bench/coordinator_throughput/row_cpu.py --clients 32,128 --items 40000,40000
  bench/coordinator_throughput/row_cpu.py --memory --clients 8,32 --items 20000,40000
  bench/coordinator_throughput/row_cpu.py --shardq OTHER_BUILD/bin/shardq ...  # an A/B
Builds nothing: run `make build` (and the driver's target) first.
"""
import argparse
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid):
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(predicate, what, seconds=20):
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            sys.exit(f"row_cpu: {what} did not start within {seconds} s")
        time.sleep(0.05)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shardq", default=str(REPO / "build" / "bin" / "shardq"),
                   help="the shardq binary to serve with")
    p.add_argument("--driver", default=str(REPO / "build" / "bin" / "coordinator_throughput"))
    p.add_argument("--memory", action="store_true", help="serve without --state-dir")
    p.add_argument("--clients", default="32", help="the driver's --clients")
    p.add_argument("--items", default="40000", help="the driver's --items")
    p.add_argument("--session-driver", default=None, help="the driver's --session-driver")
    p.add_argument("--serve-env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for `shardq serve` only (repeatable), "
                        "e.g. GRPC_POLL_STRATEGY=poll")
    p.add_argument("--perf-stat", action="store_true",
                   help="count the server's syscalls and context switches over the session row")
    p.add_argument("serve_args", nargs="*", help="more `shardq serve` flags (after --)")
    args = p.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="shardq-row-cpu-"))
    procs = []
    try:
        serve = [args.shardq, "serve", "--listen", "127.0.0.1:0",
                 "--port-file", str(work / "port")]
        if not args.memory:
            serve += ["--state-dir", str(work / "state")]
        serve_env = dict(os.environ)
        for assignment in args.serve_env:
            name, _, value = assignment.partition("=")
            serve_env[name] = value
        server = subprocess.Popen(serve + args.serve_args, stdout=subprocess.DEVNULL, env=serve_env,
                                  stderr=open(work / "serve.log", "w"))
        procs.append(server)
        redis_port = free_port()
        redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port",
                                  str(redis_port), "--save", "", "--appendonly", "no",
                                  "--dir", str(work)], stdout=subprocess.DEVNULL)
        procs.append(redis)
        port_file = work / "port"
        wait_for(lambda: port_file.exists() and port_file.read_text().strip(), "shardq serve")
        wait_for(lambda: subprocess.run(["redis-cli", "-p", str(redis_port), "ping"],
                                        capture_output=True).returncode == 0, "redis-server")
        driver = subprocess.Popen(
            [args.driver, "--shardq", "127.0.0.1:" + port_file.read_text().strip(),
             "--redis", f"127.0.0.1:{redis_port}", "--clients", args.clients,
             "--items", args.items, "--repeats", "1", "--session-connection-row", "0"]
            + (["--session-driver", args.session_driver] if args.session_driver else []),
            stdout=subprocess.PIPE, text=True)
        procs.append(driver)
        perf = None
        if args.perf_stat:
            perf = subprocess.Popen(
                ["perf", "stat", "-e",
                 "syscalls:sys_enter_sendmsg,syscalls:sys_enter_futex,"
                 "syscalls:sys_enter_recvmsg,syscalls:sys_enter_epoll_wait,context-switches",
                 "-p", str(server.pid)])
        last = proc_cpu(server.pid)
        row = re.compile(r"^(\S+)\s+(\d+) clients,\s+(\d+) items:.*?(\d+) pairs/s")
        for line in driver.stdout:
            m = row.match(line)
            if m:
                now = proc_cpu(server.pid)
                print(f"{m.group(1):16s} {m.group(2):>4s} clients: {int(m.group(4)):7d} pairs/s, "
                      f"shardq serve's CPU {(now - last) * 1e6 / int(m.group(3)):.1f} us a "
                      "pair (warm-up included; ~0 on Redis's row)", flush=True)
                last = now
                if perf is not None:
                    perf.send_signal(signal.SIGINT)
                    perf.wait()
                    perf = None
            elif line.startswith("| ") and " session " in line:
                print(line.rstrip(), flush=True)
        if driver.wait() != 0:
            sys.exit(f"row_cpu: the driver failed (exit {driver.returncode})")
    finally:
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
