"""PyTorch integration: an IterableDataset over a shardq WorkQueue.

    dataset = shardq.torch.WorkQueueDataset(
        files, reader="tfrecord", batch_size=256,
        features={"x": shardq.FixedLen((784,), "float32"), "y": shardq.FixedLen((), "int64")})
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)

Every DataLoader worker process (and every torchrun rank) is a worker of
the same queue, so no item is read twice or skipped. The coordinator is
found as shardq.WorkQueue finds it (the argument, SHARDQ_ADDRESS, TF_CONFIG's
"shardq" job, MASTER_ADDR + SHARDQ_PORT; the same C++ code decides, errors
included). Where that finds none (the embedded case), the dataset starts one
for this process's DataLoader workers: a separate `python -m shardq.serve`
process on a unix socket (a fresh process, so forked workers never inherit
gRPC state).

The DataLoader takes batches from its workers in a fixed round-robin order
and asks a worker for more only once its earlier batches were taken, so a
worker that has yielded a batch is parked while it holds the item it reads.
A worker that finds nothing left but items held by its parked siblings
therefore ends its pass instead of waiting for them (that wait would never
end); the siblings read those items when they are asked again.

One pass over the DataLoader reads every epoch of the queue. Another pass
over the same dataset, once its queue is finished, raises
FailedPreconditionError (it never ends silently empty): make a new dataset,
or give another queue ``name``. (A worker that joins a queue others have
finished, such as a second process sharing it, reads nothing and ends.)
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
from shardq import _shardq
from shardq.example import ExampleParser


def _needs_local_coordinator():
    """True where a WorkQueue made here without an address would embed its
    queue (the C++ discovery decides; its errors propagate)."""
    return _shardq._discover("")["source"] == "embedded"


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
    address, connect_timeout) are those of shardq.WorkQueue; a worker that
    cannot reach the coordinator raises, and the DataLoader re-raises it.
    ``drop_remainder`` drops each worker's last short batch. One pass over
    the DataLoader reads every epoch of the queue (epochs flow into each
    other, so no worker idles at an epoch boundary); another pass over this
    dataset once its queue is finished raises FailedPreconditionError: make
    a new dataset (or queue name) for another run.
    """

    def __init__(self, works, reader="tfrecord", features=None, batch_size=256,
                 drop_remainder=False, num_epochs=1, shuffle=True, seed=None, prefix=None,
                 num_slices=None, num_clients=1, name=None, address=None, on_corrupt="fail",
                 connect_timeout=None):
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
        if address is None and _needs_local_coordinator():
            world = int(os.environ.get("WORLD_SIZE", "1"))
            if world > 1:
                raise shardq.FailedPreconditionError(
                    f"WORLD_SIZE={world} but no coordinator: run `shardq serve` on "
                    "MASTER_ADDR and set SHARDQ_PORT (or SHARDQ_ADDRESS), otherwise "
                    "every rank would read all the data")
            self._local = _LocalCoordinator()
            address = self._local.address
        self.address = address  # None: the WorkQueue discovers it
        self.connect_timeout = connect_timeout
        self._id = uuid.uuid4().hex[:8]  # names this dataset's workers, in every pass
        self._passes = 0  # passes begun by this copy (a worker's, with persistent_workers)

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_local", None)  # the child process belongs to the parent
        return state

    def _pass_ids(self):
        """(this worker's id, the prefix of this dataset's workers, the prefix
        of the workers of this pass).

        A pass is one iteration over the DataLoader: its workers share the
        base seed torch draws for it (worker_info.seed - id) and, with
        persistent workers, the number of passes begun before it."""
        info = torch.utils.data.get_worker_info()
        rank = os.environ.get("RANK", "0")
        if info is None:
            token = uuid.uuid4().hex[:8]
        else:
            token = f"{(info.seed - info.id) & 0xffffffff:08x}.{self._passes}"
        self._passes += 1
        dataset = f"rank{rank}-{self._id}-"
        siblings = f"{dataset}pass{token}-"
        worker = f"{siblings}w{info.id if info else 0}-pid{os.getpid()}"
        return worker, dataset, siblings

    def _open_queue(self, worker_id):
        kwargs = dict(self.queue_args)
        if self.connect_timeout is not None:
            kwargs["connect_timeout"] = self.connect_timeout
        return shardq.WorkQueue(self.works, address=self.address, worker_id=worker_id, **kwargs)

    def _make_reader(self):
        if self.reader == "text":
            return shardq.TextLineReader()
        if self.reader == "tfrecord":
            return shardq.TFRecordReader(on_corrupt=self.on_corrupt)
        return shardq.TableReader()

    def __iter__(self):
        worker_id, dataset, siblings = self._pass_ids()
        queue = self._open_queue(worker_id)
        try:
            stats = queue.stats()
            if stats["finished"]:
                took = [w for w, v in stats["workers"].items()
                        if w.startswith(dataset) and v["taken"] > 0]
                if took and not any(w.startswith(siblings) for w in took):
                    raise shardq.FailedPreconditionError(
                        f"queue '{queue.name}' is finished: every item of every epoch was "
                        "read in an earlier pass over this dataset; make a new "
                        "WorkQueueDataset (or give another queue name) to read the data again")
            parser = ExampleParser(self.features) if self.features else None
            reader = self._make_reader()
            source = _shardq._PassSource(queue, siblings)
            while True:
                try:
                    _, values = reader.read_up_to(source, self.batch_size)
                except shardq.OutOfRangeError:
                    break
                if len(values) < self.batch_size and self.drop_remainder:
                    continue
                if parser is None:
                    yield values
                else:
                    yield {k: torch.from_numpy(v) if v.dtype != object else list(v)
                           for k, v in parser(values).items()}
        finally:
            queue.close()
