"""records/s into a trivial torch loop, tf.Example records (784 float32 +
1 int64), batch 256, in one run:

  shardq.data the C++ pipeline: from_queue(queue, "tfrecord").batch(256)
              .parse_example(features).prefetch(2): reading, CRC checks,
              batching and parsing in C++ threads without the GIL; the
              tensors share the parser's buffers (torch.from_numpy)
  shardq      WorkQueueDataset(reader="tfrecord", features=...) under a
              DataLoader(num_workers=2): the same C++ pipeline in each
              worker (from_queue underneath), batches sent to the training
              process by the DataLoader (shared memory); and with
              num_workers=0 (the pipeline in the training process)
  transport   DataLoader(num_workers=2) over a dataset that yields ready
              tensors of the same shapes (no reading at all): what the
              DataLoader's worker-to-loop transport alone allows
  dataloader  torch DataLoader(num_workers=2) over a pure-Python TFRecord
              reader + python3-protobuf parsing (written here)
  tf.data     TFRecordDataset + parse_example, AUTOTUNE (tensorflow-cpu in a
              venv; skipped with the reason if it cannot be installed)

Usage: torch_feed.py [--records N] [--workdir DIR] [--tf-python PATH]
"""
import argparse
import importlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from grpc_tools import protoc

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "build", "python"))
import shardq  # noqa: E402
import shardq.torch  # noqa: E402

WIDTH = 784
BATCH = 256


def example_pb2():
    # The module stays loaded once imported: its directory can go.
    with tempfile.TemporaryDirectory(prefix="shardq-bench-pb-") as out:
        assert protoc.main(["protoc", f"-I{REPO}", f"--python_out={out}",
                            os.path.join(REPO, "proto", "shardq", "example.proto")]) == 0
        sys.path.insert(0, out)
        try:
            return importlib.import_module("proto.shardq.example_pb2")
        finally:
            sys.path.remove(out)


def make_data(workdir, records, files=8):
    pb = example_pb2()
    paths = [os.path.join(workdir, f"part-{i}.tfrecord") for i in range(files)]
    if all(os.path.exists(p) for p in paths):
        return paths
    rng = np.random.default_rng(0)
    for f, path in enumerate(paths):
        with shardq.TFRecordWriter(path) as w:
            for r in range(records // files):
                e = pb.Example()
                e.features.feature["x"].float_list.value.extend(rng.random(WIDTH, dtype=np.float32))
                e.features.feature["y"].int64_list.value.append(f * 1000000 + r)
                w.write(e.SerializeToString())
    return paths


class PythonTFRecordDataset(torch.utils.data.IterableDataset):
    """The baseline: a pure-Python TFRecord reader (framing only; CRCs not
    checked, which favours it) + python3-protobuf parsing, files split
    statically across DataLoader workers."""

    def __init__(self, paths):
        self.paths = paths

    def __iter__(self):
        pb = example_pb2()
        info = torch.utils.data.get_worker_info()
        mine = self.paths[info.id::info.num_workers] if info else self.paths
        for path in mine:
            with open(path, "rb") as f:
                while True:
                    header = f.read(12)
                    if len(header) < 12:
                        break
                    (length,) = struct.unpack("<Q", header[:8])
                    data = f.read(length)
                    f.read(4)
                    e = pb.Example.FromString(data)
                    x = np.asarray(e.features.feature["x"].float_list.value, dtype=np.float32)
                    y = e.features.feature["y"].int64_list.value[0]
                    yield torch.from_numpy(x), y


def consume(batches):
    """The trivial training loop; returns (records, seconds)."""
    start = time.perf_counter()
    n = 0
    checksum = 0.0
    for x, y in batches:
        checksum += float(x[:, 0].sum())  # touch the data
        n += y.shape[0]
    return n, time.perf_counter() - start


def run_shardq_pipeline(paths):
    features = {"x": shardq.FixedLen((WIDTH,), "float32"), "y": shardq.FixedLen((), "int64")}
    # Items complete only when their records are consumed, so the worker
    # may hold a few more than it reads at once (cycle_length 4).
    queue = shardq.WorkQueue(paths, num_slices=8 * 4, num_clients=16,
                             name=f"torch-feed-{os.getpid()}-{time.monotonic_ns()}")
    ds = (shardq.data.from_queue(queue, reader="tfrecord")
          .batch(BATCH).parse_example(features).prefetch(2))
    return consume((torch.from_numpy(b["x"]), torch.from_numpy(b["y"])) for b in ds)


def run_shardq(paths, num_workers):
    ds = shardq.torch.WorkQueueDataset(
        paths, reader="tfrecord", batch_size=BATCH, num_slices=8 * 4,
        features={"x": shardq.FixedLen((WIDTH,), "float32"), "y": shardq.FixedLen((), "int64")})
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=num_workers)
    return consume((b["x"], b["y"]) for b in loader)


class ReadyTensors(torch.utils.data.IterableDataset):
    """Batches of the benchmark's shapes that cost nothing to make: the
    ceiling the DataLoader's transport puts on any dataset in its workers."""

    def __init__(self, records):
        self.records = records

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        workers, me = (info.num_workers, info.id) if info else (1, 0)
        batches = -(-self.records // BATCH)
        for b in range(me, batches, workers):
            rows = min(BATCH, self.records - b * BATCH)
            yield {"x": torch.empty(rows, WIDTH), "y": torch.zeros(rows, dtype=torch.int64)}


def run_transport(records):
    loader = torch.utils.data.DataLoader(ReadyTensors(records), batch_size=None, num_workers=2)
    return consume((b["x"], b["y"]) for b in loader)


def run_dataloader(paths):
    loader = torch.utils.data.DataLoader(PythonTFRecordDataset(paths), batch_size=BATCH,
                                         num_workers=2)
    return consume(loader)


TF_SCRIPT = r"""
import json, sys, time
import tensorflow as tf
paths = json.loads(sys.argv[1])
spec = {"x": tf.io.FixedLenFeature([784], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}
ds = (tf.data.TFRecordDataset(paths, num_parallel_reads=tf.data.AUTOTUNE)
      .batch(256).map(lambda r: tf.io.parse_example(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
      .prefetch(tf.data.AUTOTUNE))
start = time.perf_counter(); n = 0; s = 0.0
for b in ds:
    s += float(tf.reduce_sum(b["x"][:, 0])); n += int(b["y"].shape[0])
print(json.dumps({"records": n, "seconds": time.perf_counter() - start}))
"""


def run_tf(paths, tf_python):
    if not tf_python or not os.path.exists(tf_python):
        return None, "no tensorflow venv (bench/torch_feed/run makes one)"
    proc = subprocess.run([tf_python, "-c", TF_SCRIPT, json.dumps(paths)],
                          capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if proc.returncode != 0:
        return None, proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed"
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return (r["records"], r["seconds"]), None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=100000)
    p.add_argument("--workdir", default=None,
                   help="where the data set is made (default build/bench-torch-feed-N)")
    p.add_argument("--tf-python", default="")
    a = p.parse_args()
    # One directory per size: make_data reuses the files it finds.
    a.workdir = a.workdir or os.path.join(REPO, "build", f"bench-torch-feed-{a.records}")
    os.makedirs(a.workdir, exist_ok=True)
    paths = make_data(a.workdir, a.records)
    size = sum(os.path.getsize(x) for x in paths)
    for x in paths:  # page cache
        with open(x, "rb") as f:
            while f.read(1 << 24):
                pass
    rows = []
    for name, fn in [("shardq.data C++ pipeline (batch, parse_example, prefetch)",
                      lambda: run_shardq_pipeline(paths)),
                     ("shardq WorkQueueDataset (DataLoader num_workers=2)",
                      lambda: run_shardq(paths, 2)),
                     ("shardq WorkQueueDataset (DataLoader num_workers=0)",
                      lambda: run_shardq(paths, 0)),
                     ("DataLoader(num_workers=2) transport only: ready tensors, no reading",
                      lambda: run_transport(a.records)),
                     ("torch DataLoader(num_workers=2), Python reader+protobuf",
                      lambda: run_dataloader(paths))]:
        n, secs = fn()
        assert n == a.records, f"{name}: read {n} of {a.records} records"
        rows.append((name, n / secs))
    tf_result, why = run_tf(paths, a.tf_python)
    if tf_result:
        n, secs = tf_result
        assert n == a.records, f"tf.data read {n} of {a.records}"
        rows.append(("tf.data TFRecordDataset+parse_example (AUTOTUNE)", n / secs))
    base = rows[4][1]
    print(f"\n{a.records} tf.Example records (784 float32 + 1 int64), "
          f"{size / 2**20:.0f} MiB in page cache, batch {BATCH}, {os.cpu_count()} cores\n")
    print("| reader | records/s | × DataLoader |")
    print("|---|---:|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} | {rate / base:.2f} |")
    if not tf_result:
        print(f"| tf.data | skipped: {why} | |")
    print(f"\nWorkQueueDataset(num_workers=2) / shardq.data = {rows[1][1] / rows[0][1]:.2f} "
          f"(target >= 0.8); / DataLoader+Python reader = {rows[1][1] / base:.2f} (target >= 5); "
          f"/ transport only = {rows[1][1] / rows[3][1]:.2f}")
    print(f"WorkQueueDataset(num_workers=0) / shardq.data = {rows[2][1] / rows[0][1]:.2f}")
    if tf_result:
        print(f"shardq.data C++ pipeline / tf.data = {rows[0][1] / rows[-1][1]:.2f}")


if __name__ == "__main__":
    main()
