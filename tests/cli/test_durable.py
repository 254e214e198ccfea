"""The durable coordinator: `shardq serve --state-dir` killed and restarted
mid-run loses nothing and repeats no completion; checkpoints of a queue
resume where reading stopped; bad state refuses to start."""
import json
import os
import random
import resource
import signal
import subprocess
import time

from cli_helpers import free_port, make_text_files, run, shardq_bin, start_serve


def start_workers(address, queue, count, command):
    """`count` `shardq worker` processes on `queue`; command(i) is worker
    i's COMMAND ARGS."""
    return [subprocess.Popen([shardq_bin(), "worker", "--address", address, "--name", queue,
                              "--worker", f"w{i}", "--", *command(i)],
                             stderr=subprocess.PIPE, text=True)
            for i in range(count)]


def wait_workers(workers, timeout):
    for w in workers:
        _, err = w.communicate(timeout=timeout)
        assert w.returncode == 0, err


def queue_status(address, queue):
    return json.loads(run("status", "--address", address, "--name", queue,
                          "--json").stdout)["queues"][0]


def stop_all(workers, serve, log):
    """Kills what is still running (a failed test) and stops the server."""
    for w in workers:
        if w.poll() is None:
            w.kill()
            w.wait()
    if serve.poll() is None:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=10)
    log.close()


def test_coordinator_killed_three_times_loses_nothing_and_repeats_no_completion(tmp_path):
    port = free_port()
    address = f"127.0.0.1:{port}"
    state = tmp_path / "state"
    log = open(tmp_path / "serve.log", "ab")
    serve = start_serve(port, state, log)
    workers = []
    try:
        files = make_text_files(tmp_path, 10, 100)
        run("create", "--address", address, "--name", "crash", "--epochs", "2",
            "--slices", "200", "--lease-timeout", "3", *files)
        outputs = tmp_path / "out"
        outputs.mkdir()
        workers = start_workers(address, "crash", 8, lambda i: [
            "sh", "-c", f'sleep 0.05; echo "$SHARDQ_EPOCH {{}}" >> {outputs}/w{i}'])
        rng = random.Random(7)
        for _ in range(3):
            time.sleep(rng.uniform(0.3, 1.0))
            # Mid-run: the workers are still at it.
            assert any(w.poll() is None for w in workers)
            os.kill(serve.pid, signal.SIGKILL)
            serve.wait()
            time.sleep(rng.uniform(0.1, 0.6))
            serve = start_serve(port, state, log)
        wait_workers(workers, 240)
        status = queue_status(address, "crash")
        assert status["completed"] == 400
        assert [e["completed"] for e in status["per_epoch"]] == [200, 200]
        assert status["pending"] == 0 and status["leased"] == 0 and status["finished"]
        assert sum(w["completed"] for w in status["workers"]) == 400
        # A duplicate needs a lease in flight at a crash: at most one per
        # worker (num_clients=1) per crash.
        assert status["duplicates"] <= 8 * 3
        done = set()
        for f in outputs.iterdir():
            done.update(tuple(line.split(" ", 1)) for line in f.read_text().splitlines())
        # At least once: every (epoch, slice) was run to the end.
        assert len(done) == 400
    finally:
        stop_all(workers, serve, log)


def test_a_full_disk_stops_the_coordinator_and_the_run_finishes_after_a_restart(tmp_path):
    """The disk fills up mid-run (RLIMIT_FSIZE on the server: a write past
    the limit fails with EFBIG). The coordinator refuses the change it could
    not store, stops with a clear error, and, restarted with room, continues:
    the workers retry through the gap and every slice is completed once."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    state = tmp_path / "state"
    log_path = tmp_path / "serve.log"
    log = open(log_path, "ab")
    limit = 256 * 1024  # a few dozen commits past the queue's creation

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    serve = start_serve(port, state, log, preexec_fn=small_disk)
    workers = []
    try:
        files = make_text_files(tmp_path, 4, 50)
        run("create", "--address", address, "--name", "full", "--slices", "100", *files)
        outputs = tmp_path / "out"
        outputs.mkdir()
        workers = start_workers(address, "full", 2,
                                lambda i: ["sh", "-c", f'echo "{{}}" >> {outputs}/w{i}'])
        # The journal outgrows the limit long before 100 slices are done.
        assert serve.wait(timeout=60) == 1
        log.flush()
        text = log_path.read_text()
        assert "cannot store state" in text and str(state) in text, text
        assert "stopping" in text, text
        assert any(w.poll() is None for w in workers)  # retrying, not crashed
        serve = start_serve(port, state, log)
        wait_workers(workers, 120)
        status = queue_status(address, "full")
        assert status["completed"] == 100 and status["finished"]
        assert status["pending"] == 0 and status["leased"] == 0
        done = set()
        for f in outputs.iterdir():
            done.update(f.read_text().splitlines())
        assert len(done) == 100  # every slice was run to the end
    finally:
        stop_all(workers, serve, log)


def test_workers_in_tight_loops_ride_through_graceful_restarts(tmp_path):
    """SIGTERM stops `shardq serve` cleanly; gRPC cancels the calls it has
    not answered, and a worker takes that (CANCELLED) like a coordinator
    that is away: it retries until the restarted one answers."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    state = tmp_path / "state"
    log = open(tmp_path / "serve.log", "ab")
    serve = start_serve(port, state, log)
    workers = []
    try:
        files = make_text_files(tmp_path, 4, 50)
        run("create", "--address", address, "--name", "term", "--slices", "2000", *files)
        workers = start_workers(address, "term", 4, lambda i: ["true"])
        for _ in range(2):
            time.sleep(0.3)
            assert any(w.poll() is None for w in workers)  # mid-run
            os.kill(serve.pid, signal.SIGTERM)
            assert serve.wait(timeout=30) == 0
            serve = start_serve(port, state, log)
        wait_workers(workers, 120)
        status = queue_status(address, "term")
        assert status["completed"] == 2000 and status["finished"]
    finally:
        stop_all(workers, serve, log)


def test_clean_restart_keeps_queues(tmp_path):
    port = free_port()
    address = f"127.0.0.1:{port}"
    state = tmp_path / "state"
    log = open(tmp_path / "serve.log", "ab")
    serve = start_serve(port, state, log)
    files = make_text_files(tmp_path, 2, 10)
    created = run("create", "--address", address, "--name", "keep", "--slices", "4", *files)
    seed = created.stdout.split("seed=")[1].split()[0]
    item = run("take", "--address", address, "--name", "keep", "--worker", "w").stdout.strip()
    os.kill(serve.pid, signal.SIGTERM)
    serve.wait(timeout=10)
    serve = start_serve(port, state, log)
    try:
        status = queue_status(address, "keep")
        log.flush()
        started = (tmp_path / "serve.log").read_text()
        # The restart says what it recovered (the clean stop snapshotted).
        assert f"state dir {state}: recovered 1 queue(s) in " in started, started
        assert "(0 update(s) replayed after their snapshots)" in started, started
        assert str(status["seed"]) == seed
        assert status["leased"] == 1 and status["pending"] == 3
        assert item
    finally:
        os.kill(serve.pid, signal.SIGTERM)
        serve.wait(timeout=10)
        log.close()


def test_truncated_state_dir_refuses_to_start(tmp_path):
    port = free_port()
    state = tmp_path / "state"
    log = open(tmp_path / "serve.log", "ab")
    serve = start_serve(port, state, log)
    files = make_text_files(tmp_path, 2, 10)
    run("create", "--address", f"127.0.0.1:{port}", "--name", "t", "--slices", "50", *files)
    os.kill(serve.pid, signal.SIGTERM)
    serve.wait(timeout=10)
    log.close()
    db = state / "state.db"
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    proc = subprocess.run([shardq_bin(), "serve", "--listen", "127.0.0.1:0",
                           "--state-dir", str(state)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode != 0
    assert str(state) in proc.stderr
    assert "DATA_LOSS" in proc.stderr or "INTERNAL" in proc.stderr


def test_corrupt_state_dir_refuses_to_start(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "state.db").write_bytes(b"not a database" * 1000)
    proc = subprocess.run([shardq_bin(), "serve", "--listen", "127.0.0.1:0",
                           "--state-dir", str(state)], capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode != 0
    assert "DATA_LOSS" in proc.stderr and str(state) in proc.stderr


def test_snapshot_and_restore_resume_the_queue(coordinator, tmp_path):
    files = make_text_files(tmp_path, 3, 20)
    run("create", "--address", coordinator.address, "--name", "ck", "--epochs", "2",
        "--slices", "6", "--seed", "4", *files)
    taken = []
    for i in range(3):
        taken.append(run("take", "--address", coordinator.address, "--name", "ck",
                         "--worker", f"t{i}").stdout.strip())
    ck = tmp_path / "queue.ckpt"
    out = run("snapshot", "--address", coordinator.address, "--name", "ck", "--out", str(ck))
    assert "residual=3" in out.stdout
    restored = run("restore", "--address", coordinator.address, "--name", "ck2",
                   "--in", str(ck))
    assert "queue=ck2" in restored.stdout and "seed=4" in restored.stdout
    # The held items come first in the restored queue.
    first = [run("take", "--address", coordinator.address, "--name", "ck2",
                 "--worker", f"r{i}").stdout.strip() for i in range(3)]
    assert sorted(first) == sorted(taken)
    again = run("restore", "--address", coordinator.address, "--name", "ck2", "--in", str(ck),
                check=False)
    assert again.returncode != 0 and "already exists" in again.stderr
    bad = tmp_path / "bad.ckpt"
    bad.write_text("hello")
    proc = run("restore", "--address", coordinator.address, "--in", str(bad), check=False)
    assert proc.returncode != 0 and "not a shardq checkpoint" in proc.stderr
    # A checkpoint cut short (a full disk, a copy interrupted) is refused,
    # never restored as a queue with fewer completions.
    whole = ck.read_bytes()
    for keep in (len(whole) // 2, len(whole) - 1):
        bad.write_bytes(whole[:keep])
        proc = run("restore", "--address", coordinator.address, "--name", f"cut{keep}",
                   "--in", str(bad), check=False)
        assert proc.returncode != 0 and "DATA_LOSS" in proc.stderr, proc.stderr
        assert "truncated" in proc.stderr, proc.stderr
