"""What the coordinator publishes: /metrics in Prometheus text (checked by a
small exposition-format parser), the status page (behind the token when
there is one, and reachable while slow clients hold connections), and
TensorBoard event files read back with the TFRecord framing and protobuf
messages generated from proto/shardq/tensorboard.proto."""
import importlib
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from grpc_tools import protoc

from cli_helpers import REPO, http_port, make_text_files, run, shardq_bin


@pytest.fixture(scope="module")
def tb_pb2(tmp_path_factory):
    out = tmp_path_factory.mktemp("tbstubs")
    assert protoc.main(["protoc", f"-I{REPO}", f"--python_out={out}",
                        str(REPO / "proto" / "shardq" / "tensorboard.proto")]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("proto.shardq.tensorboard_pb2")
    finally:
        sys.path.remove(str(out))


def read_records(path):
    """TFRecord framing: u64 length, u32 crc, data, u32 crc (crcs checked
    by the C++ tests; here only the framing)."""
    data = path.read_bytes()
    pos, out = 0, []
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        out.append(data[pos + 12:pos + 12 + length])
        pos += 12 + length + 4
    return out


def test_metrics_status_page_and_event_files(start_coordinator, tmp_path, tb_pb2):
    logs = tmp_path / "logs"
    c = start_coordinator("--http", "127.0.0.1:0", "--summary-dir", str(logs),
                          "--summary-interval", "0.1")
    files = make_text_files(tmp_path, 3, 10)
    run("create", "--address", c.address, "--name", "obs", "--slices", "6", "--epochs", "2",
        *files)
    run("worker", "--address", c.address, "--name", "obs", "--worker", "w0", "--", "true")
    port = http_port(tmp_path / "serve.log")
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    assert 'shardq_items_completed_total{queue="obs"} 12' in metrics
    assert 'shardq_items_taken_total{queue="obs"} 12' in metrics
    assert 'shardq_items_pending{queue="obs"} 0' in metrics
    assert 'shardq_epoch_items{queue="obs",epoch="1",state="completed"} 6' in metrics
    assert 'shardq_worker_items_completed_total{queue="obs",worker="w0"} 12' in metrics
    assert "# TYPE shardq_lease_expiries_total counter" in metrics
    # One worker never finds another's item to split.
    assert "# TYPE shardq_splits_total counter" in metrics
    assert 'shardq_splits_total{queue="obs"} 0' in metrics
    assert "# TYPE shardq_split_items_open gauge" in metrics
    assert 'shardq_split_items_open{queue="obs"} 0' in metrics
    assert "shardq_journal" not in metrics  # in memory: no journal
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/").read().decode()
    assert "queue obs" in page and "w0" in page
    assert "splits 0 (0 open)" in page

    time.sleep(0.3)  # at least one sample after the run
    c.stop()         # writes the final sample
    event_files = list(logs.glob("events.out.tfevents.*"))
    assert len(event_files) == 1
    records = read_records(event_files[0])
    first = tb_pb2.Event.FromString(records[0])
    assert first.file_version == "brain.Event:2"
    last = tb_pb2.Event.FromString(records[-1])
    values = {v.tag: v.simple_value for v in last.summary.value}
    # Zeros must be on the wire too (TensorBoard skips values without one).
    assert all(v.HasField("simple_value") for v in last.summary.value)
    assert values["shardq/obs/completed"] == 12
    assert values["shardq/obs/epoch_0/completed"] == 6
    assert values["shardq/obs/leased"] == 0
    assert values["shardq/obs/splits"] == 0
    assert values["shardq/obs/worker/w0/completed"] == 12
    steps = [tb_pb2.Event.FromString(r).step for r in records[1:]]
    assert steps == sorted(steps) and len(steps) >= 2



def test_session_limit_is_published_and_a_stream_beyond_it_is_refused(start_coordinator,
                                                                       tmp_path):
    c = start_coordinator("--http", "127.0.0.1:0", "--max-sessions", "1")
    files = make_text_files(tmp_path, 2, 5)
    run("create", "--address", c.address, "--name", "lim", "--slices", "2", *files)
    port = http_port(tmp_path / "serve.log")

    def metrics():
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()

    def await_metric(line):
        deadline = time.monotonic() + 60
        while line not in metrics():
            assert time.monotonic() < deadline, f"no {line!r} in /metrics:\n{metrics()}"
            time.sleep(0.05)

    assert "# TYPE shardq_sessions_limit gauge\nshardq_sessions_limit 1\n" in metrics()
    assert "# TYPE shardq_sessions_open gauge\nshardq_sessions_open 0\n" in metrics()
    # A worker holds its session while its command runs.
    release = tmp_path / "release"
    holder = subprocess.Popen(
        [shardq_bin(), "worker", "--address", c.address, "--name", "lim", "--worker", "w0",
         "--", "sh", "-c", f"while [ ! -e {release} ]; do sleep 0.05; done"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        await_metric("shardq_sessions_open 1\n")
        refused = run("take", "--address", c.address, "--name", "lim", "--worker", "w1",
                      check=False)
        assert refused.returncode != 0
        assert "RESOURCE_EXHAUSTED" in refused.stderr and "--max-sessions" in refused.stderr, \
            refused.stderr
    finally:
        release.touch()
        _, err = holder.communicate(timeout=60)
    assert holder.returncode == 0, err
    await_metric("shardq_sessions_open 0\n")
    # The place is free again: the worker took both items, so a new session
    # is answered with the end of input (exit 3), not refused.
    again = run("take", "--address", c.address, "--name", "lim", "--worker", "w2", check=False)
    assert again.returncode == 3, again.stderr

def test_a_durable_coordinator_publishes_its_journal(start_coordinator, tmp_path):
    c = start_coordinator("--http", "127.0.0.1:0", "--state-dir", str(tmp_path / "state"))
    files = make_text_files(tmp_path, 3, 10)
    run("create", "--address", c.address, "--name", "dur", "--slices", "6", "--epochs", "2",
        *files)
    run("worker", "--address", c.address, "--name", "dur", "--worker", "w0", "--", "true")
    port = http_port(tmp_path / "serve.log")
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    for name in ("commits", "entries", "bytes", "snapshots"):
        assert f"# TYPE shardq_journal_{name}_total counter" in metrics
    values = {k: int(v) for k, v in
              re.findall(r"^(shardq_journal_\w+_total) (\d+)$", metrics, re.M)}
    # Stored before the last completion was answered: the creation, 12
    # grants and 12 completions, in at most that many commits.
    assert values["shardq_journal_entries_total"] >= 25
    assert 1 <= values["shardq_journal_commits_total"] <= values["shardq_journal_entries_total"]
    assert values["shardq_journal_bytes_total"] > 0


SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def parse_labels(text):
    """`{a="x",b="y\\"z"}` -> {"a": "x", "b": 'y"z'}; only \\\\, \\" and \\n
    may be escaped, and a quote inside a value must be."""
    assert text[0] == "{" and text[-1] == "}", text
    body, pos, labels = text[1:-1], 0, {}
    while pos < len(body):
        m = LABEL_NAME.match(body, pos)
        assert m and body[m.end():m.end() + 2] == '="', f"bad label at {pos} in {text}"
        pos, value = m.end() + 2, []
        while body[pos] != '"':
            if body[pos] == "\\":
                escaped = body[pos + 1]
                assert escaped in '\\"n', f"bad escape \\{escaped} in {text}"
                value.append("\n" if escaped == "n" else escaped)
                pos += 2
            else:
                value.append(body[pos])
                pos += 1
        assert m.group(0) not in labels, f"label {m.group(0)} twice in {text}"
        labels[m.group(0)] = "".join(value)
        pos += 1
        if pos < len(body):
            assert body[pos] == ",", text
            pos += 1
    return labels


def parse_exposition(text):
    """Prometheus text format 0.0.4 as shardq writes it: each family has
    HELP and TYPE once, before its samples; counters are named *_total;
    a histogram's samples are its _bucket (cumulative, with le, ending in
    +Inf), _sum and _count (equal to the +Inf bucket); no sample twice.
    Returns {(name, frozenset(labels)): value} and {name: type}."""
    assert text.endswith("\n")
    types, helps, samples, current = {}, set(), {}, None
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in helps, f"second HELP for {name}"
            helps.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name not in types, f"second TYPE for {name}"
            assert kind in ("counter", "gauge", "histogram"), line
            assert (kind == "counter") == name.endswith("_total"), line
            assert name in helps, f"TYPE before HELP for {name}"
            types[name], current = kind, name
        else:
            assert not line.startswith("#") and line, f"unexpected line {line!r}"
            m = SAMPLE.match(line)
            assert m, f"not a sample: {line!r}"
            name, labels, value = m.groups()
            if types.get(current) == "histogram":
                assert name in (current + "_bucket", current + "_sum", current + "_count"), line
            else:
                assert name == current, f"sample {name} without its TYPE just before"
            key = (name, frozenset(parse_labels(labels).items()) if labels else frozenset())
            assert key not in samples, f"sample twice: {line}"
            samples[key] = float(value)
    for name in (n for n, kind in types.items() if kind == "histogram"):
        buckets = sorted(((float(dict(k)["le"]), v) for (n, k), v in samples.items()
                          if n == name + "_bucket"))
        assert buckets and buckets[-1][0] == float("inf"), f"{name} without +Inf bucket"
        counts = [v for _, v in buckets]
        assert counts == sorted(counts), f"{name} buckets not cumulative"
        assert samples[(name + "_count", frozenset())] == counts[-1]
        assert (name + "_sum", frozenset()) in samples
    return samples, types


def test_metrics_are_valid_exposition_text_with_counters_build_info_and_process(
        start_coordinator, tmp_path):
    c = start_coordinator("--http", "127.0.0.1:0", "--summary-interval", "0.1")
    files = make_text_files(tmp_path, 2, 5)
    run("create", "--address", c.address, "--name", "fmt", "--slices", "4", *files)
    run("worker", "--address", c.address, "--name", "fmt", "--worker", "w-1", "--", "true")
    time.sleep(0.3)  # a sample after the run: a take rate would now be non-zero
    port = http_port(tmp_path / "serve.log")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        samples, types = parse_exposition(resp.read().decode())
    q = frozenset({("queue", "fmt")})
    w = frozenset({("queue", "fmt"), ("worker", "w-1")})
    assert types["shardq_items_completed_total"] == "counter"
    assert samples[("shardq_items_completed_total", q)] == 4
    assert samples[("shardq_items_taken_total", q)] == 4
    assert samples[("shardq_worker_items_completed_total", w)] == 4
    assert types["shardq_items_pending"] == "gauge" and types["shardq_items_leased"] == "gauge"
    assert not [name for name in types if "rate" in name]  # Prometheus computes rates
    (version,) = [dict(k)["version"] for (name, k) in samples if name == "shardq_build_info"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert samples[("shardq_build_info", frozenset({("version", version)}))] == 1
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                 "process_virtual_memory_bytes", "process_open_fds", "process_max_fds",
                 "process_start_time_seconds"):
        assert name in types, name
    assert samples[("process_resident_memory_bytes", frozenset())] > 1 << 20
    assert 0 < samples[("process_open_fds", frozenset())] <= samples[("process_max_fds",
                                                                         frozenset())]
    for name in ("shardq_take_duration_seconds", "shardq_complete_duration_seconds"):
        assert types[name] == "histogram"
        # The worker took 4 items and completed them (and asked once more),
        # over its session (issue 17): session steps are timed as takes and
        # completions like the unary calls.
        assert samples[(name + "_count", frozenset())] >= 4, name
    start = samples[("process_start_time_seconds", frozenset())]
    assert time.time() - 600 < start <= time.time() + 1


def test_the_exposition_parser_refuses_what_prometheus_would():
    ok = "# HELP a_total x\n# TYPE a_total counter\na_total{q=\"a\\\"b\\\\c\\nd\"} 1\n"
    samples, _ = parse_exposition(ok)
    assert samples[("a_total", frozenset({("q", 'a"b\\c\nd')}))] == 1
    hist = ("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
            "h_sum 3.5\nh_count 2\n")
    samples, types = parse_exposition(hist)
    assert types["h"] == "histogram" and samples[("h_count", frozenset())] == 2
    for bad in ("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 3\n"    # not cumulative
                "h_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 2\n",
                "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\n"   # count differs
                "h_sum 1\nh_count 3\n",
                "# HELP a x\n# TYPE a counter\na 1\n",              # counter not *_total
                "a 1\n",                                            # no TYPE
                "# HELP a x\n# TYPE a gauge\na{q=\"a\"b\"} 1\n",     # quote not escaped
                "# HELP a x\n# TYPE a gauge\na{q=\"\\t\"} 1\n"):     # unknown escape
        with pytest.raises((AssertionError, IndexError)):
            parse_exposition(bad)


def get(url, headers=None, timeout=30):
    """(status, body) of a GET; HTTP errors are answers too."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),
                                    timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_with_a_token_the_page_and_metrics_require_it(start_coordinator, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    c = start_coordinator("--http", "127.0.0.1:0", "--token-file", str(token))
    run("create", "--address", c.address, "--name", "private-queue", "--token-file", str(token),
        *make_text_files(tmp_path, 1, 3))
    base = f"http://127.0.0.1:{http_port(tmp_path / 'serve.log')}"
    for path in ("/", "/metrics"):
        status, body = get(base + path)
        assert status == 401 and "private-queue" not in body
        status, body = get(base + path, {"Authorization": "Bearer wrong"})
        assert status == 401
        status, body = get(base + path + "?token=s3cret-toke")
        assert status == 401
        status, body = get(base + path, {"Authorization": "Bearer s3cret-token"})
        assert status == 200 and "private-queue" in body
        status, body = get(base + path + "?token=s3cret-token")
        assert status == 200 and "private-queue" in body
    # The page opened with ?token= links to the metrics with it.
    assert 'href="/metrics?token=s3cret-token"' in get(base + "/?token=s3cret-token")[1]


def test_http_public_serves_the_page_without_the_token(start_coordinator, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    start_coordinator("--http", "127.0.0.1:0", "--token-file", str(token), "--http-public")
    base = f"http://127.0.0.1:{http_port(tmp_path / 'serve.log')}"
    assert get(base + "/metrics")[0] == 200
    assert get(base + "/")[0] == 200


def test_slow_clients_holding_connections_do_not_block_the_metrics(start_coordinator,
                                                                   tmp_path):
    start_coordinator("--http", "127.0.0.1:0")
    port = http_port(tmp_path / "serve.log")
    # 50 clients that send a request a header line at a time and never
    # finish it (each line well within the server's read timeout).
    slow = []
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        slow.append(s)
    stop = threading.Event()

    def trickle():
        while not stop.wait(0.5):
            for s in slow:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass  # the server dropped it: fine

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    try:
        time.sleep(1)  # let the server take them all
        # A liveness check with a generous bound, not a speed test: before
        # the fix, 8 such clients made the page unreachable for as long as
        # they kept sending.
        status, body = get(f"http://127.0.0.1:{port}/metrics", timeout=60)
        assert status == 200 and "shardq_build_info" in body
    finally:
        stop.set()
        thread.join()
        for s in slow:
            s.close()
