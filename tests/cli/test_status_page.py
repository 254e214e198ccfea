"""The coordinator's status page rendered by headless Debian chromium while
a queue is being worked: the DOM shows the queue, epoch progress and the
straggler; a screenshot is saved (SHARDQ_SCREENSHOT=path to keep it)."""
import os
import re
import shutil
import subprocess
import time

import pytest

from cli_helpers import make_text_files, run, shardq_bin

CHROMIUM = shutil.which("chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars"]


def http_port(log_path):
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", log_path.read_text())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError("serve did not print its HTTP address")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is installed by scripts/install-deps")
def test_status_page_renders_a_live_queue_with_its_straggler(start_coordinator, tmp_path):
    c = start_coordinator("--http", "127.0.0.1:0", "--summary-interval", "0.5")
    files = make_text_files(tmp_path, 4, 50)
    run("create", "--address", c.address, "--name", "live", "--slices", "100", "--epochs", "5",
        *files)
    workers = [subprocess.Popen([shardq_bin(), "worker", "--address", c.address, "--name", "live",
                                 "--worker", name, "--", "sleep", delay],
                                stderr=subprocess.DEVNULL)
               for name, delay in (("fast-1", "0.02"), ("fast-2", "0.02"), ("slow", "0.4"))]
    try:
        time.sleep(1.5)  # enough for rates to show who is slow
        url = f"http://127.0.0.1:{http_port(tmp_path / 'serve.log')}/"
        profile = tmp_path / "profile"
        dom = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
                             capture_output=True, text=True, timeout=120).stdout
        assert "queue live" in dom and "finished" not in dom  # still running
        assert 'class="fill"' in dom                       # epoch progress bars
        assert re.search(r'<tr class="slow"><td>slow \(straggler\)', dom), dom
        assert "fast-1 (straggler)" not in dom
        shot = tmp_path / "status_page.png"
        subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--window-size=1000,900",
                        f"--screenshot={shot}", url], capture_output=True, timeout=120)
        assert shot.exists() and shot.stat().st_size > 1000
        if os.environ.get("SHARDQ_SCREENSHOT"):
            shutil.copy(shot, os.environ["SHARDQ_SCREENSHOT"])
    finally:
        for w in workers:
            w.kill()
            w.wait()
