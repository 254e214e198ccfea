"""Accounting across processes (issue 15): a poison item is set aside as
failed after --max-attempts failed attempts and the worker exits 4; queue
limits are INVALID_ARGUMENT; a queue of 100,000,000 epochs stays small."""
import json
import signal
import subprocess
import time

from cli_helpers import make_text_files, run, shardq_bin


def status_json(address, name):
    out = run("status", "--address", address, "--name", name, "--json").stdout
    queues = json.loads(out)["queues"]
    assert len(queues) == 1
    return queues[0], out


def test_a_poison_item_is_set_aside_after_three_attempts_and_the_worker_exits_4(
        coordinator, tmp_path):
    files = make_text_files(tmp_path, 6, 10)
    run("create", "--address", coordinator.address, "--name", "poison", *files)
    done = tmp_path / "done.txt"
    # Fails on part-3 only; every other item is recorded once it is done.
    command = ('case "$SHARDQ_ITEM" in *part-3.txt) echo bad >&2; exit 7;; esac; '
               f'echo "$SHARDQ_ITEM" >> {done}')
    workers = [subprocess.Popen(
        [shardq_bin(), "worker", "--address", coordinator.address, "--name", "poison",
         "--worker", f"w{i}", "--max-failures", "10", "--", "sh", "-c", command],
        stderr=subprocess.PIPE, text=True) for i in range(2)]
    for w in workers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 4, err
        assert "finished with 1 failed item" in err

    lines = done.read_text().split()
    assert sorted(lines) == sorted(f for f in files if not f.endswith("part-3.txt"))

    status, _ = status_json(coordinator.address, "poison")
    assert status["finished"] is True
    assert status["finished_with_failures"] is True
    assert status["failed"] == 1
    assert status["completed"] == 5
    assert status["pending"] == 0 and status["leased"] == 0
    assert status["max_attempts"] == 3
    assert status["per_epoch"][0]["failed"] == 1
    [failed] = status["failed_items"]
    assert failed["item"].endswith("part-3.txt")
    assert failed["epoch"] == 0
    assert failed["attempts"] == 3
    assert "exited 7" in failed["reason"]

    text = run("status", "--address", coordinator.address, "--name", "poison",
               "--failed").stdout
    assert "finished with 1 failed item" in text
    assert "part-3.txt" in text and "attempts 3" in text and "exited 7" in text
    # End of input for everyone else too.
    assert run("take", "--address", coordinator.address, "--name", "poison",
               check=False).returncode == 3


def test_max_attempts_is_journaled_with_the_queue(start_coordinator, tmp_path):
    state = tmp_path / "state"
    files = make_text_files(tmp_path, 2, 5)
    c = start_coordinator("--state-dir", str(state))
    run("create", "--address", c.address, "--name", "m", "--max-attempts", "1", *files)
    worker = run("worker", "--address", c.address, "--name", "m", "--", "false", check=False)
    assert worker.returncode == 4, worker.stderr
    c.stop()
    c = start_coordinator("--state-dir", str(state))
    status, _ = status_json(c.address, "m")
    assert status["max_attempts"] == 1
    assert status["failed"] == 2 and status["finished"] is True


def test_epochs_beyond_the_limit_are_invalid_argument_naming_the_limit(coordinator, tmp_path):
    files = make_text_files(tmp_path, 2, 5)
    out = run("create", "--address", coordinator.address, "--name", "huge",
              "--epochs", "1000000000", *files, check=False)
    assert out.returncode != 0, out.stderr
    assert "INVALID_ARGUMENT" in out.stderr
    assert "num_epochs" in out.stderr and "100000000" in out.stderr


def test_a_hundred_million_epochs_keep_the_coordinator_and_its_status_small(
        coordinator, tmp_path):
    files = make_text_files(tmp_path, 3, 5)
    run("create", "--address", coordinator.address, "--name", "long",
        "--epochs", "100000000", "--no-shuffle", *files)
    # Four workers each take one item (held until their lease expires).
    for i in range(4):
        taken = run("take", "--address", coordinator.address, "--name", "long",
                    "--worker", f"t{i}")
        assert taken.stdout.strip() in files
    status, raw = status_json(coordinator.address, "long")
    assert status["epochs"] == 100_000_000
    assert status["leased"] == 4
    assert status["pending"] + status["leased"] + status["completed"] == 300_000_000
    assert len(status["per_epoch"]) <= 3
    assert {e["epoch"] for e in status["per_epoch"]} <= {0, 1}
    assert len(raw) < 10_000, f"status --json is {len(raw)} bytes"
    with open(f"/proc/{coordinator.proc.pid}/status") as f:
        rss_kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    assert rss_kb < 512 * 1024, f"coordinator holds {rss_kb} kB"


def test_a_stopped_worker_releases_its_item_without_counting_a_failed_attempt(
        coordinator, tmp_path):
    files = make_text_files(tmp_path, 1, 10)
    run("create", "--address", coordinator.address, "--name", "stopped", "--max-attempts", "1",
        *files)
    started = tmp_path / "started"
    # The command says it started, then runs until the worker passes on SIGTERM.
    command = f'touch {started}; exec sleep 600'
    worker = subprocess.Popen(
        [shardq_bin(), "worker", "--address", coordinator.address, "--name", "stopped",
         "--worker", "w0", "--", "sh", "-c", command],
        stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started.exists():
        assert worker.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 128 + signal.SIGTERM, err

    # With --max-attempts 1 a counted attempt would have set the item aside.
    status, _ = status_json(coordinator.address, "stopped")
    assert status["failed"] == 0 and status["finished"] is False
    assert status["pending"] == 1 and status["leased"] == 0
