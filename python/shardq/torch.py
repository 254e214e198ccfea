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

DataLoader workers are forked, and gRPC does not survive a fork while it
runs (src/rpc/grpc_fork.h): each worker makes its own WorkQueue, which
works when this process has no shardq connection or server open at the
fork (the dataset itself holds none: a pass with num_workers=0 closes its
queue when it ends). A worker forked while one is open (a WorkQueue this
process keeps, an in-process coordinator) raises FailedPreconditionError
at once, naming the cause: close it first, or use
DataLoader(..., multiprocessing_context="spawn").

Underneath, each worker runs shardq.data.from_queue: reading, CRC checks,
batching, parse_example and prefetch run in the C++ pipeline's threads
without the GIL, and each batch becomes torch tensors over the parser's
buffers (torch.from_numpy, no copy). In a DataLoader worker the batch is
parsed straight into a shared-memory slot that the worker reuses and the
training process keeps mapped (copied into one when no free slot is large
enough), so that only a few ids travel per batch and the loop gets tensors
over the slot without a copy (shardq._torch_slots);
a slot is written again only once no tensor of its batch is left. An item
is completed only once every one of its records has left the worker's
pipeline in a batch (complete="consumed"), so a worker that dies mid-item
leaves the item to be read again (after the queue's lease_timeout), never
lost. Nor does a training process that dies: a batch's records count as
consumed only once the loop is done with it (when it asks for the next
batch; for a DataLoader worker's batch, when that worker is asked for its
batch prefetch_factor + 1 after it, the DataLoader asking a worker for more
only as the loop takes batches; the worker reads prefetch_factor from the
DataLoader that starts it, and warns where it cannot and assumes torch's
default 2), or when the worker's pipeline cannot go on without their items.
A worker therefore holds the items its buffered batches come from: the
queue's num_clients is at least batch_size + 4.

The DataLoader takes batches from its workers in a fixed round-robin order
and asks a worker for more only once its earlier batches were taken, so a
worker that has yielded a batch is parked while it holds the items it
reads. A worker whose pipeline holds nothing and finds nothing left but
items held by its parked siblings, or by live workers of other ranks (which
may be parked in turn, their loop waiting for a worker that waits for ours),
therefore ends its pass instead of waiting (that wait could never end); the
holders read those items when they are asked again. Items of a holder that
is gone are waited for: its lease expires and the item comes back.

One pass over the DataLoader reads every epoch of the queue, unless
``dataset.set_epoch(e)`` was called (the torch habit, as DistributedSampler):

    for epoch in range(E):
        dataset.set_epoch(epoch)
        for batch in loader: ...

A pass then reads epoch e (plus items of earlier epochs given back or
expired since) and stops at the first item of a later epoch, which it gives
back; across all ranks and workers every record of the epoch is read once.
(set_epoch reaches the DataLoader's workers, also persistent ones
(persistent_workers=True): the epoch lives in shared memory that every copy
of the dataset reads at the start of its pass.)
Another pass over the same dataset, once its queue is finished, raises
FailedPreconditionError (it never ends silently empty): make a new dataset,
or give another queue ``name``. (A worker that joins a queue others have
finished, such as a second process sharing it, reads nothing and ends.)
"""
import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings

import torch
import torch.utils.data

import shardq
import shardq.data
from shardq import _shardq, _torch_slots, cluster


def _needs_local_coordinator():
    """True where a WorkQueue made here without an address would embed its
    queue (the C++ discovery decides; its errors propagate)."""
    return _shardq._discover("")["source"] == "embedded"


class _CoordinatorProcess:
    """A `shardq.serve` child process listening on ``listen``, stopped at
    exit. A child, not a server in this process: DataLoader workers fork
    from this process, and a forked copy of a running gRPC server hangs."""

    def __init__(self, listen=None, state_dir=None):
        self._dir = None  # made here for the socket; removed by stop()
        if listen is None:  # this process's own queue, on a unix socket
            self._dir = tempfile.mkdtemp(prefix="shardq-")
            listen = "unix:" + os.path.join(self._dir, "coordinator.sock")
        self.address = listen
        args = [sys.executable, "-m", "shardq.serve", "--listen", listen, "--exit-with-parent"]
        if state_dir is not None:
            args += ["--state-dir", os.fspath(state_dir)]
        self._proc = subprocess.Popen(
            args, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        deadline = time.monotonic() + 30
        while not self._listening():
            if self._proc.poll() is not None:
                raise shardq.UnavailableError(
                    f"the shardq coordinator for {listen} exited with {self._proc.returncode}")
            if time.monotonic() > deadline:
                self.stop()
                raise shardq.UnavailableError(f"the shardq coordinator for {listen} did not start")
            time.sleep(0.01)
        atexit.register(self.stop)

    def _listening(self):
        if self.address.startswith("unix:"):
            return os.path.exists(self.address[len("unix:"):])
        return _port_answers(self.address)

    def stop(self):
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


_served = {}  # address -> the _CoordinatorProcess this process started for its job


def _job_coordinator(state_dir):
    """The coordinator address of a torchrun/TF_CONFIG job that names none
    (shardq.cluster's rule), started as a child of this process when this
    is the job's serving task; None outside such a job."""
    found = _shardq._cluster_coordinator("")
    if found is None:
        return None
    where, serve_here, _source = found
    if serve_here and torch.utils.data.get_worker_info() is None and where not in _served:
        if cluster.serving() is None and not _port_answers(where):
            _served[where] = _CoordinatorProcess(where, state_dir)
    return where


def _port_answers(address):
    """True when something accepts TCP connections at HOST:PORT."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=1).close()
        return True
    except OSError:
        return False


# A DataLoader worker's batches travel through shared-memory slots that
# the worker reuses (shardq._torch_slots); _pack is the worker's side.
_pack = _torch_slots.pack
_to_torch = _torch_slots._to_torch


def _rank_and_world():
    """(rank, world size): torch.distributed's when it is initialised
    (in this process, or in the parent a DataLoader worker was forked
    from), else RANK and WORLD_SIZE (0 and 1 when unset)."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


# Items a worker's pipeline reads at once (from_queue's cycle_length); the
# queue lets a worker hold a batch's worth of items more than that.
_CYCLE = 4

# torch's default DataLoader prefetch_factor, assumed by a worker that
# cannot find its DataLoader's (_loader_prefetch_factor).
_DEFAULT_PREFETCH = 2


def _loader_prefetch_factor(dataset):
    """The prefetch_factor of the DataLoader whose workers are being started
    over ``dataset``, or None where it cannot be found.

    torch passes a worker neither the DataLoader nor its prefetch_factor, so
    it is read from torch's multiprocessing iterator in the calling frames
    (the one over this dataset, else the nearest over another dataset with
    workers: a dataset wrapping this one):
    a forked worker runs on a copy of the frames that started it (the
    iterator's __init__ among them), and the dataset of a spawned worker is
    pickled inside that __init__ (__getstate__ keeps what it finds)."""
    iterator_type = getattr(torch.utils.data.dataloader, "_BaseDataLoaderIter", None)
    if iterator_type is None:
        return None
    other = None  # the nearest multiprocess loader of another dataset (one wrapping this one)
    frame = sys._getframe(1)
    while frame is not None:
        it = frame.f_locals.get("self")
        factor = getattr(it, "_prefetch_factor", None) if isinstance(it, iterator_type) else None
        if isinstance(factor, int) and factor >= 1:
            if getattr(it, "_dataset", None) is dataset:
                return factor
            if other is None and (getattr(it, "_num_workers", 0) or 0) > 0:
                other = factor
        frame = frame.f_back
    return other


class WorkQueueDataset(torch.utils.data.IterableDataset):
    """Yields batches (dicts of tensors with ``features``; lists of bytes,
    or of dict rows for tables, otherwise) read from a shared WorkQueue. Use
    with ``DataLoader(dataset, batch_size=None, num_workers=k)``.

    ``reader``: "text", "tfrecord" or "table". Queue parameters
    (num_epochs, shuffle, seed, prefix, num_slices, num_clients, name,
    address, connect_timeout, lease_timeout, take_ahead) are those of shardq.WorkQueue,
    except that num_clients is raised to at least batch_size + 4 (a worker
    holds the items of its batches until they are consumed), and that a job
    of several ranks must give ``name`` (the same on every rank; without it
    each rank would get a queue of its own: InvalidArgumentError); a worker
    that cannot reach the coordinator raises, and the DataLoader re-raises
    it.
    ``state_dir``: as shardq.WorkQueue's, for the coordinator a torchrun or
    TF_CONFIG job's serving task starts here (shardq.cluster).
    ``drop_remainder`` drops short batches (a worker's last one). One pass
    over the DataLoader reads every epoch of the queue (epochs flow into
    each other, so no worker idles at an epoch boundary); another pass over
    this dataset once its queue is finished raises FailedPreconditionError:
    make a new dataset (or queue name) for another run.
    ``num_parallel_calls``: parse_example threads per worker (default: the
    cores divided among the DataLoader workers, up to 4; where that leaves
    one or none per worker, parsing runs in the worker pipeline's prefetch
    thread instead of threads of its own).

    ``equal_steps=True`` (synchronous DDP): every rank yields the same
    number of batches per pass (per set_epoch epoch, or per run without
    it), agreed through the coordinator: each batch gets a boolean
    ``"_mask"`` per row, and a rank that runs dry yields padding batches
    (zero rows, ``_mask`` False) until the agreed count, so no rank waits
    forever in an all-reduce. No real record is dropped or repeated. Every
    DataLoader worker of every rank is a participant (world size from
    torch.distributed, else WORLD_SIZE; every rank must use the same
    num_workers and the same queue ``name``). A rank with no batch left
    raises DeadlineExceededError once no other participant has reported
    anything for ``steps_timeout`` seconds (default 1800: one died or never
    started). See shardq.data.
    """

    def __init__(self, works, reader="tfrecord", features=None, batch_size=256,
                 drop_remainder=False, num_epochs=1, shuffle=True, seed=None, prefix=None,
                 num_slices=None, num_clients=1, name=None, address=None, on_corrupt="fail",
                 connect_timeout=None, *, lease_timeout=None, num_parallel_calls=None,
                 take_ahead=None, equal_steps=False, state_dir=None,
                 steps_timeout=shardq.data.STEPS_TIMEOUT):
        super().__init__()
        if reader not in ("text", "tfrecord", "table"):
            raise shardq.InvalidArgumentError(
                f"reader must be 'text', 'tfrecord' or 'table', got {reader!r}")
        if batch_size < 1:
            raise shardq.InvalidArgumentError(f"batch_size must be >= 1, got {batch_size}")
        if features is not None and reader != "tfrecord":
            raise shardq.InvalidArgumentError("features (parse_example) need reader='tfrecord'")
        if on_corrupt not in ("fail", "skip"):
            raise shardq.InvalidArgumentError(
                f"on_corrupt must be 'fail' or 'skip', got {on_corrupt!r}")
        if num_parallel_calls is not None and num_parallel_calls < 1:
            raise shardq.InvalidArgumentError(
                f"num_parallel_calls must be >= 1, got {num_parallel_calls}")
        self.works = shardq._check_works(works)
        self.reader = reader
        self.features = features
        self.batch_size = int(batch_size)
        self.drop_remainder = bool(drop_remainder)
        self.num_parallel_calls = num_parallel_calls
        # seed None: the coordinator draws one when the queue is made, and
        # every rank and DataLoader worker that attaches takes it (a seed
        # drawn here would differ between ranks, which then could not attach).
        self.queue_args = dict(num_epochs=num_epochs, shuffle=shuffle, seed=seed,
                               prefix=prefix, num_slices=num_slices,
                               num_clients=max(int(num_clients), self.batch_size + _CYCLE),
                               name=name or f"torch-{uuid.uuid4().hex[:12]}")
        if lease_timeout is not None:
            self.queue_args["lease_timeout"] = float(lease_timeout)
        if take_ahead is not None:
            self.queue_args["take_ahead"] = int(take_ahead)
        self.on_corrupt = on_corrupt
        self.equal_steps = bool(equal_steps)
        self.steps_timeout = float(steps_timeout)
        if not self.steps_timeout > 0:
            raise shardq.InvalidArgumentError(
                f"steps_timeout must be > 0 seconds, got {steps_timeout}")
        if address is None:
            # A torchrun/TF_CONFIG job naming no coordinator: its serving task
            # (rank 0) serves the queue from this process, before the
            # DataLoader forks workers that connect to it.
            address = _job_coordinator(state_dir)
        if address is None and _needs_local_coordinator():
            world = int(os.environ.get("WORLD_SIZE", "1"))
            if world > 1:
                raise shardq.FailedPreconditionError(
                    f"WORLD_SIZE={world} but no coordinator: run `shardq serve` on "
                    "MASTER_ADDR and set SHARDQ_PORT (or SHARDQ_ADDRESS), otherwise "
                    "every rank would read all the data")
            self._local = _CoordinatorProcess()
            address = self._local.address
        _, world = _rank_and_world()
        if name is None and world > 1:
            # Each rank would make a queue of its own (a fresh default name)
            # and read all the data: every record once per rank, silently.
            raise shardq.InvalidArgumentError(
                f"WorkQueueDataset needs a queue name when the job has {world} ranks "
                "(WORLD_SIZE or torch.distributed): give every rank the same name=..., "
                "so that they share one queue; without it each rank would read all the data")
        self.address = address  # None: the WorkQueue discovers it
        self.connect_timeout = connect_timeout
        self._id = uuid.uuid4().hex[:8]  # names this dataset's workers, in every pass
        self._passes = 0  # passes begun by this copy (a worker's, with persistent_workers)
        # set_epoch's epoch (-1: None, every epoch), in shared memory: a
        # DataLoader with persistent_workers=True keeps the copies of the
        # dataset its workers started with, and a plain attribute set in the
        # training process after that would never reach them (their passes
        # then read the first epoch's leftovers: nothing, without a word).
        self._epoch_cell = torch.full((1,), -1, dtype=torch.int64).share_memory_()

    def set_epoch(self, epoch):
        """The next passes read epoch ``epoch`` (from 0, below num_epochs),
        plus items of earlier epochs given back or expired since, and
        nothing of later epochs; None: every epoch in one pass."""
        if epoch is not None:
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise shardq.InvalidArgumentError(
                    f"set_epoch: epoch must be an int >= 0, got {epoch!r}")
            num_epochs = self.queue_args["num_epochs"]
            if num_epochs is not None and epoch >= num_epochs:
                raise shardq.InvalidArgumentError(
                    f"set_epoch({epoch}): the queue has num_epochs={num_epochs} "
                    f"(epochs 0 to {num_epochs - 1})")
        self._epoch_cell[0] = -1 if epoch is None else epoch

    @property
    def _epoch(self):
        """The epoch set_epoch last set, None for every epoch; read at the
        start of each pass, in whichever process runs it."""
        epoch = int(self._epoch_cell[0])
        return None if epoch < 0 else epoch

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_local", None)  # the child process belongs to the parent
        # Pickled for a spawned DataLoader worker: its prefetch_factor is
        # known here, in the process starting it, and not there.
        factor = _loader_prefetch_factor(self)
        if factor is not None:
            state["_loader_prefetch"] = factor
        return state

    def _worker_defer(self):
        """In a DataLoader worker, the batches after which a batch's records
        count as consumed: the worker is asked for its batch k only once the
        training loop has taken the batch it yielded prefetch_factor batches
        before, and so has finished with the one before that:
        prefetch_factor + 1."""
        factor = self.__dict__.get("_loader_prefetch") or _loader_prefetch_factor(self)
        if factor is None:
            factor = _DEFAULT_PREFETCH
            warnings.warn(
                "shardq.torch: this DataLoader's prefetch_factor could not be found (a torch "
                f"version whose DataLoader this module does not know); assuming {factor}: with "
                "a larger one, a training process that dies loses the records of the batches "
                "its workers fetched beyond that", RuntimeWarning, stacklevel=2)
        self._loader_prefetch = factor  # this worker's other passes (persistent_workers)
        return factor + 1

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

    def _parse_threads(self):
        """parse_example threads per worker; 0: none of its own (it runs in
        the worker pipeline's prefetch thread), where several DataLoader
        workers share so few cores that each would get one at most."""
        if self.num_parallel_calls is not None:
            return int(self.num_parallel_calls)
        info = torch.utils.data.get_worker_info()
        workers = info.num_workers if info is not None else 1
        share = (os.cpu_count() or 1) // workers
        return 0 if workers > 1 and share <= 1 else max(1, min(4, share))

    def _pipeline(self, queue, siblings):
        """The worker's C++ pipeline over ``queue``."""
        steps = {}
        if self.equal_steps:
            rank, world = _rank_and_world()
            info = torch.utils.data.get_worker_info()
            workers = info.num_workers if info is not None else 1
            steps = dict(equal_steps=True, participants=world * workers,
                         participant=f"rank{rank}-w{info.id if info else 0}",
                         steps_timeout=self.steps_timeout)
        # A batch's items complete only once the training loop is done with
        # it: in the training process, when it asks for the next batch; in
        # a DataLoader worker, when the worker is asked for its batch
        # prefetch_factor + 1 later (the DataLoader asks a worker for more
        # only as the loop takes batches, holding prefetch_factor of each
        # worker's ready). A training process that dies then loses no record.
        defer = self._worker_defer() if torch.utils.data.get_worker_info() is not None else 1
        ds = shardq.data.from_queue(queue, reader=self.reader, on_corrupt=self.on_corrupt,
                                    cycle_length=_CYCLE, complete="consumed",
                                    _pass_siblings=siblings, _defer=defer, **steps)
        ds.set_epoch(self._epoch)
        ds = ds.batch(self.batch_size, drop_remainder=self.drop_remainder)
        if self.features:
            threads = self._parse_threads()
            if torch.utils.data.get_worker_info() is not None:
                # Straight into the worker's shared-memory slots (_pack
                # then sends them without a copy).
                slots = _torch_slots._worker_slots()
                slots.parsing = True
                ds = ds._parse_example_into(self.features, threads, slots.pool)
            elif threads:
                ds = ds.parse_example(self.features, num_parallel_calls=threads)
            else:
                ds = ds._parse_example_in_puller(self.features)
        return iter(ds.prefetch(2))

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
            batches = self._pipeline(queue, siblings)
            try:
                if not self.features:
                    yield from batches
                elif torch.utils.data.get_worker_info() is not None:
                    # Sent to the training process through a reused
                    # shared-memory slot (one copy, no new segment per batch).
                    for batch in batches:
                        yield _pack(batch)
                else:
                    for batch in batches:  # no copy: the parser's buffers
                        yield {k: _to_torch(v) for k, v in batch.items()}
            finally:
                batches.close()  # gives the items not consumed back to the queue
        finally:
            queue.close()
