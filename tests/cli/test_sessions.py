"""Workers over sessions (issue 17): `shardq worker --take-ahead` and
`shardq take --take-ahead` against a real `shardq serve`."""
import subprocess

from cli_helpers import make_text_files, run, shardq_bin
from test_accounting import status_json


def test_workers_with_take_ahead_read_every_record_exactly_once(coordinator, tmp_path):
    files = make_text_files(tmp_path, 4, 300)
    run("create", "--address", coordinator.address, "--name", "ahead", "--slices", "40",
        "--num-clients", "3", *files)
    outputs = [tmp_path / f"out-{i}.txt" for i in range(3)]
    workers = [subprocess.Popen(
        [shardq_bin(), "worker", "--address", coordinator.address, "--name", "ahead",
         "--worker", f"w{i}", "--take-ahead", "2", "--",
         "sh", "-c", f'"$0" cat "$SHARDQ_ITEM" >> {out}', shardq_bin()],
        stderr=subprocess.PIPE, text=True) for i, out in enumerate(outputs)]
    for w in workers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err

    lines = [line for out in outputs if out.exists() for line in out.read_text().splitlines()]
    expected = [f"file {i} line {j}" for i in range(4) for j in range(300)]
    assert sorted(lines) == sorted(expected)

    status, _ = status_json(coordinator.address, "ahead")
    assert status["finished"] is True
    assert status["completed"] == 40
    assert status["duplicates"] == 0
    assert status["leased"] == 0


def test_take_with_take_ahead_prints_the_item_and_those_taken_ahead(coordinator, tmp_path):
    files = make_text_files(tmp_path, 5, 2)
    run("create", "--address", coordinator.address, "--name", "takes", "--num-clients", "3",
        *files)
    one = run("take", "--address", coordinator.address, "--name", "takes", "--worker", "a")
    assert len(one.stdout.splitlines()) == 1
    three = run("take", "--address", coordinator.address, "--name", "takes", "--worker", "b",
                "--take-ahead", "2")
    taken = three.stdout.splitlines()
    assert len(taken) == 3 and len(set(taken)) == 3
    assert one.stdout.strip() not in taken
    status, _ = status_json(coordinator.address, "takes")
    assert status["leased"] == 4
