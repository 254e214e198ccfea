"""The coordinator across processes: `shardq serve` with `create`, `take`,
`worker` and `status`, worker failure, config checks, token and TLS."""
import json
import os
import signal
import subprocess
import time

import pytest

from cli_helpers import make_text_files, run, shardq_bin


def status_json(address, name, *extra):
    out = run("status", "--address", address, "--name", name, "--json", *extra).stdout
    queues = json.loads(out)["queues"]
    assert len(queues) == 1
    return queues[0]


def test_killed_worker_item_is_rerun_and_every_item_completes_once(coordinator, tmp_path):
    files = make_text_files(tmp_path, 8, 200)
    created = run("create", "--address", coordinator.address, "--name", "q",
                  "--epochs", "2", "--slices", "40", "--lease-timeout", "2", *files)
    assert "items=40" in created.stdout and "epochs=2" in created.stdout
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    # Each command writes its output only when it finishes, so a killed run
    # leaves nothing behind.
    finish = f'sleep 0.05; echo "$SHARDQ_EPOCH {{}}" >> {outputs}/$0'
    victim_started = tmp_path / "victim-started"
    victim = subprocess.Popen(
        [shardq_bin(), "worker", "--address", coordinator.address, "--name", "q",
         "--worker", "victim", "--", "sh", "-c",
         f'touch {victim_started}; sleep 60; echo "$SHARDQ_EPOCH {{}}" >> {outputs}/$0',
         "victim"],
        start_new_session=True, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not victim_started.exists():
        assert time.monotonic() < deadline, "victim never started an item"
        time.sleep(0.01)
    survivors = [
        subprocess.Popen([shardq_bin(), "worker", "--address", coordinator.address,
                          "--name", "q", "--worker", f"w{i}", "--", "sh", "-c", finish,
                          f"w{i}"], stderr=subprocess.PIPE, text=True)
        for i in range(3)]
    time.sleep(0.3)
    # SIGKILL the victim and its command in the middle of its item.
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    for w in survivors:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
        assert "end of input" in err

    status = status_json(coordinator.address, "q")
    assert status["completed"] == 80
    assert status["pending"] == 0 and status["leased"] == 0
    assert [e["completed"] for e in status["per_epoch"]] == [40, 40]
    assert status["duplicates"] == 0
    assert status["expired"] >= 1  # the victim's lease
    assert status["finished"] is True
    by_worker = {w["worker"]: w for w in status["workers"]}
    assert by_worker["victim"]["completed"] == 0
    assert all(w["sessions"] == 0 for w in status["workers"])  # every worker is gone
    assert sum(w["completed"] for w in status["workers"]) == 80

    lines = []
    for f in outputs.iterdir():
        lines += f.read_text().split("\n")[:-1]
    done = [tuple(line.split(" ", 1)) for line in lines]
    assert len(done) == 80 and len(set(done)) == 80
    assert {e for e, _ in done} == {"0", "1"}
    assert len({item for _, item in done}) == 40

    # At end of input `take` exits 3.
    assert run("take", "--address", coordinator.address, "--name", "q",
               check=False).returncode == 3


def test_attach_with_same_config_works_and_different_config_names_fields(coordinator, tmp_path):
    files = make_text_files(tmp_path, 3, 50)
    first = run("create", "--address", coordinator.address, "--name", "a",
                "--slices", "9", "--seed", "5", *files)
    assert "created" in first.stdout and "seed=5" in first.stdout
    again = run("create", "--address", coordinator.address, "--name", "a",
                "--slices", "9", "--seed", "5", *files)
    assert "attached" in again.stdout
    other = run("create", "--address", coordinator.address, "--name", "a",
                "--slices", "9", "--seed", "6", "--epochs", "2", *files, check=False)
    assert other.returncode != 0
    assert "FAILED_PRECONDITION" in other.stderr
    assert "num_epochs" in other.stderr and "seed" in other.stderr
    # Many queues per coordinator.
    run("create", "--address", coordinator.address, "--name", "b", *files)
    out = json.loads(run("status", "--address", coordinator.address, "--json").stdout)
    assert [q["name"] for q in out["queues"]] == ["a", "b"]


def test_take_prints_an_item_and_unseeded_queue_reports_its_seed(coordinator, tmp_path):
    files = make_text_files(tmp_path, 2, 10)
    created = run("create", "--address", coordinator.address, "--name", "t", *files)
    seed = int(created.stdout.split("seed=")[1].split()[0])
    assert status_json(coordinator.address, "t")["seed"] == seed
    item = run("take", "--address", coordinator.address, "--name", "t").stdout.strip()
    assert item in files


def test_create_takes_split_flags_and_status_reports_splits(coordinator, tmp_path):
    files = make_text_files(tmp_path, 2, 10)
    off = run("create", "--address", coordinator.address, "--name", "nosplit", "--no-split",
              *files)
    assert "created" in off.stdout
    on = run("create", "--address", coordinator.address, "--name", "split",
             "--split-min-residual", "64", *files)
    assert "created" in on.stdout
    for name in ("nosplit", "split"):
        status = status_json(coordinator.address, name)
        assert type(status["splits"]) is int and status["splits"] == 0
        assert type(status["split_items_open"]) is int and status["split_items_open"] == 0
    text = run("status", "--address", coordinator.address, "--name", "split").stdout
    assert "splits 0 (0 open)" in text
    bad = run("create", "--address", coordinator.address, "--name", "bad",
              "--split-min-residual", "0", *files, check=False)
    assert bad.returncode != 0 and "--split-min-residual" in bad.stderr
    both = run("create", "--address", coordinator.address, "--name", "bad", "--no-split",
               "--split-min-residual", "8", *files, check=False)
    assert both.returncode != 0 and "excludes" in both.stderr


def test_missing_work_and_unknown_queue_are_clear_errors(coordinator, tmp_path):
    missing = str(tmp_path / "nope.txt")
    proc = run("create", "--address", coordinator.address, "--name", "m", missing, check=False)
    assert proc.returncode != 0 and "NOT_FOUND" in proc.stderr and missing in proc.stderr
    proc = run("take", "--address", coordinator.address, "--name", "ghost", check=False)
    assert proc.returncode not in (0, 3) and "ghost" in proc.stderr


def test_token_is_required_when_configured(start_coordinator, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    c = start_coordinator("--token-file", str(token))
    files = make_text_files(tmp_path, 1, 5)
    no_token = run("create", "--address", c.address, "--name", "q", *files, check=False)
    assert no_token.returncode != 0 and "UNAUTHENTICATED" in no_token.stderr
    wrong = tmp_path / "wrong"
    wrong.write_text("guess")
    bad = run("create", "--address", c.address, "--name", "q", "--token-file", str(wrong),
              *files, check=False)
    assert bad.returncode != 0 and "UNAUTHENTICATED" in bad.stderr
    ok = run("create", "--address", c.address, "--name", "q", "--token-file", str(token), *files)
    assert "created" in ok.stdout
    env = dict(os.environ, SHARDQ_TOKEN="s3cret-token")
    assert run("take", "--address", c.address, "--name", "q", env=env).stdout.strip() == files[0]


def test_tls_round_trip_with_a_self_signed_certificate(start_coordinator, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True)
    c = start_coordinator("--tls-cert", str(cert), "--tls-key", str(key))
    files = make_text_files(tmp_path, 2, 5)
    ok = run("create", "--address", f"localhost:{c.port}", "--name", "q",
             "--tls-ca", str(cert), *files)
    assert "created" in ok.stdout
    item = run("take", "--address", f"localhost:{c.port}", "--name", "q",
               "--tls-ca", str(cert)).stdout.strip()
    assert item in files
    # A plaintext client cannot talk to the TLS coordinator (it keeps
    # retrying UNAVAILABLE, so give it a short budget via timeout).
    with pytest.raises(subprocess.TimeoutExpired):
        run("status", "--address", f"localhost:{c.port}", timeout=3)


def test_worker_reports_failed_attempts_and_gives_up_after_max_failures(coordinator, tmp_path):
    files = make_text_files(tmp_path, 1, 5)
    run("create", "--address", coordinator.address, "--name", "f", *files)
    proc = run("worker", "--address", coordinator.address, "--name", "f", "--worker", "bad",
               "--max-failures", "2", "--", "false", check=False)
    assert proc.returncode == 1 and "giving up" in proc.stderr
    status = status_json(coordinator.address, "f")
    # Two failed attempts of three (--max-attempts): pending again, not failed.
    assert status["released"] == 0 and status["pending"] == 1 and status["leased"] == 0
    assert status["failed"] == 0 and status["finished"] is False
    ok = run("worker", "--address", coordinator.address, "--name", "f", "--", "true")
    assert status_json(coordinator.address, "f")["completed"] == 1
    assert ok.returncode == 0


def test_worker_does_not_run_a_slice_of_a_file_that_grew_since_planning(coordinator, tmp_path):
    # The command would read the planned range and miss the appended lines:
    # each attempt fails naming the file, and the item ends set aside as
    # failed (shown), not completed.
    (path,) = make_text_files(tmp_path, 1, 20)
    run("create", "--address", coordinator.address, "--name", "grown", "--slices", "2",
        "--no-shuffle", path)
    seen = tmp_path / "seen.txt"
    run("worker", "--address", coordinator.address, "--name", "grown", "--worker", "w0",
        "--max-failures", "1", "--", "sh", "-c", f'echo "$SHARDQ_ITEM" >> {seen}; exit 1',
        check=False)
    assert len(seen.read_text().split()) == 1  # the command runs while the file is as planned
    with open(path, "a") as f:
        f.write("appended\n")
    proc = run("worker", "--address", coordinator.address, "--name", "grown", "--worker", "w1",
               "--max-failures", "10", "--", "sh", "-c", f'echo "$SHARDQ_ITEM" >> {seen}', check=False)
    assert proc.returncode == 4, proc.stderr
    assert f"'{path}' changed since the plan was made: size now" in proc.stderr
    assert len(seen.read_text().split()) == 1  # never run on the grown file
    status = status_json(coordinator.address, "grown")
    assert status["completed"] == 0 and status["failed"] == 2
    assert all("changed since the plan was made" in f["reason"]
               for f in status["failed_items"])


def test_status_watch_draws_progress_until_finished(coordinator, tmp_path):
    files = make_text_files(tmp_path, 2, 5)
    run("create", "--address", coordinator.address, "--name", "watch", "--epochs", "2", *files)
    watcher = subprocess.Popen([shardq_bin(), "status", "--address", coordinator.address,
                                "--name", "watch", "--watch", "--interval", "0.1"],
                               stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    assert watcher.poll() is None  # still watching: the queue is not finished
    run("worker", "--address", coordinator.address, "--name", "watch", "--worker", "w",
        "--", "true")
    out, _ = watcher.communicate(timeout=20)
    assert watcher.returncode == 0
    assert "epoch 0 [" in out and "#" * 30 in out and "finished" in out
