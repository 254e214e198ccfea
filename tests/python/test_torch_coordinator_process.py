"""The coordinator shardq.torch starts as a child process (a WorkQueueDataset
with no coordinator to connect to) goes away with the process that started
it, even when that process is killed with SIGKILL: no orphan keeps the
socket or port."""
import os
import signal
import subprocess
import sys
import textwrap
import time

BOUND = 60

PARENT = textwrap.dedent("""
    import sys
    import shardq.torch
    dataset = shardq.torch.WorkQueueDataset([sys.argv[1]], reader="text")
    print(dataset._local._proc.pid, flush=True)
    sys.stdin.read()  # until the test kills this process
""")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for this purpose (its parent was killed; init reaps it).
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_the_child_coordinator_exits_when_its_parent_is_killed(tmp_path):
    data = tmp_path / "lines.txt"
    data.write_text("a\nb\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("SHARDQ_ADDRESS", "SHARDQ_PORT", "TF_CONFIG", "MASTER_ADDR", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(data)], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    coordinator = None
    try:
        coordinator = int(parent.stdout.readline())
        assert alive(coordinator)
        parent.kill()
        parent.wait(timeout=BOUND)
        deadline = time.monotonic() + BOUND
        while alive(coordinator) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(coordinator), "the coordinator outlived the process that started it"
    finally:
        if parent.poll() is None:
            parent.kill()
        if coordinator is not None and alive(coordinator):
            os.kill(coordinator, signal.SIGKILL)


EXITS = textwrap.dedent("""
    import sys
    import shardq.torch
    dataset = shardq.torch.WorkQueueDataset([sys.argv[1]], reader="text")
    print(dataset._local.address, flush=True)
    print(sorted(row for batch in dataset for row in batch), flush=True)
""")


def test_the_child_coordinators_socket_directory_goes_when_its_parent_exits(tmp_path):
    data = tmp_path / "lines.txt"
    data.write_text("a\nb\n")
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("SHARDQ_ADDRESS", "SHARDQ_PORT", "TF_CONFIG", "MASTER_ADDR", "WORLD_SIZE")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env["TMPDIR"] = str(temp)  # where tempfile makes the socket's directory
    done = subprocess.run([sys.executable, "-c", EXITS, str(data)], env=env,
                          capture_output=True, text=True, timeout=BOUND)
    assert done.returncode == 0, done.stderr
    address, rows = done.stdout.splitlines()
    assert address.startswith("unix:" + str(temp) + os.sep), address
    assert rows == "[b'a', b'b']"
    assert list(temp.iterdir()) == [], "the socket's directory was left behind"
