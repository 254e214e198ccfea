"""The Python stages of shardq.data: generators with the same semantics as
the C++ stages they stand for (a Python ``map``, and whatever follows it,
runs here; data.py chains them)."""
import queue as _queue
import random
import threading

import shardq


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


PY_STAGES = {"map": _py_map, "parse_example": _py_parse_example, "shuffle": _py_shuffle,
              "batch": _py_batch, "split": py_split, "prefetch": _py_prefetch}
