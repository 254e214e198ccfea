#!/usr/bin/env python3
"""What the live page costs at 10,000 workers: the page a coordinator
serves, given (as a report) a queue with N workers and their recent item
events, drawn by headless chromium. Prints the render time the page
measures itself and the size of the JSON it polls, writes a screenshot.

    SHARDQ_BIN=build/bin bench/status_page/page_scale.py --workers 10000 \
        --events-per-worker 20 --out bench/results

Synthetic data (no 10,000 real workers): what is measured is the page's
drawing and the JSON it would poll, not the coordinator."""
import argparse
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def served_page(shardq):
    """The page as `shardq serve --http` serves it (with no queue)."""
    tmp = pathlib.Path(tempfile.mkdtemp())
    log = open(tmp / "serve.log", "wb")
    proc = subprocess.Popen([shardq, "serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = re.search(r"http://127\.0\.0\.1:(\d+)/", (tmp / "serve.log").read_text())
            if m:
                return urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/").read().decode()
            time.sleep(0.05)
        raise SystemExit("serve did not start")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait()


def synthetic(workers, per_worker, seed=1):
    """N workers that have each worked for 5 minutes at lognormal speeds
    (every 997th at a quarter speed), about per_worker items each."""
    rng = random.Random(seed)
    now = 1_800_000_000.0
    status_workers, events, opened = [], [], []
    lease = 0
    for w in range(workers):
        name = f"worker-{w:05d}"
        speed = 0.25 if w % 997 == 0 else rng.lognormvariate(0, 0.3)
        t, done = now - 300 + rng.random(), 0
        while True:
            lease += 1
            e = {"kind": "take", "t": t, "worker": name, "lease": lease, "epoch": 0,
                 "index": lease, "taken": t}
            events.append(e)
            took = rng.expovariate(1.0) * 300 / per_worker / speed
            if t + took > now:
                opened.append(e)
                break
            events.append(dict(e, kind="complete", t=t + took))
            t, done = t + took, done + 1
        status_workers.append({"worker": name, "completed": done, "taken": done + 1, "held": 1,
                               "items_per_second": done / 300})
    events.sort(key=lambda e: e["t"])
    completed = sum(1 for e in events if e["kind"] == "complete")
    items = lease * 2
    pending = items - completed - workers
    queue = {"name": "big", "seed": "1", "items": items, "epochs": 1, "pending": pending,
             "leased": workers, "completed": completed, "taken": completed + workers, "expired": 0,
             "released": 0, "duplicates": 0, "splits": 0, "split_items_open": 0, "finished": False,
             "failed": 0, "refused_completions": 0, "finished_with_failures": False,
             "max_attempts": 3, "epochs_done": 0,
             "per_epoch": [{"epoch": 0, "pending": pending, "leased": workers,
                            "completed": completed, "failed": 0}],
             "failed_items": [], "workers": status_workers}
    timeline = {"queue": "big", "now": now, "since": 0, "bound": 262144, "dropped": 0,
                "truncated": False, "events": events, "open": opened}
    server = {"version": "bench", "now": now, "uptime_seconds": 300, "state_dir": "", "journal": None}
    return {"server": server, "status": {"queues": [queue]}, "timeline": {"big": timeline}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=10000)
    ap.add_argument("--events-per-worker", type=int, default=20)
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    shardq = str(pathlib.Path(os.environ.get("SHARDQ_BIN", "build/bin")) / "shardq")
    chromium = shutil.which("chromium") or sys.exit("needs chromium")
    page = served_page(shardq)
    data = synthetic(args.workers, args.events_per_worker)
    status_bytes = len(json.dumps(data["status"], separators=(",", ":")))
    timeline_bytes = len(json.dumps(data["timeline"]["big"], separators=(",", ":")))
    html = page.replace("window.SHARDQ_REPORT = null;",
                        "window.SHARDQ_REPORT = " + json.dumps(data).replace("</", "<\\/") + ";")
    tmp = pathlib.Path(tempfile.mkdtemp())
    path = tmp / "page.html"
    path.write_text(html)
    start = time.monotonic()
    dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp / 'p'}", "--dump-dom",
                          path.as_uri()], capture_output=True, text=True, timeout=300).stdout
    wall = time.monotonic() - start
    dom = re.sub(r"<script>.*?</script>", "", dom, flags=re.S)  # count what was drawn
    render_ms = float(re.search(r'data-render-ms="([\d.]+)"', dom).group(1))
    rows = len(re.findall(r'<g class="tl-row"', dom))
    table_rows = len(re.findall(r'<tr class="[^"]*" data-worker=', dom))
    notes = re.findall(r'<p class="muted scale-note">([^<]*)</p>', dom)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shot = out / f"live_page_{args.workers}_workers.png"
    subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp / 'p'}", "--window-size=1300,1400",
                    f"--screenshot={shot.resolve()}", path.as_uri()], capture_output=True, timeout=300)
    print(f"workers={args.workers} events={len(data['timeline']['big']['events'])} "
          f"status_json={status_bytes} B timeline_json={timeline_bytes} B "
          f"render_ms={render_ms} chromium_wall_s={wall:.1f} timeline_rows={rows} "
          f"table_rows={table_rows}")
    for n in notes:
        print("note:", n)
    print("screenshot:", shot)


if __name__ == "__main__":
    main()
