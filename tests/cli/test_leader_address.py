"""Clients find the leader (issue 18): every `shardq` client verb, and
Python's WorkQueue, take `etcd://HOST:PORT[,...]/JOB` (the leader the
election key names) and `H1:P1,H2:P2` (the one of the list that leads).
The election key is written by hand, as the election writes it."""
import base64
import json
import os
import pathlib
import subprocess
import sys
import urllib.request

from cli_helpers import REPO, free_port, make_text_files, run


def _field(tag, data):
    return bytes([tag << 3 | 2, len(data)]) + data


def point_leader_at(etcd, job, advertise):
    """Puts the election key of `job`: a LeaderInfo (proto/etcd/etcd_store.proto,
    advertise = 1, host = 2) naming `advertise`, through etcd's JSON gateway."""
    value = _field(1, advertise.encode()) + _field(2, b"test-host")
    body = json.dumps({"key": base64.b64encode(f"/shardq/{job}/leader".encode()).decode(),
                       "value": base64.b64encode(value).decode()}).encode()
    endpoint = etcd.endpoints.split(",")[0]
    request = urllib.request.Request(f"http://{endpoint}/v3/kv/put", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        assert r.status == 200


def test_take_and_status_follow_the_leader_etcd_names(coordinator, etcd_single, tmp_path):
    files = make_text_files(tmp_path, 3, 5)
    run("create", "--address", coordinator.address, "--name", "q", "--no-shuffle", *files)
    point_leader_at(etcd_single, "train", coordinator.address)
    address = f"etcd://{etcd_single.endpoints}/train"
    taken = run("take", "--address", address, "--name", "q", "--connect-timeout", "30")
    assert taken.stdout.strip().startswith(files[0])
    status = run("status", "--address", address, "--name", "q", "--json")
    assert json.loads(status.stdout)
    # SHARDQ_ADDRESS may name it too.
    env = dict(os.environ, SHARDQ_ADDRESS=address)
    taken = run("take", "--name", "q", "--connect-timeout", "30", env=env)
    assert taken.stdout.strip().startswith(files[1])


def test_etcd_address_without_a_leader_fails_naming_the_job(etcd_single):
    proc = run("take", "--address", f"etcd://{etcd_single.endpoints}/nobody", "--name", "q",
               "--connect-timeout", "1", check=False)
    assert proc.returncode == 1, proc.stderr
    assert "UNAVAILABLE" in proc.stderr
    assert "nobody leads job 'nobody' yet" in proc.stderr
    assert etcd_single.endpoints in proc.stderr


def test_a_list_whose_first_coordinator_is_down_works(coordinator, tmp_path):
    files = make_text_files(tmp_path, 2, 5)
    run("create", "--address", coordinator.address, "--name", "q", "--no-shuffle", *files)
    address = f"127.0.0.1:{free_port()},{coordinator.address}"
    taken = run("take", "--address", address, "--name", "q", "--connect-timeout", "30")
    assert taken.stdout.strip().startswith(files[0])


def test_malformed_addresses_are_refused_naming_the_bad_part():
    for address, part in [("etcd://127.0.0.1:2379/", "empty job"),
                          ("etcd://127.0.0.1:2379/a/b", "contains a '/'"),
                          ("etcd:///train", "no etcd endpoint"),
                          ("127.0.0.1:1,127.0.0.1:x", "'127.0.0.1:x'"),
                          ("127.0.0.1:1,,127.0.0.1:2", "entry is empty")]:
        proc = run("take", "--address", address, "--name", "q", check=False)
        assert proc.returncode == 2, (address, proc.stderr)
        assert "INVALID_ARGUMENT" in proc.stderr and part in proc.stderr, (address, proc.stderr)


def test_python_work_queue_takes_an_etcd_address(coordinator, etcd_single, tmp_path):
    package = pathlib.Path(os.environ.get("SHARDQ_PYTHONPATH", REPO / "build" / "python"))
    files = make_text_files(tmp_path, 2, 5)
    point_leader_at(etcd_single, "train", coordinator.address)
    script = (
        "import sys, shardq\n"
        "q = shardq.WorkQueue(sys.argv[2:], name='q', shuffle=False, address=sys.argv[1])\n"
        "item = q.take()\n"
        "print(item)\n")
    proc = subprocess.run(
        [sys.executable, "-c", script, f"etcd://{etcd_single.endpoints}/train", *files],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, PYTHONPATH=str(package)))
    assert proc.returncode == 0, proc.stderr
    assert files[0] in proc.stdout
