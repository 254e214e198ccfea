"""shardq: elastic data sharding for distributed training.

    import shardq
    queue = shardq.WorkQueue(["data/a.txt", "data/b.txt"], num_epochs=2, num_slices=80)
    reader = shardq.TextLineReader()
    producer = queue.input_producer()
    while True:
        try:
            keys, values = reader.read_up_to(producer, 256)
        except shardq.OutOfRangeError:
            break

Every worker that names the same queue shares it: fast workers take more
items, slow ones fewer. With no address (and none in SHARDQ_ADDRESS,
TF_CONFIG or torchrun's MASTER_ADDR + SHARDQ_PORT) the queue lives in this
process and its workers are the threads that create WorkQueues.
"""
import collections
import itertools
import operator
import os
import tempfile

from shardq._version import __version__  # noqa: F401  (from CMake's project())
from shardq import _tf_loading  # noqa: F401,E402  (before _shardq: see the module)
from shardq import _shardq
from shardq.errors import (  # noqa: F401  (re-exported)
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    Error,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from shardq._shardq import (  # noqa: F401
    TableReader, TextLineReader, TFRecordReader, TFRecordWriter)
from shardq.example import (  # noqa: F401
    FixedLen, serialize_example, parse_example, parse_example_fn)
from shardq.example import VarLen, Ragged  # noqa: F401
from shardq import data  # noqa: F401,E402
from shardq.queues import (  # noqa: F401,E402  (TF 1.x queues, see shardq/queues.py)
    FIFOQueue, PriorityQueue, RandomShuffleQueue)
from shardq.queue_runners import (  # noqa: F401,E402
    Coordinator, QueueRunner, add_queue_runner, batch, batch_join, shuffle_batch,
    shuffle_batch_join, start_queue_runners)

__all__ = [
    "WorkQueue", "Item", "TextLineReader", "TFRecordReader", "TFRecordWriter", "TableReader",
    "FixedLen", "serialize_example", "VarLen", "Ragged",
    "parse_example", "parse_example_fn", "serve", "Error", "OutOfRangeError", "InvalidArgumentError",
    "NotFoundError", "DeadlineExceededError", "UnavailableError", "DataLossError",
    "FailedPreconditionError", "PermissionDeniedError", "UnauthenticatedError",
    "CancelledError", "ResourceExhaustedError",
]
__all__ += ["FIFOQueue", "RandomShuffleQueue", "PriorityQueue", "QueueRunner", "Coordinator",
            "add_queue_runner", "start_queue_runners", "batch", "batch_join", "shuffle_batch",
            "shuffle_batch_join"]


def _epoch_of(item):
    """The epoch an Item from take() carries; None for a bare string."""
    return item.epoch if isinstance(item, Item) else None


class Item(str):
    """An item from WorkQueue.take(): the item string (what complete() and
    release() take), plus ``epoch`` (0-based), ``work`` (the file or table
    it is part of), and ``start`` / ``end`` (its byte or row range; None
    for a whole work)."""

    def __new__(cls, item, epoch, work, start, end, work_size=-1):
        self = super().__new__(cls, item)
        self.epoch, self.work, self.start, self.end = epoch, work, start, end
        # The work's size when the plan was made (-1: not known): a copy of
        # a file whose size changed since is refused.
        self._work_size = work_size
        self.path = None  # the local copy, with WorkQueue(download_dir=...)
        return self

    def __repr__(self):
        return f"Item({str(self)!r}, epoch={self.epoch})"


def _epochs(num_epochs):
    """num_epochs for the native queue: None repeats (-1)."""
    if num_epochs is None:
        return -1
    try:
        if isinstance(num_epochs, bool):
            raise TypeError
        num_epochs = operator.index(num_epochs)
    except TypeError:
        raise InvalidArgumentError(
            f"num_epochs must be an int >= 1 or None (repeat), got {num_epochs!r}") from None
    if num_epochs < 1:
        raise InvalidArgumentError(f"num_epochs must be >= 1 or None (repeat), got {num_epochs}")
    return num_epochs


def _check_works(works):
    if isinstance(works, (str, bytes)):
        raise InvalidArgumentError(
            f"works must be a list of work names, not a single string ({works!r})")
    works = [os.fspath(w) if isinstance(w, os.PathLike) else w for w in works]
    for w in works:
        if not isinstance(w, str):
            raise InvalidArgumentError(
                f"works must be strings or paths, got {type(w).__name__}: {w!r}")
    return works


class WorkQueue:
    """A global queue of work items shared by every worker naming it.

    Parameters:

    ``works``: file paths (text, or TFRecord, also gzip/zlib-compressed) or
    table URIs (``sqlite:PATH?table=T``). Each work is one item unless
    ``num_slices`` is given: then the works are cut into about that many
    byte ranges (rows for tables), items such as ``f.txt?start=0&end=175``.
    ``num_epochs``: how many times every item is handed out (>= 1); None
    repeats until the job stops (as many epochs as the coordinator accepts:
    10^8 for plans up to ~88,000 items).
    ``shuffle``: the item order of each epoch is a permutation drawn from
    ``seed`` (None: drawn once; read it back from ``seed``).
    ``prefix``: prepended to every work (e.g. a directory).
    ``name``: the queue; every WorkQueue with this name at one coordinator is
    a worker of the same queue (the first one creates it, with these
    parameters). These seven are PAI's positional parameters, in PAI's order.
    Keywords: ``num_clients`` (items one worker may hold at once, >= 1);
    ``address``: the coordinator, ``HOST:PORT`` or ``unix:PATH``, or the
    coordinators of a highly available job, ``H1:P1,H2:P2`` or
    ``etcd://HOST:PORT[,HOST:PORT]/JOB`` (the client follows the leader;
    docs/cli.md, "Addresses"); None: from
    SHARDQ_ADDRESS, TF_CONFIG (a "shardq" job) or torchrun's MASTER_ADDR +
    SHARDQ_PORT, else the queue lives in this process.
    Keywords: ``lease_timeout`` (seconds a worker may hold an item without a
    heartbeat before it goes to another worker), ``worker_id`` (the name in
    ``stats()``; default host-pid-n), ``token`` and ``tls_ca`` for a secured
    coordinator, ``split`` (tail rebalancing, on by default: when a worker
    finds nothing left to take, an item another worker is still reading is
    split and the rest handed to it) and ``split_min_residual`` (the
    smallest range split off: bytes, rows for tables). ``stats()`` reports
    ``splits``. ``take_ahead`` (default 1): items kept granted and ready
    beyond the one being read, so that the next item never waits for the
    coordinator (they do not count against ``num_clients``, the items read
    at once: the worker may hold ``take_ahead`` more; one not started yet
    is given back whole when the tail is rebalanced; 0: none).
    In a job of several processes that names no coordinator (TF_CONFIG
    without a "shardq" job, torchrun), one task serves the queue from its
    own process and the others connect (see shardq/cluster.py);
    ``state_dir`` makes that coordinator durable.

    Items are handed out at least once and completed exactly once: an item
    whose worker dies is handed to another after ``lease_timeout``.

    Works may be objects of S3-compatible storage, ``s3://bucket/key`` (and
    patterns such as ``s3://bucket/train/*.tfrecord``, listed and sorted),
    configured by the standard AWS environment (AWS_ACCESS_KEY_ID,
    AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL);
    their items carry the ETag seen at planning (``etag=``), and a reader
    refuses an object replaced since. ``download_dir``: take() first copies
    each item to a local file under that directory (``item.path``): a whole
    work byte for byte, a slice as its records (text lines or TFRecords), so
    tools that need a path can read it; the file is removed when the item is
    completed or released. Such a queue does not split items it has handed
    out (``split`` is off), since a copied item cannot shrink.
    """

    def __init__(self, works, num_epochs=1, shuffle=True, seed=None, prefix=None,
                 num_slices=None, name="work_queue", *, num_clients=1, address=None,
                 lease_timeout=30.0, worker_id=None, token=None, tls_ca=None, split=True,
                 split_min_residual=1, connect_timeout=60.0, take_ahead=1, state_dir=None,
                 download_dir=None):
        from shardq import cluster
        address = cluster.resolve(address, state_dir, token)
        self._init_downloads(download_dir)
        if download_dir is not None:
            split = False
        self._native = _shardq._WorkQueue(
            _check_works(works), _epochs(num_epochs), bool(shuffle),
            None if seed is None else int(seed), prefix,
            None if num_slices is None else int(num_slices), int(num_clients), str(name),
            address, float(lease_timeout), worker_id, token, tls_ca, False, bool(split),
            int(split_min_residual), connect_timeout=float(connect_timeout),
            take_ahead=int(take_ahead))

    def _init_downloads(self, download_dir):
        self._download_dir = None if download_dir is None else os.fspath(download_dir)
        # (item string, epoch) -> local path
        self._downloads = collections.OrderedDict()
        self._download_ids = itertools.count()
        if self._download_dir is not None:
            os.makedirs(self._download_dir, exist_ok=True)

    def _download(self, item):
        # PAI's take(): at the num_clients limit the oldest held item counts
        # as finished (the native queue completed it): drop its copy.
        while self._downloads and len(self._downloads) >= self.num_clients:
            self._drop_download(*next(iter(self._downloads)))
        base = os.path.basename(item.work.rstrip("/")) or "item"
        # A name no other copy has, made atomically (O_EXCL): workers in
        # other processes, or other queues of this one, may share the
        # directory, and one copy written over another would hand a worker
        # someone else's records. The work's name stays last (its extension
        # tells tools the format).
        fd, path = tempfile.mkstemp(prefix=f"{next(self._download_ids):06d}-",
                                    suffix=f"-{base}", dir=self._download_dir)
        os.close(fd)
        try:
            _shardq._download_item(str(item), path, item._work_size)
        except BaseException:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
            self._native.release(str(item), item.epoch)
            raise
        item.path = path
        self._downloads[(str(item), item.epoch)] = path

    def _drop_download(self, item, epoch):
        path = self._downloads.pop((str(item), epoch), None)
        if path is not None:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass

    @classmethod
    def attach(cls, name="work_queue", address=None, *, worker_id=None, token=None,
               tls_ca=None, connect_timeout=60.0, take_ahead=1, download_dir=None):
        """A worker of an existing queue, without knowing its works."""
        self = cls.__new__(cls)
        from shardq import cluster
        address = cluster.resolve(address, None, token)
        self._init_downloads(download_dir)
        self._native = _shardq._WorkQueue([], 1, True, None, None, None, 1, str(name),
                                          address, 30.0, worker_id, token, tls_ca, True,
                                          connect_timeout=float(connect_timeout),
                                          take_ahead=int(take_ahead))
        return self

    def take(self, timeout=None):
        """Leases the next item and returns it: an Item, a str (the item
        string) that also carries ``.epoch``, ``.work``, ``.start`` and
        ``.end``.

        Waits while every remaining item is held by other workers; raises
        OutOfRangeError once every item of every epoch is completed, and
        DeadlineExceededError (a TimeoutError) after ``timeout`` seconds.
        Like PAI's take(), when this worker already holds ``num_clients``
        items, the oldest of them counts as finished and is completed.
        """
        item = Item(*self._native.take(timeout))
        if self._download_dir is not None:
            self._download(item)
        return item

    def complete(self, item):
        """Marks an item returned by take() as done (and removes its local
        copy, with download_dir). Pass the Item itself: a bare string is
        refused (InvalidArgumentError) while this worker holds that item in
        two epochs."""
        epoch = self._native.complete(str(item), _epoch_of(item))
        self._drop_download(str(item), epoch)

    def release(self, item):
        """Gives an item back unfinished: it goes to the front of the queue.
        As complete(), pass the Item itself."""
        epoch = self._native.release(str(item), _epoch_of(item))
        self._drop_download(str(item), epoch)

    def input_dataset(self):
        """Iterator over items; each is completed when the next is requested."""
        return self._native.input_dataset()

    def input_producer(self, capacity=0):
        """A local bounded proxy of the queue, kept filled in the background
        (capacity 0: num_clients), for readers' read_up_to().

        A queue has one producer: every call returns the same one (so
        calling it inside a loop, as PAI code does, takes no extra items).
        Asking for another capacity than the first call's raises
        InvalidArgumentError."""
        return self._native.input_producer(capacity)

    def stats(self):
        """The queue's counters: pending, leased, completed, per epoch and
        per worker, expired leases, duplicates, the seed."""
        return self._native.stats()

    def save_checkpoint(self, path):
        """Saves which items are done and the unread rest of held ones. A held
        item resumes after the records its reader returned in order: records
        a shuffle returned beyond that point are returned again after a
        restore (at least once). Returns how many of those this worker's
        pipelines and readers returned (also logged; other workers' are not
        known here)."""
        self._native.save_checkpoint(path)
        return self._native.records_beyond_checkpoint

    def add_summary(self, logdir=None, interval=10.0):
        """Publishes the queue's water level to TensorBoard event files in
        ``logdir`` (see shardq.summary): a directory, or a
        ``torch.utils.tensorboard.SummaryWriter`` (written next to its own
        events), or None: ``$SHARDQ_SUMMARY_DIR``, else
        ``runs/<date>_<host>`` as torch's SummaryWriter does."""
        from shardq import summary
        return summary.start(self, summary.resolve_logdir(logdir), interval)

    def close(self):
        """Ends this worker's use of the queue: gives back every item it
        holds (those from take() whole; those a reader or pipeline over this
        queue is in, only their unread rest; those taken ahead), stops
        renewing leases and ends its session with the coordinator. take(),
        the readers and shardq.data pipelines over it raise
        FailedPreconditionError afterwards (a pipeline returns none of the
        records it still buffers: they went back with their items); stats()
        still answers. A coordinator that is away is asked once: the items
        then go back when their leases expire (records returned of them are
        counted in records_read_again)."""
        self._native.close()
        for key in list(self._downloads):
            self._drop_download(*key)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    name = property(lambda self: self._native.name)
    worker_id = property(lambda self: self._native.worker_id)
    seed = property(lambda self: self._native.seed)
    num_items = property(lambda self: self._native.num_items)
    num_epochs = property(lambda self: self._native.num_epochs)
    num_clients = property(lambda self: self._native.num_clients)
    #: Records this worker's readers returned of items it gave back
    #: unfinished (a pipeline's iterator dropped mid-item, the queue destroyed)
    #: that will be returned again: those that came out of order (a shuffle)
    #: after the point where the item was split, or all of them when it
    #: could not be split. Each such give-back is also logged.
    records_read_again = property(lambda self: self._native.records_read_again)
    #: Records of items completed when they were read (shardq.data's
    #: ``complete="read"``, the default for ``num_clients=1``) that a
    #: pipeline still held when it was dropped: returned to no one. Each such
    #: loss is also logged. With ``num_clients >= 2`` (``complete="consumed"``)
    #: nothing is lost this way.
    records_lost = property(lambda self: self._native.records_lost)

    def __repr__(self):
        return (f"shardq.WorkQueue(name={self.name!r}, items={self.num_items}, "
                f"epochs={self.num_epochs}, worker={self.worker_id!r})")


def serve(listen="127.0.0.1:0", token="", state_dir=""):
    """Runs a coordinator in this process (on gRPC's threads) and returns it:
    ``.port``, ``.stop()``. Most users run ``shardq serve`` instead."""
    return _shardq._Server(listen, token, state_dir)
