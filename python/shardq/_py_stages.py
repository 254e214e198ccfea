"""The Python stages of shardq.data: generators with the same semantics as
the C++ stages they stand for (a Python ``map``, and whatever follows it,
runs here; data.py chains them)."""
import queue as _queue
import random
import threading
import time
import warnings

import shardq
from shardq import _shardq


def _py_map(it, fn):
    for x in it:
        yield fn(x)


def _py_parse_example(it, parser, _threads, _slots):
    """As the C++ stage: a batch of records -> dict of arrays; after split,
    each replica's batch, with a padding row parsed as a copy of a real row
    of the same step and the mask as a numpy bool array."""
    import numpy as np
    for x in it:
        if not (isinstance(x, list) and x and isinstance(x[0], (list, tuple))):
            yield parser(x)
            continue
        padded = isinstance(x[0], tuple)
        filler = next((r for rep in x for r, real in zip(*rep) if real), None) if padded else None
        out = []
        for rep in x:
            if not padded:
                out.append(parser(rep))
                continue
            rows, mask = rep
            rows = [r if real or filler is None else filler for r, real in zip(rows, mask)]
            out.append((parser(rows), np.asarray(mask, dtype=np.bool_)))
        yield out


def _py_shuffle(it, buffer_size, seed, drains=None):
    """The C++ shuffle's buffer. ``drains(x)`` (the tracked stages', see
    below): x is a marker that empties the buffer first (in random order)
    and is passed on."""
    rng = random.Random(seed)
    buf = []
    for x in it:
        if drains is not None and drains(x):
            rng.shuffle(buf)
            yield from buf
            buf = []
            yield x
            continue
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


def padding_row(rows):
    """A padding row like the C++ default-constructed one: b"" for records
    (bytes), None for table rows and anything else."""
    return b"" if rows and isinstance(rows[0], bytes) else None


def py_split(it, batch_size, replicas, remainder):
    """The C++ Distribute: every replica gets batch_size / replicas rows; a
    short batch is dropped whole ("drop") or spread in contiguous runs that
    differ by at most one row, padded, with masks ("pad")."""
    per = batch_size // replicas
    for b in it:
        rows = list(b)
        if len(rows) > batch_size:
            raise shardq.InvalidArgumentError(
                f"split: a batch of {len(rows)} rows, more than the batch size {batch_size}")
        if remainder == "drop":
            if len(rows) < batch_size:
                continue
            yield [rows[r * per:(r + 1) * per] for r in range(replicas)]
            continue
        out = []
        start = 0
        for r in range(replicas):
            real = len(rows) // replicas + (1 if r < len(rows) % replicas else 0)
            mine = rows[start:start + real]
            start += real
            out.append((mine + [padding_row(rows)] * (per - real),
                        [True] * real + [False] * (per - real)))
        yield out


# How long a stopping consumer waits for its Python prefetch thread before
# it says so and goes on without it.
_JOIN_WARN = 30.0


def _py_prefetch(it, buffer_size, cancel=None):
    """``it``'s elements, read ahead by a thread of its own. ``cancel`` (a
    native iterator's, under ``it``): when the consumer stops, it ends a
    wait of that thread in the native next(), and the stop waits for the
    thread (up to _JOIN_WARN seconds, then warns), which closes ``it`` (so
    a pipeline's items are back in the queue once close() returns). Without
    it the thread finishes on its own."""
    q = _queue.Queue(maxsize=buffer_size)
    stop = threading.Event()
    done = object()

    def put(entry):
        while not stop.is_set():
            try:
                q.put(entry, timeout=0.1)
                return True
            except _queue.Full:
                continue
        return False

    def fill():
        try:
            for x in it:
                if not put(("ok", x)):
                    return
            put(("ok", done))
        except BaseException as e:  # delivered to the consumer
            put(("err", e))
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()

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
        if cancel is not None:
            cancel()
            if threading.current_thread() is not t:  # (finalized there by the GC)
                t.join(_JOIN_WARN)
                if t.is_alive():  # a map that does not return, say
                    warnings.warn(
                        f"shardq.data: the prefetch thread is still busy {_JOIN_WARN:.0f} s "
                        "after its consumer stopped (in a Python map?); the items it reads "
                        "go back to the queue once it returns", RuntimeWarning, stacklevel=2)


PY_STAGES = {"map": _py_map, "parse_example": _py_parse_example, "shuffle": _py_shuffle,
              "batch": _py_batch, "split": py_split, "prefetch": _py_prefetch}


# --- Consumed when delivered ---
# After a native pipeline made with complete="consumed", the Python stages
# carry each element's index in the native iterator's order (an int, or a
# list of them for a batch), so that its records count as consumed only
# once the element reaches the user (the native iterator is made with
# defer < 0: Iterator::kUntilTold). Records in a Python buffer (a shuffle's,
# a batch being filled), or in an element a Python map failed on, are then
# read again when the pass stops instead of being lost.
#
# When the native pipeline cannot go on without the items of elements the
# Python stages still hold (the queue's held-item limit, or nothing else
# left to take), a DRAIN marker goes up the stages: a shuffle empties its
# buffer and a batch being filled is handed on short (as the C++ stages do
# when their input stalls), the rest pass it on. Once it has reached the
# user, whatever is still held is stuck (a batch that may not be short:
# drop_remainder, or a split that drops short batches): then, and only
# then, its records count as consumed before they reach the user, so that
# the pipeline goes on.

DRAIN = object()  # an index: the pair (DRAIN, None) is the marker
_STALL_POLL = 0.005  # seconds between looks while a marker is on its way


class Delivery:
    """Says to the native iterator which of its elements reached the user
    (at once, or, while a Python prefetch thread waits in its next(), as
    that next() returns: see _PipelineIterator.consume), and counts the
    markers that did."""

    def __init__(self, native):
        self._native = native
        self.delivered = 0  # elements said delivered (some dropped: consumed too)
        self.markers = 0    # DRAIN markers that reached the user

    def deliver(self, index):
        if index is DRAIN:
            self.markers += 1
            return
        indexes = [index] if type(index) is int else index
        self._native.consume(indexes)
        self.delivered += len(indexes)


def tracked_source(native, delivery):
    """(index, element) pairs of ``native`` (made with defer < 0, told by
    ``delivery``), and a DRAIN marker when it stalls; closes it at the end."""
    returned = 0
    sent = 0           # markers sent up
    flushing = False   # a marker was sent since the last element
    seen = delivery.delivered
    stalled = _shardq._STALLED
    try:
        while True:
            if delivery.delivered != seen:
                seen = delivery.delivered
                flushing = False  # consumed: the pipeline may go on now
            try:
                x = next(native)
            except StopIteration:
                return
            if x is not stalled:
                flushing = False
                yield returned, x
                returned += 1
            elif delivery.markers < sent:  # the marker is on its way up
                time.sleep(_STALL_POLL)
            elif flushing:
                # Flushed, told, and still stalled: what the stages hold
                # is stuck (a batch being filled); it counts as consumed.
                native.consume([], all=True)
                flushing = False
            else:
                flushing = True
                sent += 1
                yield DRAIN, None
    finally:
        native.close()


def _t_map(it, fn):
    for index, x in it:
        yield (index, x) if index is DRAIN else (index, fn(x))


def _t_parse_example(it, parser, threads, slots):
    for index, x in it:
        yield (index, x) if index is DRAIN else \
            (index, next(_py_parse_example(iter([x]), parser, threads, slots)))


def _t_batch(it, batch_size, drop_remainder, delivery, short_ok):
    """``short_ok``: a batch being filled at a stall is handed on short
    (neither drop_remainder nor a split that drops short batches)."""
    indexes, values = [], []
    for index, x in it:
        if index is DRAIN:
            if values and short_ok:
                yield indexes, values
                indexes, values = [], []
            yield index, x  # one that may not be short stays (see tracked_source)
            continue
        if type(index) is int:
            indexes.append(index)
        else:
            indexes.extend(index)
        values.append(x)
        if len(values) == batch_size:
            yield indexes, values
            indexes, values = [], []
    if values:
        if drop_remainder:
            delivery.deliver(indexes)  # dropped: consumed, as in C++
        else:
            yield indexes, values


def _t_split(it, batch_size, replicas, remainder, delivery):
    for index, b in it:
        if index is DRAIN:
            yield index, b
            continue
        out = list(py_split(iter([b]), batch_size, replicas, remainder))
        if out:
            yield index, out[0]
        else:
            delivery.deliver(index)  # a short batch dropped: consumed, as in C++


def tracked_stage(name, it, args, batch_size, delivery, cancel, short_ok=True):
    """The Python stage ``name`` over (index, element) pairs and markers;
    ``batch_size``: that of its input's batches, for split; ``cancel``:
    the native iterator's, for prefetch; ``short_ok``: for batch, whether
    no later split drops short batches."""
    if name == "map":
        return _t_map(it, *args)
    if name == "parse_example":
        return _t_parse_example(it, *args)
    if name == "shuffle":
        return _py_shuffle(it, *args, drains=lambda pair: pair[0] is DRAIN)
    if name == "batch":
        batch_size, drop_remainder = args
        return _t_batch(it, batch_size, drop_remainder, delivery,
                        short_ok and not drop_remainder)
    if name == "split":
        return _t_split(it, batch_size, *args, delivery)
    if name == "prefetch":
        return _py_prefetch(it, *args, cancel)
    raise AssertionError(name)


def delivered(it, delivery):
    """The elements of (index, element) pairs, each delivered as it is
    yielded (a marker only counted)."""
    for index, x in it:
        delivery.deliver(index)
        if index is not DRAIN:
            yield x
