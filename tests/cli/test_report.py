"""`shardq report`: one self-contained HTML file (and a PNG of it) of a
queue's timeline and charts, fetched from the coordinator's --http server;
opened with the coordinator gone, headless chromium draws it from the data
inside."""
import re

import pytest

from cli_helpers import make_text_files, run
from test_status_page import CHROMIUM, chromium, http_port, save, timeline_rows


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is installed by scripts/install-deps")
def test_report_is_a_self_contained_file_with_the_timeline(start_coordinator, tmp_path):
    c = start_coordinator("--http", "127.0.0.1:0")
    http = f"127.0.0.1:{http_port(tmp_path / 'serve.log')}"
    run("create", "--address", c.address, "--name", "post<mortem>", "--slices", "12",
        "--epochs", "2", *make_text_files(tmp_path, 3, 10))
    run("worker", "--address", c.address, "--name", "post<mortem>", "--worker", "w-1", "--",
        "true")
    out, png = tmp_path / "report.html", tmp_path / "report.png"
    run("report", "--address", http, "--name", "post<mortem>", "--out", str(out), "--png",
        str(png), timeout=180)
    text = out.read_text()
    # Self-contained: no script, style or image is loaded from anywhere.
    assert not re.search(r'<(script|link|img)[^>]+(src|href)=', text)
    assert text.count('"kind":"complete"') == 24  # the data is inside
    assert png.exists() and png.stat().st_size > 10000
    save(png, "report.png")
    c.stop()  # the file needs no coordinator
    dom = chromium(tmp_path, "--virtual-time-budget=2000", "--dump-dom",
                   out.resolve().as_uri()).stdout
    assert 'data-queue="post&lt;mortem&gt;"' in dom
    assert "finished" in dom and "cannot reach" not in dom.split('id="error"', 1)[1][:200]
    rows = timeline_rows(dom)
    assert set(rows) == {"w-1"} and rows["w-1"][0] == 24, rows  # 12 items x 2 epochs
    # Wrong address, unknown queue: errors that say what to do.
    bad = run("report", "--address", c.address, "--name", "x", "--out", str(out), check=False)
    assert bad.returncode == 1 and "--http address" in bad.stderr


def test_report_given_the_grpc_address_finds_the_page_through_the_coordinator(
        start_coordinator, tmp_path):
    c = start_coordinator("--http", "127.0.0.1:0")
    run("create", "--address", c.address, "--name", "q", "--slices", "4",
        *make_text_files(tmp_path, 2, 5))
    run("worker", "--address", c.address, "--name", "q", "--worker", "w-1", "--", "true")
    out = tmp_path / "report.html"
    done = run("report", "--address", c.address, "--name", "q", "--out", str(out))
    assert f"wrote {out}" in done.stdout
    assert out.read_text().count('"kind":"complete"') == 4


def test_report_at_a_coordinator_without_a_page_says_how_to_start_one(
        start_coordinator, tmp_path):
    c = start_coordinator()
    out = tmp_path / "report.html"
    bad = run("report", "--address", c.address, "--name", "q", "--out", str(out), check=False)
    assert bad.returncode == 1, bad
    assert "FAILED_PRECONDITION" in bad.stderr and "serve --http" in bad.stderr, bad.stderr
    assert not out.exists()
