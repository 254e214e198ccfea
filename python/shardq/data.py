"""shardq.data: a small dataset API over a WorkQueue, tf.data-shaped.

    ds = (shardq.data.from_queue(queue, reader="tfrecord")
          .shuffle(10000, seed=1)
          .batch(256, drop_remainder=True)
          .map(lambda records: shardq.parse_example(records, features))
          .prefetch(2))
    for batch in ds: ...

Reading, CRC checks and parse_example run in C++ with the GIL released;
the stages here are Python generators (a ``map`` callable is GIL-bound).
This build chains the stages in Python; the C++ pipeline
(include/shardq/pipeline/dataset.h) is not bound yet. Items are completed
when the reader has returned all their records.
"""
import queue as _queue
import random
import threading

import shardq

_READERS = {"text": lambda oc: shardq.TextLineReader(),
            "tfrecord": lambda oc: shardq.TFRecordReader(on_corrupt=oc),
            "table": lambda oc: shardq.TableReader()}


class Dataset:
    """An iterable pipeline; each method returns a new Dataset."""

    def __init__(self, make_iter):
        self._make_iter = make_iter

    def __iter__(self):
        return self._make_iter()

    def map(self, fn):
        """Applies ``fn`` to every element (in order)."""
        return Dataset(lambda: (fn(x) for x in self._make_iter()))

    def shuffle(self, buffer_size, seed=None):
        """A shuffle buffer of ``buffer_size`` elements (bounded memory)."""
        if buffer_size < 1:
            raise shardq.InvalidArgumentError(f"shuffle buffer_size must be >= 1, got {buffer_size}")

        def gen():
            rng = random.Random(seed)
            buf = []
            for x in self._make_iter():
                if len(buf) < buffer_size:
                    buf.append(x)
                    continue
                i = rng.randrange(buffer_size)
                yield buf[i]
                buf[i] = x
            rng.shuffle(buf)
            yield from buf
        return Dataset(gen)

    def batch(self, batch_size, drop_remainder=False):
        """Lists of ``batch_size`` elements; the last may be short unless
        ``drop_remainder``."""
        if batch_size < 1:
            raise shardq.InvalidArgumentError(f"batch_size must be >= 1, got {batch_size}")

        def gen():
            buf = []
            for x in self._make_iter():
                buf.append(x)
                if len(buf) == batch_size:
                    yield buf
                    buf = []
            if buf and not drop_remainder:
                yield buf
        return Dataset(gen)

    def split(self, replicas, remainder="drop"):
        """Splits each batch (a list) into ``replicas`` equal per-replica
        lists, so every replica gets the same number of batches (synchronous
        training never hangs on uneven data). A batch that does not divide:
        ``remainder="drop"`` drops its tail rows; ``"pad"`` repeats its last
        row and yields (rows, mask) pairs where mask marks real rows."""
        if replicas < 1:
            raise shardq.InvalidArgumentError(f"replicas must be >= 1, got {replicas}")
        if remainder not in ("drop", "pad"):
            raise shardq.InvalidArgumentError(f"remainder must be 'drop' or 'pad', got {remainder!r}")

        def gen():
            for b in self._make_iter():
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
        return Dataset(gen)

    def prefetch(self, buffer_size):
        """Produces up to ``buffer_size`` elements ahead in a background
        thread. Errors reach the consumer at their position."""
        if buffer_size < 1:
            raise shardq.InvalidArgumentError(f"prefetch buffer_size must be >= 1, got {buffer_size}")

        def gen():
            q = _queue.Queue(maxsize=buffer_size)
            stop = threading.Event()
            done = object()

            def fill():
                try:
                    for x in self._make_iter():
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
        return Dataset(gen)


def from_queue(queue, reader="tfrecord", on_corrupt="fail", read_size=256):
    """The records (bytes; dict rows for tables) of a WorkQueue's items,
    read through an input_producer()."""
    if reader not in _READERS:
        raise shardq.InvalidArgumentError(
            f"reader must be 'text', 'tfrecord' or 'table', got {reader!r}")

    def gen():
        r = _READERS[reader](on_corrupt)
        producer = queue.input_producer()
        while True:
            try:
                _, values = r.read_up_to(producer, read_size)
            except shardq.OutOfRangeError:
                return
            yield from values
    return Dataset(gen)
