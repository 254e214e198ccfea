"""The coordinator's live status page rendered by headless Debian chromium
while a queue is being worked by two fast workers and one stuck on its
item: the DOM (after the page's script has polled the JSON endpoints a few
times, with no reload) shows the queue, epoch progress, the ETA, the worker
timeline where the straggler's row has the longest last bar, and the
straggler flagged with its reason. Screenshots are saved to
$SHARDQ_SCREENSHOT_DIR when set (bench/results/ keeps the ones people look
at)."""
import html
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request

import pytest

from cli_helpers import http_port, make_text_files, run, shardq_bin

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def chromium(tmp_path, *args):
    """Runs headless chromium; virtual time lets the page's 1 s polls run
    several times within the budget (it waits for the fetches)."""
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=120)


def wait_for(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def timeline_rows(dom):
    """worker -> (bars, last bar seconds, last bar open) of the SVG timeline."""
    rows = {}
    for m in re.finditer(r'<g class="tl-row" data-worker="([^"]*)" data-bars="(\d+)" '
                         r'data-last-bar-seconds="([-\d.]+)" data-last-bar-open="([01])"', dom):
        rows[html.unescape(m.group(1))] = (int(m.group(2)), float(m.group(3)), m.group(4) == "1")
    return rows


def save(shot, name):
    if os.environ.get("SHARDQ_SCREENSHOT_DIR"):
        shutil.copy(shot, os.path.join(os.environ["SHARDQ_SCREENSHOT_DIR"], name))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is installed by scripts/install-deps")
def test_live_page_shows_eta_timeline_and_straggler_and_updates_without_reload(
        start_coordinator, tmp_path):
    c = start_coordinator("--http", "127.0.0.1:0", "--summary-interval", "0.5")
    base = f"http://127.0.0.1:{http_port(tmp_path / 'serve.log')}"
    files = make_text_files(tmp_path, 4, 50)
    run("create", "--address", c.address, "--name", "live", "--slices", "400", "--epochs", "3",
        *files)
    # "stuck" takes an item first and holds it for the whole test; the fast
    # workers complete many short items meanwhile.
    workers = [subprocess.Popen([shardq_bin(), "worker", "--address", c.address, "--name", "live",
                                 "--worker", "stuck", "--", "sleep", "600"],
                                stderr=subprocess.DEVNULL)]
    try:
        wait_for(lambda: any(e["worker"] == "stuck" for e in
                             get_json(f"{base}/api/timeline?queue=live&since=0")["open"]),
                 "the stuck worker's take")
        workers += [subprocess.Popen([shardq_bin(), "worker", "--address", c.address, "--name",
                                      "live", "--worker", name, "--", "sleep", "0.05"],
                                     stderr=subprocess.DEVNULL)
                    for name in ("fast-1", "fast-2")]
        wait_for(lambda: get_json(f"{base}/api/status")["queues"][0]["completed"] >= 20,
                 "20 completions")
        dom = chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", base + "/").stdout
        # The script drew several times in one document: no reload.
        updates = int(re.search(r'<body data-updates="(\d+)"', dom).group(1))
        assert updates >= 3, dom[:2000]
        assert re.search(r'data-navigation="navigate"', dom), "the page was reloaded"
        assert 'data-queue="live"' in dom and "queue live" in dom
        assert 'class="fill"' in dom                                   # progress bars
        eta = re.search(r'<div class="eta" id="eta-live" data-eta-job-seconds="([\d.]+)"[^>]*>'
                        r'(ETA epoch \d+: [^<]+)</div>', dom)
        assert eta, dom
        assert float(eta.group(1)) > 0 and "job:" in eta.group(2)
        rows = timeline_rows(dom)
        assert set(rows) == {"stuck", "fast-1", "fast-2"}, rows
        longest = max(rows, key=lambda w: rows[w][1])
        assert longest == "stuck" and rows["stuck"][2], rows   # still open, the longest
        assert rows["fast-1"][0] > 5 and rows["fast-2"][0] > 5  # many bars each
        assert re.search(r'<tr class="straggler" data-worker="stuck">.*?straggler: [^<]*median',
                         dom), dom
        assert not re.search(r'<tr class="straggler" data-worker="fast-', dom)
        assert "svg" in dom and 'class="rates"' in dom and 'class="levels"' in dom  # charts
        shot = tmp_path / "live_page.png"
        chromium(tmp_path, "--virtual-time-budget=3000", "--window-size=1300,1000",
                 f"--screenshot={shot}", base + "/")
        assert shot.exists() and shot.stat().st_size > 10000
        save(shot, "live_page.png")
    finally:
        for w in workers:
            w.kill()
            w.wait()

