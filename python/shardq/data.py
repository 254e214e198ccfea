"""shardq.data: a tf.data-shaped dataset API over a WorkQueue.

    features = {"x": shardq.FixedLen((784,), "float32"), "y": shardq.FixedLen((), "int64")}
    ds = (shardq.data.from_queue(queue, reader="tfrecord")
          .shuffle(10000, seed=1)
          .batch(256, drop_remainder=True)
          .parse_example(features)       # or .map(shardq.parse_example_fn(features))
          .prefetch(2))
    for batch in ds: ...                  # {"x": float32 [256, 784], "y": int64 [256]}

Over a queue, the stages run in the C++ pipeline (include/shardq/pipeline/
dataset.h), in its own threads, without the GIL: reading (text lines,
CRC-checked TFRecords, or table rows), shuffle, batch, split, parse_example
and prefetch. Python only receives finished elements: bytes records (dict
rows for tables), lists of them (batches), per-replica lists (split), or
dicts of numpy arrays whose memory is the C++ parser's buffer (no copy;
``torch.from_numpy`` shares it too). Iterating waits with the GIL
released, and Ctrl-C interrupts a blocked ``next``.

With ``complete="consumed"``, items are completed only when every one of
their records has left the pipeline (returned to Python, or dropped by
``drop_remainder`` / split), so a worker that stops, or dies, mid-item
leaves it to be read again; dropping an iterator (or ``close()``) gives its
unfinished items back to the queue. The pipeline then holds items whose
records wait in its buffers: the queue needs a ``num_clients`` large enough
for the items one batch spans (at most the batch size), otherwise ``batch``
fails with FailedPreconditionError saying so. With ``complete="read"`` an
item is completed once all its records are read into the pipeline, as the
readers do; a crash may then lose what its buffers held. The default,
``"auto"``, is "read" for a queue with ``num_clients=1`` (the default,
where a batch spanning two items could never be filled otherwise) and
"consumed" for any larger ``num_clients``.

A Python ``map`` callable is GIL-bound: it runs in the consumer's thread,
and so do the stages after it (as Python generators, where a completed item
may still have records in a Python buffer). Put it last. A
``Dataset(make_iter)`` over a Python iterable runs its stages in Python.

One pass (one ``for`` over the dataset) reads every epoch of the queue.
Another pass over the same WorkQueue, once it is finished, raises
FailedPreconditionError rather than ending silently empty; a pass that
stopped early continues where the queue is.
"""
import os
import queue as _queue
import random
import threading

import shardq
from shardq import _shardq
from shardq.example import ExampleParser

_READERS = ("text", "tfrecord", "table")


def _default_parallelism():
    return max(1, min(4, os.cpu_count() or 1))


class Dataset:
    """An iterable pipeline; each method returns a new Dataset.

    ``Dataset(make_iter)``: the elements of ``make_iter()``, a Python
    iterable (its stages run in Python); ``from_queue`` makes the C++ ones.
    """

    def __init__(self, make_iter, _ops=(), _queue_source=None):
        self._make_iter = make_iter
        self._ops = tuple(_ops)
        self._queue_source = _queue_source  # dict of from_queue's arguments

    def _then(self, *op):
        return Dataset(self._make_iter, self._ops + (op,), self._queue_source)

    def map(self, fn):
        """Applies ``fn`` to every element, in order. An ExampleParser
        (``shardq.parse_example_fn(features)``) is the C++ parse_example
        stage; any other callable runs in Python, in the consumer's thread
        (GIL-bound), as do the stages after it."""
        if isinstance(fn, ExampleParser):
            return self.parse_example(fn)
        return self._then("map", fn)

    def parse_example(self, features, num_parallel_calls=None):
        """Parses batches of tf.Example records into {name: numpy array of
        shape (rows, *spec.shape)}. Over a queue this is a C++ stage on
        ``num_parallel_calls`` threads (default: up to 4 cores), whose arrays
        wrap the parser's buffers. After ``split``, each replica's batch is
        parsed; with ``remainder="pad"`` every replica gets (dict, mask)
        with a numpy bool mask (True: a real row; padding rows hold a copy
        of a real row)."""
        parser = features if isinstance(features, ExampleParser) else ExampleParser(features)
        threads = _default_parallelism() if num_parallel_calls is None else int(num_parallel_calls)
        if threads < 1:
            raise shardq.InvalidArgumentError(f"num_parallel_calls must be >= 1, got {threads}")
        return self._then("parse_example", parser, threads)

    def shuffle(self, buffer_size, seed=None):
        """A shuffle buffer of ``buffer_size`` elements (bounded memory).
        With a seed (and a fixed item order) the order is reproducible."""
        if buffer_size < 1:
            raise shardq.InvalidArgumentError(f"shuffle buffer_size must be >= 1, got {buffer_size}")
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little")
        return self._then("shuffle", int(buffer_size), int(seed))

    def batch(self, batch_size, drop_remainder=False):
        """Lists of ``batch_size`` elements; the last may be short unless
        ``drop_remainder`` (its records still count as consumed)."""
        if batch_size < 1:
            raise shardq.InvalidArgumentError(f"batch_size must be >= 1, got {batch_size}")
        return self._then("batch", int(batch_size), bool(drop_remainder))

    def split(self, replicas, remainder="drop"):
        """Splits each batch into ``replicas`` per-replica batches so that
        every replica gets the same number of batches (synchronous training
        never hangs on uneven data).

        Over a queue (C++ Distribute): the batch size must be a multiple of
        ``replicas`` and every replica's batch has batch_size / replicas
        rows; a short batch is dropped whole (``remainder="drop"``) or its
        rows are spread evenly and padded (``"pad"``: each replica gets
        (rows, mask), mask True for real rows, padding rows b"").
        Over a Python iterable: ``"drop"`` trims a batch that does not
        divide; ``"pad"`` repeats its last row, with the same masks."""
        if replicas < 1:
            raise shardq.InvalidArgumentError(f"replicas must be >= 1, got {replicas}")
        if remainder not in ("drop", "pad"):
            raise shardq.InvalidArgumentError(f"remainder must be 'drop' or 'pad', got {remainder!r}")
        return self._then("split", int(replicas), remainder)

    def prefetch(self, buffer_size):
        """Keeps up to ``buffer_size`` elements ready, produced by a
        background thread. Errors reach the consumer at their position."""
        if buffer_size < 1:
            raise shardq.InvalidArgumentError(f"prefetch buffer_size must be >= 1, got {buffer_size}")
        return self._then("prefetch", int(buffer_size))

    def __iter__(self):
        if self._queue_source is None:
            return _python_stages(iter(self._make_iter()), self._ops)
        source = self._queue_source
        _begin_pass(source["queue"])
        native_ops, python_ops = _plan(self._ops)
        builder = _shardq._Pipeline(source["queue"], source["reader"], source["on_corrupt"],
                                    source["cycle_length"], source["num_parallel_reads"],
                                    source["read_size"], source["complete_when_read"])
        for name, *args in native_ops:
            if name == "parse_example":
                parser, threads = args
                builder.parse_example(parser.spec, threads)
            else:
                getattr(builder, name)(*args)
        native = builder.iterator()
        if not python_ops:
            return native  # next() / close() / stats()
        return _python_stages(_closing(native), python_ops)


def _begin_pass(queue):
    """Raises if ``queue`` is finished and was read by an earlier pass over
    it (a pass over a finished queue never ends silently empty)."""
    read_before = getattr(queue, "_shardq_data_passes", 0) > 0
    queue._shardq_data_passes = getattr(queue, "_shardq_data_passes", 0) + 1
    if read_before and queue.stats()["finished"]:
        raise shardq.FailedPreconditionError(
            f"queue '{queue.name}' is finished: every item of every epoch was read in an "
            "earlier pass over it; make a new WorkQueue (or give another queue name) to "
            "read the data again")


# --- Which stages run in C++ ---

def _plan(ops):
    """Splits ``ops`` into the prefix the C++ pipeline builds and the rest,
    which runs in Python (from the first Python map, or a stage C++ cannot
    apply to the element at that point)."""
    ops = list(ops)
    # parse then split == split then parse (C++ splits batches of records).
    for i in range(len(ops) - 1):
        if ops[i][0] == "parse_example" and ops[i + 1][0] == "split":
            ops[i], ops[i + 1] = ops[i + 1], ops[i]
    kind = "records"
    for i, (name, *_) in enumerate(ops):
        if name in ("shuffle", "prefetch"):
            continue
        if name == "batch" and kind == "records":
            kind = "batches"
        elif name == "split" and kind == "batches":
            kind = "replicas"
        elif name == "parse_example" and kind in ("batches", "replicas"):
            kind = "parsed"
        elif name == "parse_example" and kind == "records":
            raise shardq.InvalidArgumentError(
                "parse_example parses batches of records: call .batch(n) before it")
        else:
            return ops[:i], ops[i:]
    return ops, []


def _closing(native):
    try:
        yield from native
    finally:
        native.close()


# --- Stages in Python ---

def _python_stages(it, ops):
    for name, *args in ops:
        it = _PY_STAGES[name](it, *args)
    return it


def _py_map(it, fn):
    for x in it:
        yield fn(x)


def _py_parse_example(it, parser, _threads):
    for x in it:
        yield parser(x)


def _py_shuffle(it, buffer_size, seed):
    rng = random.Random(seed)
    buf = []
    for x in it:
        if len(buf) < buffer_size:
            buf.append(x)
            continue
        i = rng.randrange(buffer_size)
        yield buf[i]
        buf[i] = x
    rng.shuffle(buf)
    yield from buf


def _py_batch(it, batch_size, drop_remainder):
    buf = []
    for x in it:
        buf.append(x)
        if len(buf) == batch_size:
            yield buf
            buf = []
    if buf and not drop_remainder:
        yield buf


def _py_split(it, replicas, remainder):
    for b in it:
        rows = list(b)
        if remainder == "drop":
            per = len(rows) // replicas
            if per == 0:
                continue
            yield [rows[r * per:(r + 1) * per] for r in range(replicas)]
        else:
            per = -(-len(rows) // replicas)
            mask = [True] * len(rows) + [False] * (per * replicas - len(rows))
            rows = rows + [rows[-1]] * (per * replicas - len(rows))
            yield [(rows[r * per:(r + 1) * per], mask[r * per:(r + 1) * per])
                   for r in range(replicas)]


def _py_prefetch(it, buffer_size):
    q = _queue.Queue(maxsize=buffer_size)
    stop = threading.Event()
    done = object()

    def fill():
        try:
            for x in it:
                while not stop.is_set():
                    try:
                        q.put(("ok", x), timeout=0.1)
                        break
                    except _queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(("ok", done))
        except BaseException as e:  # delivered to the consumer
            q.put(("err", e))

    t = threading.Thread(target=fill, daemon=True, name="shardq-prefetch")
    t.start()
    try:
        while True:
            kind, x = q.get()
            if kind == "err":
                raise x
            if x is done:
                return
            yield x
    finally:
        stop.set()


_PY_STAGES = {"map": _py_map, "parse_example": _py_parse_example, "shuffle": _py_shuffle,
              "batch": _py_batch, "split": _py_split, "prefetch": _py_prefetch}


def from_queue(queue, reader="tfrecord", on_corrupt="fail", read_size=256, *,
               cycle_length=None, num_parallel_reads=1, complete="auto"):
    """The records of a WorkQueue's items, read by the C++ pipeline: bytes
    for "text" and "tfrecord", dict rows (column -> value) for "table".

    ``cycle_length``: items read at once, taking turns (default: up to 4,
    at most the queue's num_clients); ``num_parallel_reads``: threads
    reading them; ``read_size``: rows fetched per query for tables;
    ``on_corrupt``: "fail" or "skip" corrupt TFRecord regions;
    ``complete``: "consumed", "read" or "auto" (see the module docstring).
    The pipeline must be the queue's only taker (no take() on it
    meanwhile)."""
    if reader not in _READERS:
        raise shardq.InvalidArgumentError(
            f"reader must be 'text', 'tfrecord' or 'table', got {reader!r}")
    if on_corrupt not in ("fail", "skip"):
        raise shardq.InvalidArgumentError(
            f"on_corrupt must be 'fail' or 'skip', got {on_corrupt!r}")
    if complete not in ("auto", "consumed", "read"):
        raise shardq.InvalidArgumentError(
            f"complete must be 'auto', 'consumed' or 'read', got {complete!r}")
    if complete == "auto":
        complete = "read" if queue.num_clients == 1 else "consumed"
    if cycle_length is None:
        cycle_length = min(4, queue.num_clients)
    return Dataset(None, (), dict(queue=queue, reader=reader, on_corrupt=on_corrupt,
                                  read_size=int(read_size), cycle_length=int(cycle_length),
                                  num_parallel_reads=int(num_parallel_reads),
                                  complete_when_read=complete == "read"))
