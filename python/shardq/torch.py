"""PyTorch integration: an IterableDataset over a shardq WorkQueue.

    dataset = shardq.torch.WorkQueueDataset(
        files, reader="tfrecord", batch_size=256,
        features={"x": shardq.FixedLen((784,), "float32"), "y": shardq.FixedLen((), "int64")})
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)

Every DataLoader worker process (and every torchrun rank) is a worker of
the same queue, so no item is read twice or skipped. With no coordinator
address (argument, SHARDQ_ADDRESS, TF_CONFIG, MASTER_ADDR + SHARDQ_PORT),
the dataset starts one for this process's DataLoader workers: a separate
`python -m shardq.serve` process on a unix socket (a fresh process, so
forked workers never inherit gRPC state).
"""
import atexit
import os
import subprocess
import sys
import tempfile
import time
import uuid

import torch
import torch.utils.data

import shardq
from shardq.example import ExampleParser


def _discovered_address():
    if os.environ.get("SHARDQ_ADDRESS"):
        return os.environ["SHARDQ_ADDRESS"]
    if '"shardq"' in os.environ.get("TF_CONFIG", ""):
        return None  # the C++ client reads TF_CONFIG itself
    if os.environ.get("MASTER_ADDR") and os.environ.get("SHARDQ_PORT"):
        return None
    return ""


class _LocalCoordinator:
    """A `shardq.serve` child process on a unix socket, stopped at exit."""

    def __init__(self):
        self._dir = tempfile.mkdtemp(prefix="shardq-")
        path = os.path.join(self._dir, "coordinator.sock")
        self.address = f"unix:{path}"
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "shardq.serve", "--listen", self.address],
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        deadline = time.monotonic() + 30
        while not os.path.exists(path):
            if self._proc.poll() is not None:
                raise shardq.UnavailableError(
                    f"the local shardq coordinator exited with {self._proc.returncode}")
            if time.monotonic() > deadline:
                raise shardq.UnavailableError("the local shardq coordinator did not start")
            time.sleep(0.01)
        atexit.register(self.stop)

    def stop(self):
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()


class WorkQueueDataset(torch.utils.data.IterableDataset):
    """Yields batches (dicts of tensors with ``features``; lists of bytes
    otherwise) read from a shared WorkQueue. Use with
    ``DataLoader(dataset, batch_size=None, num_workers=k)``.

    ``reader``: "text", "tfrecord" or "table". Queue parameters
    (num_epochs, shuffle, seed, prefix, num_slices, num_clients, name,
    address) are those of shardq.WorkQueue. ``drop_remainder`` drops each
    worker's last short batch. One pass over the DataLoader reads every
    epoch of the queue (epochs flow into each other, so no worker idles at
    an epoch boundary); make a new dataset (or queue name) for another run.
    """

    def __init__(self, works, reader="tfrecord", features=None, batch_size=256,
                 drop_remainder=False, num_epochs=1, shuffle=True, seed=None, prefix=None,
                 num_slices=None, num_clients=1, name=None, address=None, on_corrupt="fail"):
        super().__init__()
        if reader not in ("text", "tfrecord", "table"):
            raise shardq.InvalidArgumentError(
                f"reader must be 'text', 'tfrecord' or 'table', got {reader!r}")
        if batch_size < 1:
            raise shardq.InvalidArgumentError(f"batch_size must be >= 1, got {batch_size}")
        if features is not None and reader != "tfrecord":
            raise shardq.InvalidArgumentError("features (parse_example) need reader='tfrecord'")
        self.works = list(works)
        self.reader = reader
        self.features = features
        self.batch_size = int(batch_size)
        self.drop_remainder = drop_remainder
        self.queue_args = dict(num_epochs=num_epochs, shuffle=shuffle,
                               seed=seed if seed is not None else int.from_bytes(os.urandom(7), "big"),
                               prefix=prefix, num_slices=num_slices, num_clients=num_clients,
                               name=name or f"torch-{uuid.uuid4().hex[:12]}")
        self.on_corrupt = on_corrupt
        if address is None:
            address = _discovered_address()
            if address == "":
                world = int(os.environ.get("WORLD_SIZE", "1"))
                if world > 1:
                    raise shardq.FailedPreconditionError(
                        f"WORLD_SIZE={world} but no coordinator: run `shardq serve` on "
                        "MASTER_ADDR and set SHARDQ_PORT (or SHARDQ_ADDRESS), otherwise "
                        "every rank would read all the data")
                self._local = _LocalCoordinator()
                address = self._local.address
        self.address = address

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_local", None)  # the child process belongs to the parent
        return state

    def _worker_id(self):
        info = torch.utils.data.get_worker_info()
        rank = os.environ.get("RANK", "0")
        return f"rank{rank}-pid{os.getpid()}-w{info.id if info else 0}"

    def _make_reader(self):
        if self.reader == "text":
            return shardq.TextLineReader()
        if self.reader == "tfrecord":
            return shardq.TFRecordReader(on_corrupt=self.on_corrupt)
        return shardq.TableReader()

    def __iter__(self):
        queue = shardq.WorkQueue(self.works, address=self.address or None,
                                 worker_id=self._worker_id(), **self.queue_args)
        parser = ExampleParser(self.features) if self.features else None
        reader = self._make_reader()
        producer = queue.input_producer()
        while True:
            try:
                _, values = reader.read_up_to(producer, self.batch_size)
            except shardq.OutOfRangeError:
                break
            if len(values) < self.batch_size and self.drop_remainder:
                continue
            if parser is None:
                yield values
            else:
                yield {k: torch.from_numpy(v) if v.dtype != object else list(v)
                       for k, v in parser(values).items()}
        queue.close()

