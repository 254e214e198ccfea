"""Records/s (issue 20): the readers and the pipeline report how many
records each completed item yielded, and the coordinator sums them per
queue and per worker: in stats, `status --json`, and /metrics
(shardq_records_total, shardq_worker_records_total). In process, and over
a session with a real `shardq serve`."""
import json
import re
import subprocess
import time
import urllib.request

import shardq
from serve_helpers import SHARDQ, read_all, served, unique


def test_a_reader_reports_the_records_of_each_item_it_completes(text_files):
    files = text_files(4, 25)
    queue = shardq.WorkQueue(files, num_epochs=2, num_slices=10, name=unique("records"))
    values = read_all(shardq.TextLineReader(), queue.input_producer())
    assert len(values) == 200
    stats = queue.stats()
    assert stats["records"] == 200
    assert sum(w["records"] for w in stats["workers"].values()) == 200


def test_the_pipeline_reports_the_records_of_each_item_it_completes(text_files):
    files = text_files(3, 40)
    queue = shardq.WorkQueue(files, num_slices=9, name=unique("records-pipe"))
    rows = list(shardq.data.from_queue(queue, reader="text"))
    assert len(rows) == 120
    assert queue.stats()["records"] == 120


def test_a_take_without_a_reader_counts_no_records(text_files):
    files = text_files(2, 5)
    queue = shardq.WorkQueue(files, name=unique("records-none"))
    while True:
        try:
            item = queue.take()
        except shardq.OutOfRangeError:
            break
        queue.complete(item)
    stats = queue.stats()
    assert stats["completed"] == 2 and stats["records"] == 0


def http_port(log_path):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = re.search(r"http://127\.0\.0\.1:(\d+)/", log_path.read_text())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError("serve did not print its HTTP address")


def test_records_reach_status_json_and_metrics_over_a_session(text_files, tmp_path):
    files = text_files(3, 30)
    with served(tmp_path, "--http", "127.0.0.1:0") as (address, log):
        queue = shardq.WorkQueue(files, num_epochs=2, num_slices=6, name="rec",
                                 address=address, worker_id="reader-1")
        assert len(read_all(shardq.TextLineReader(), queue.input_producer())) == 180
        status = json.loads(subprocess.run(
            [SHARDQ, "status", "--address", address, "--name", "rec", "--json"],
            capture_output=True, text=True, check=True).stdout)
        (q,) = status["queues"]
        assert q["records"] == 180
        assert [w["records"] for w in q["workers"] if w["worker"] == "reader-1"] == [180]
        port = http_port(log)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as resp:
            text = resp.read().decode()
        assert "# TYPE shardq_records_total counter" in text
        assert 'shardq_records_total{queue="rec"} 180\n' in text
        assert 'shardq_worker_records_total{queue="rec",worker="reader-1"} 180\n' in text
