"""Reaching the coordinator: a wrong or unreachable address, or a TLS
mismatch, says so on stderr at once ("waiting for the coordinator at ADDR
(REASON), retrying") and ends after --connect-timeout with UNAVAILABLE
naming the address; Ctrl-C ends the wait at once; once the coordinator has
answered, a worker still rides through its restart. And argument errors:
every one exits 2 with a message in words."""
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from cli_helpers import free_port, make_text_files, run, shardq_bin, start_serve

# Generous bounds: a failure shows as a hang past them, never as a race.
GENEROUS = 60


def assert_unavailable_naming(proc, address, waited=True):
    """`waited`: the wait lasted long enough (2 s) for the note."""
    assert proc.returncode == 1, proc.stderr
    assert "UNAVAILABLE" in proc.stderr, proc.stderr
    if waited:
        assert f"waiting for the coordinator at {address} (" in proc.stderr, proc.stderr
    # The final error names the address too, not only the note.
    final = proc.stderr.strip().splitlines()[-1]
    assert "UNAVAILABLE" in final and address in final, final


def test_status_at_a_closed_port_says_it_waits_then_fails_naming_the_address():
    address = f"127.0.0.1:{free_port()}"
    proc = run("status", "--address", address, "--connect-timeout", "2", check=False,
               timeout=GENEROUS)
    assert_unavailable_naming(proc, address)
    assert "connect timeout" in proc.stderr


@pytest.mark.parametrize("verb", ["create", "take", "worker", "status", "snapshot", "restore"])
def test_every_client_verb_takes_connect_timeout(verb, tmp_path, request):
    address = f"127.0.0.1:{free_port()}"
    files = make_text_files(tmp_path, 1, 3)
    checkpoint = tmp_path / "ckpt"
    if verb == "restore":  # a real checkpoint, so that only the address is wrong
        live = request.getfixturevalue("coordinator").address
        run("create", "--address", live, "--name", "c", *files)
        run("snapshot", "--address", live, "--name", "c", "--out", str(checkpoint))
    extra = {"create": files, "worker": ["--", "true"], "snapshot": ["--out", str(checkpoint)],
             "restore": ["--in", str(checkpoint)]}.get(verb, [])
    proc = run(verb, "--address", address, "--connect-timeout", "0.5", *extra, check=False,
               timeout=GENEROUS)
    assert_unavailable_naming(proc, address, waited=False)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True)
    return cert, key


def test_a_tls_client_at_a_plaintext_coordinator_fails_naming_the_address(
        coordinator, certificate):
    cert, _ = certificate
    proc = run("status", "--address", coordinator.address, "--tls-ca", str(cert),
               "--connect-timeout", "2", check=False, timeout=GENEROUS)
    assert_unavailable_naming(proc, coordinator.address)
    assert "TLS" in proc.stderr.splitlines()[-1]


def test_a_plaintext_client_at_a_tls_coordinator_fails_naming_the_address(
        start_coordinator, certificate):
    cert, key = certificate
    c = start_coordinator("--tls-cert", str(cert), "--tls-key", str(key))
    address = f"localhost:{c.port}"
    proc = run("status", "--address", address, "--connect-timeout", "2", check=False,
               timeout=GENEROUS)
    assert_unavailable_naming(proc, address)
    assert "--tls-ca" in proc.stderr.splitlines()[-1]
    # With the CA it connects (the coordinator was fine all along).
    ok = run("status", "--address", address, "--tls-ca", str(cert), "--connect-timeout", "20")
    assert "no queues" in ok.stdout


def wait_for_line(stream, needle, timeout):
    """Reads `stream` on a thread until a line contains `needle`; returns
    what was read. Fails after `timeout` s without it."""
    seen = []
    found = threading.Event()

    def read():
        for line in stream:
            seen.append(line)
            if needle in line:
                found.set()
                return

    threading.Thread(target=read, daemon=True).start()
    assert found.wait(timeout), f"no {needle!r} within {timeout} s: {''.join(seen)!r}"
    return "".join(seen)


def test_ctrl_c_ends_a_take_that_waits_for_the_coordinator():
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen([shardq_bin(), "take", "--address", address,
                             "--connect-timeout", "600"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(proc.stderr, "waiting for the coordinator", GENEROUS)
        proc.send_signal(signal.SIGINT)
        # Far less than the 600 s connect timeout.
        assert proc.wait(timeout=GENEROUS) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_worker_that_has_reached_the_coordinator_rides_through_a_longer_outage(tmp_path):
    """The connect timeout bounds only the wait for the first answer: a
    worker that got its item keeps retrying while the coordinator is away
    longer than that timeout, and finishes once it is back."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    state = tmp_path / "state"
    log = open(tmp_path / "serve.log", "ab")
    serve = start_serve(port, state, log)
    gate = tmp_path / "gate"
    files = make_text_files(tmp_path, 1, 3)
    worker = None
    try:
        run("create", "--address", address, "--name", "ride", *files)
        worker = subprocess.Popen(
            [shardq_bin(), "worker", "--address", address, "--name", "ride", "--worker", "w",
             "--connect-timeout", "1", "--",
             "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done"],
            stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + GENEROUS
        while json.loads(run("status", "--address", address, "--name", "ride",
                             "--json").stdout)["queues"][0]["leased"] != 1:
            assert time.monotonic() < deadline, "the worker took no item"
            time.sleep(0.05)
        os.kill(serve.pid, signal.SIGTERM)
        assert serve.wait(timeout=30) == 0
        gate.touch()  # the command ends; the worker's completion finds no coordinator
        time.sleep(2.5)  # away longer than --connect-timeout 1
        assert worker.poll() is None, worker.stderr.read()
        serve = start_serve(port, state, log)
        _, err = worker.communicate(timeout=GENEROUS)
        assert worker.returncode == 0, err
        assert "lost the coordinator at" in err
        status = json.loads(run("status", "--address", address, "--name", "ride",
                                "--json").stdout)["queues"][0]
        assert status["finished"], status
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
            worker.wait()
        if serve.poll() is None:
            os.kill(serve.pid, signal.SIGTERM)
            serve.wait(timeout=10)
        log.close()


# Item 16: argument errors exit 2 (not CLI11's 105/106/109) with words.
@pytest.mark.parametrize("args, message", [
    (["create", "--epochs", "x", "f"], "--epochs: 'x' is not an integer"),
    (["create", "--epochs", "1.5", "f"], "--epochs: '1.5' is not an integer"),
    (["create", "--epochs", "0", "f"], "--epochs: '0' is not a positive integer"),
    (["create", "--seed", "-1", "f"], "--seed: '-1' is not a non-negative integer"),
    (["create", "--lease-timeout", "soon", "f"], "--lease-timeout: 'soon' is not a number"),
    (["create"], "works is required"),
    (["take", "--bogus"], "--bogus"),
    (["take", "--connect-timeout", "x"], "--connect-timeout: 'x' is not a number"),
    (["worker", "--max-failures", "abc", "--", "true"],
     "--max-failures: 'abc' is not an integer"),
    (["status", "--interval", "x"], "--interval: 'x' is not a number"),
    (["status", "--connect-timeout", "0"], "--connect-timeout"),
    (["demo", "--workers", "1"], "--workers"),
    (["serve", "--listen"], "--listen"),
    ([], "subcommand"),
])
def test_argument_errors_exit_2_with_a_message_in_words(args, message):
    proc = run(*args, check=False)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert message in proc.stderr, proc.stderr
    assert "179769" not in proc.stderr  # no 300-digit range
    assert len(proc.stderr) < 400, proc.stderr


def test_help_still_exits_0():
    assert "--connect-timeout" in run("status", "--help").stdout
    assert "--connect-timeout" in run("create", "--help").stdout
    assert run("--help").returncode == 0
