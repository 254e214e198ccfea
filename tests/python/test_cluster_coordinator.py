"""Nothing to start in a cluster: with TF_CONFIG (no "shardq" job) or a
torchrun environment and no address, one task serves the queue from its own
process on SHARDQ_PORT and the others connect to it. Three processes given a
TF_CONFIG, and two ranks of a torchrun-style environment, read every line
once between them; state_dir= makes the serving task's coordinator durable."""
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap

BOUND = 120

CHILD = textwrap.dedent("""
    import json, os, pathlib, sys, time
    import shardq, shardq.cluster
    out, files = pathlib.Path(sys.argv[1]), sys.argv[2:]
    queue = shardq.WorkQueue(files, num_epochs=1, num_slices=12, name="cluster",
                             state_dir=os.environ.get("STATE_DIR"))
    reader = shardq.TextLineReader()
    lines = []
    while True:
        try:
            _, values = reader.read_up_to(queue, 7)
        except shardq.OutOfRangeError:
            break
        lines += [v.decode() for v in values]
    queue.close()
    out.write_text(json.dumps({"lines": lines, "served": shardq.cluster.serving()}))
    # The serving task stays up until every other task has its answer.
    deadline = time.monotonic() + 100
    for other in filter(None, os.environ.get("WAIT_FOR", "").split(",")):
        while not pathlib.Path(other).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
""")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("SHARDQ_ADDRESS", "SHARDQ_PORT", "TF_CONFIG", "MASTER_ADDR", "RANK",
                        "WORLD_SIZE", "SHARDQ_EMBEDDED")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env.update(extra)
    return env


def make_files(tmp_path):
    files = []
    for i in range(3):
        p = tmp_path / f"part-{i}.txt"
        p.write_text("".join(f"{i}-{j}\n" for j in range(100)))
        files.append(str(p))
    return files


def run_tasks(tmp_path, envs, server_index, child=CHILD):
    """Starts one child per env (the serving one last, so the others wait
    for it to come up); returns each child's result."""
    files = make_files(tmp_path)
    outs = [tmp_path / f"out-{i}.json" for i in range(len(envs))]
    others = ",".join(str(o) for i, o in enumerate(outs) if i != server_index)
    envs[server_index]["WAIT_FOR"] = others
    order = [i for i in range(len(envs)) if i != server_index] + [server_index]
    children = {i: subprocess.Popen([sys.executable, "-c", child, str(outs[i]), *files],
                                    env=envs[i], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, start_new_session=True)
                for i in order}
    try:
        for i, child in children.items():
            _, err = child.communicate(timeout=BOUND)
            assert child.returncode == 0, f"task {i}: {err}"
    finally:  # a failed task leaves the others waiting: stop them (and their workers)
        for child in children.values():
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
    results = [json.loads(o.read_text()) for o in outs]
    every_line = sorted(line for r in results for line in r["lines"])
    assert every_line == sorted(f"{i}-{j}" for i in range(3) for j in range(100))
    return results


def test_a_tf_config_cluster_of_three_tasks_is_served_by_the_chief(tmp_path):
    port = free_port()
    cluster = {"chief": ["127.0.0.1:2222"], "worker": ["127.0.0.1:2223", "127.0.0.1:2224"]}
    tasks = [("chief", 0), ("worker", 0), ("worker", 1)]
    envs = [clean_env(SHARDQ_PORT=str(port), TF_CONFIG=json.dumps(
        {"cluster": cluster, "task": {"type": t, "index": i}})) for t, i in tasks]
    results = run_tasks(tmp_path, envs, server_index=0)
    assert [r["served"] for r in results] == [port, None, None]


def test_two_torchrun_ranks_are_served_by_rank_zero_and_state_dir_makes_it_durable(tmp_path):
    port = free_port()
    state = tmp_path / "state"
    envs = [clean_env(WORLD_SIZE="2", RANK=str(r), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT="29500", SHARDQ_PORT=str(port), STATE_DIR=str(state))
            for r in range(2)]
    results = run_tasks(tmp_path, envs, server_index=0)
    assert [r["served"] for r in results] == [port, None]
    assert any(state.iterdir()), "the serving rank's state_dir holds its journal"


def test_a_task_whose_port_is_already_served_connects_to_it(tmp_path):
    # `shardq serve` started by the job on MASTER_ADDR:SHARDQ_PORT, as before.
    port_file = tmp_path / "port"
    serve = subprocess.Popen([os.path.join(os.environ.get("SHARDQ_BIN", "build/bin"), "shardq"),
                              "serve", "--listen", "127.0.0.1:0", "--port-file", str(port_file)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        import time
        deadline = time.monotonic() + BOUND
        while not (port_file.exists() and port_file.read_text().strip()):
            assert time.monotonic() < deadline and serve.poll() is None, "shardq serve failed"
            time.sleep(0.02)
        port = int(port_file.read_text())
        envs = [clean_env(WORLD_SIZE="2", RANK=str(r), MASTER_ADDR="127.0.0.1",
                          SHARDQ_PORT=str(port)) for r in range(2)]
        results = run_tasks(tmp_path, envs, server_index=0)
        assert [r["served"] for r in results] == [None, None]
    finally:
        serve.terminate()
        serve.wait(timeout=BOUND)


TORCH_CHILD = textwrap.dedent("""
    import json, os, pathlib, sys, time
    import torch.utils.data
    import shardq.cluster, shardq.torch
    out, files = pathlib.Path(sys.argv[1]), sys.argv[2:]
    dataset = shardq.torch.WorkQueueDataset(files, reader="text", batch_size=8,
                                            num_slices=12, name="cluster-torch", seed=7)
    lines = []
    for batch in torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2):
        lines += [v.decode() for v in batch]
    # The serving rank runs the coordinator as its child process (a gRPC
    # server in the process DataLoader workers fork from would hang them).
    out.write_text(json.dumps({"lines": lines, "served": sorted(shardq.torch._served)}))
    deadline = time.monotonic() + 100
    for other in filter(None, os.environ.get("WAIT_FOR", "").split(",")):
        while not pathlib.Path(other).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
""")


def test_two_torchrun_ranks_with_dataloader_workers_are_served_by_rank_zero(tmp_path):
    # WorkQueueDataset with no address under torchrun: rank 0's main process
    # serves (not a DataLoader worker, which would take the queue down with
    # it), every worker of both ranks connects to MASTER_ADDR:SHARDQ_PORT.
    port = free_port()
    envs = [clean_env(WORLD_SIZE="2", RANK=str(r), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT="29500", SHARDQ_PORT=str(port)) for r in range(2)]
    results = run_tasks(tmp_path, envs, server_index=0, child=TORCH_CHILD)
    assert [r["served"] for r in results] == [[f"127.0.0.1:{port}"], []]
