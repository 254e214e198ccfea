"""One logger (issue 16): `shardq serve` logs what it does at info, each
line timestamped with its level; the library (here the client verbs) logs
warnings only; SHARDQ_LOG_LEVEL overrides both."""
import os
import re
import signal
import subprocess
import time

from cli_helpers import make_text_files, run, shardq_bin

GENEROUS = 60  # seconds; only an upper bound for a log line that is due


def line(level):
    """The start of a log line at `level`: timestamp, logger, level."""
    return r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[shardq\] \[" + level + r"\] "


def start(tmp_path, env_level=None):
    port_file = tmp_path / "port"
    log_path = tmp_path / "serve.log"
    env = dict(os.environ)
    env.pop("SHARDQ_LOG_LEVEL", None)
    if env_level is not None:
        env["SHARDQ_LOG_LEVEL"] = env_level
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([shardq_bin(), "serve", "--listen", "127.0.0.1:0",
                                 "--port-file", str(port_file)],
                                stdout=subprocess.DEVNULL, stderr=log, env=env)
    deadline = time.monotonic() + GENEROUS
    while not port_file.exists():
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, "shardq serve did not start"
        time.sleep(0.02)
    return proc, f"127.0.0.1:{int(port_file.read_text())}", log_path


def stop(proc):
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=GENEROUS) == 0


def wait_for(log_path, pattern):
    deadline = time.monotonic() + GENEROUS
    while True:
        text = log_path.read_text()
        if re.search(pattern, text, re.M):
            return text
        assert time.monotonic() < deadline, f"no line matching {pattern!r} in:\n{text}"
        time.sleep(0.05)


def test_serve_logs_queues_expired_leases_and_shutdown_with_timestamps(tmp_path):
    proc, address, log_path = start(tmp_path)
    try:
        files = make_text_files(tmp_path, 2, 5)
        created = run("create", "--address", address, "--name", "logged", "--slices", "2",
                      "--lease-timeout", "1", *files)
        assert created.stderr == "", created.stderr  # the library itself says nothing at info
        wait_for(log_path, line("info") +
                 r"queue 'logged' created: 2 item\(s\) per epoch, 1 epoch\(s\), seed \d+$")
        run("take", "--address", address, "--name", "logged", "--worker", "gone")
        # The lease ends once its 1 s timeout has passed and the coordinator
        # next looks (a status call); only the wait's upper bound is generous.
        time.sleep(1.2)
        deadline = time.monotonic() + GENEROUS
        while "lease(s) expired" not in log_path.read_text():
            assert time.monotonic() < deadline, log_path.read_text()
            run("status", "--address", address, "--name", "logged")
            time.sleep(0.2)
        wait_for(log_path, line("info") +
                 r"queue 'logged': 1 lease\(s\) expired \(no heartbeat for 1s\); "
                 r"their items go back to the queue$")
    finally:
        stop(proc)
    wait_for(log_path, line("info") + r"signal 15 \(Terminated\), shutting down$")


def test_shardq_log_level_quiets_serve(tmp_path):
    proc, address, log_path = start(tmp_path, env_level="warning")
    try:
        files = make_text_files(tmp_path, 1, 5)
        run("create", "--address", address, "--name", "quiet", *files)
    finally:
        stop(proc)
    assert log_path.read_text() == ""


def test_an_unknown_log_level_is_reported_and_ignored(tmp_path):
    proc, address, log_path = start(tmp_path, env_level="loud")
    try:
        files = make_text_files(tmp_path, 1, 5)
        run("create", "--address", address, "--name", "still-logged", *files)
        text = wait_for(log_path, r"queue 'still-logged' created")
    finally:
        stop(proc)
    assert re.search(line("warning") + r"SHARDQ_LOG_LEVEL='loud' is not one of ",
                     text, re.M), text


def test_client_warnings_are_log_lines(tmp_path):
    # A coordinator that is not there: the client's wait note is a warning.
    proc = run("status", "--address", "127.0.0.1:1", "--connect-timeout", "2", check=False)
    assert proc.returncode != 0
    assert re.search(line("warning") + r"waiting for the coordinator at 127\.0\.0\.1:1 \(",
                     proc.stderr, re.M), proc.stderr
