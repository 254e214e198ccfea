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
unfinished items back to the queue: of an item whose first records were
returned, only the rest (the item is split after them; records that a
shuffle returned out of order beyond that point are read again and counted
in the queue's ``records_read_again``). The pipeline then holds items whose
records wait in its buffers, at most ``num_clients``. When all of them are
read and no batch can be filled from them, the pipeline stalls: a shuffle
hands on what it holds and the batch being filled is handed on short
(``stats()["short_batches"]``). Where a short batch would be dropped
(``drop_remainder``, ``split(..., remainder="drop")``) its records count
as consumed at once instead (``stats()["records_consumed_early"]``, logged
once) and it is filled as usual; a pass that stops before that batch
reaches you loses them (logged, counted in the queue's ``records_lost``).
Give the queue a ``num_clients`` above ``cycle_length`` (or a smaller
``cycle_length``) so that stalls are rare; none happens with ``num_clients``
at least the batch size. With ``complete="read"`` an
item is completed once all its records are read into the pipeline, as the
readers do; a crash may then lose what its buffers held, and so does
dropping the iterator (those are logged and counted in the queue's
``records_lost``). The default,
``"auto"``, is "read" for a queue with ``num_clients=1`` (the default,
where a batch spanning two items could never be filled otherwise) and
"consumed" for any larger ``num_clients``.

A Python ``map`` callable is GIL-bound: it runs in the consumer's thread,
and so do the stages after it (as Python generators). With
``complete="consumed"`` their records count as consumed only once what
they became reaches you, as in the C++ stages: a record the map raised on,
or one waiting in a Python shuffle or batch when the pass stops, is read
again, not lost (records a Python shuffle returned ahead of the rest of
their item are read again too, and counted in ``records_read_again``).
When those buffers hold records of more items than the queue lets the
worker hold, the Python shuffle is drained and a Python batch being filled
is handed on short, as the C++ ones are (one that may not be short counts
what it holds as consumed before it reaches you, so that the pass goes
on; if the pass ends before they reach you, a failing map say, they are
logged and counted in ``records_lost``). Put the map last. A
``Dataset(make_iter)`` over a Python iterable runs its stages in Python.

One pass (one ``for`` over the dataset) reads every epoch of the queue.
Another pass over the same WorkQueue, once it is finished, raises
FailedPreconditionError rather than ending silently empty; a pass that
stopped early continues where the queue is. The torch habit: call
``ds.set_epoch(e)`` before each pass (``for e in range(E)``); a pass then
reads what is left of epochs <= e (epoch e, plus items of earlier epochs
given back or expired since) and stops at the first item of a later epoch,
which it gives back to the queue for the next pass.

``from_queue(..., equal_steps=True)``: every participant sharing the queue
(``participants`` of them: by default WORLD_SIZE, one per rank) yields the
same number of batches per pass, agreed through the coordinator, so that
synchronous data-parallel training never waits in an all-reduce for a rank
with no batch left. Each batch is a dict with a boolean ``"_mask"`` per row
(parse_example's dict, or ``{"records": batch, "_mask": ...}``): a
participant that runs dry yields padding batches (zeros / b"" / None rows,
``_mask`` all False) until every participant is done and the agreed count
is reached; no real record is dropped or repeated. Before each real batch
it reports its count (one small call to the coordinator per batch); once
dry, it may pad only up to a count another participant has reached, so it
keeps the other ranks' training loops going without running ahead of them
(see src/core/step_agreement.h). A participant with no batch left that hears
nothing from the others for ``steps_timeout`` seconds (default 1800: one
died or never started) raises DeadlineExceededError instead of waiting
forever. The alternative without padding is
torch.distributed.algorithms.Join (see README).
"""
import os
import time

import shardq
from shardq import _py_stages, _shardq
from shardq._py_stages import PY_STAGES as _PY_STAGES
from shardq._py_stages import padding_row as _padding_row
from shardq._py_stages import py_split as _py_split
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

    def set_epoch(self, epoch):
        """The next passes over this dataset (and every dataset of its
        chain: they share one queue source) read epoch ``epoch`` of the
        queue, plus items of earlier epochs given back or expired since, and
        nothing of later epochs (see the module docstring). ``None``: every
        epoch in one pass (the default, PAI's habit). Epochs count from 0 and
        must be below the queue's num_epochs (InvalidArgumentError)."""
        if self._queue_source is None:
            raise shardq.FailedPreconditionError(
                "set_epoch needs a dataset made by shardq.data.from_queue")
        self._queue_source["epoch"] = _check_epoch(epoch, self._queue_source["queue"])

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
        return self._then("parse_example", parser, threads, None)

    def _parse_example_in_puller(self, features):
        """parse_example without threads of its own: it runs in the thread
        that pulls from it (a prefetch stage's, or the consumer's). For
        shardq.torch's DataLoader workers, which share the cores among
        several processes: one thread fewer to hand each batch to."""
        parser = features if isinstance(features, ExampleParser) else ExampleParser(features)
        return self._then("parse_example", parser, 0, None)

    def _parse_example_into(self, features, num_parallel_calls, slots):
        """parse_example (num_parallel_calls 0: in the puller's thread) into
        ``slots``, a DataLoader worker's shared-memory slots
        (shardq._torch_slots): fixed-width features are parsed straight
        into a free slot, so the worker sends the batch without copying it.
        Over a queue only (the C++ stage)."""
        parser = features if isinstance(features, ExampleParser) else ExampleParser(features)
        return self._then("parse_example", parser, int(num_parallel_calls), slots)

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

        Its input must come from ``batch(batch_size)`` (optionally followed
        by shuffle or prefetch) and ``batch_size`` must be a multiple of
        ``replicas``; every replica's batch has batch_size / replicas rows.
        A short batch is dropped whole (``remainder="drop"``; its records
        count as consumed) or its rows are spread over the replicas in
        contiguous runs that differ by at most one row and padded
        (``"pad"``: each replica gets (rows, mask), mask True for real
        rows; padding rows are b"" for records, None for table rows and
        other elements). The C++ stage (over a queue) and the Python one
        (after a Python map, or over a Python iterable) are the same."""
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
            return _python_stages(iter(self._make_iter()), _swap_parse_split(self._ops))
        source = self._queue_source
        if (source.get("equal_steps") is not None
                and not any(name == "batch" for name, *_ in self._ops)):
            raise shardq.InvalidArgumentError(
                "equal_steps needs a dataset of batches: end the chain with .batch(n) "
                "(then parse_example / prefetch)")
        _begin_pass(source["queue"])
        native_ops, python_ops = _plan(self._ops)
        _check_splits(native_ops, python_ops)
        builder = _shardq._Pipeline(source["queue"], source["reader"], source["on_corrupt"],
                                    source["cycle_length"], source["num_parallel_reads"],
                                    source["read_size"], source["complete_when_read"],
                                    source["siblings"],
                                    -1 if source.get("epoch") is None else source["epoch"],
                                    source.get("equal_steps") is not None)
        for name, *args in native_ops:
            if name == "parse_example":
                parser, threads, slots = args
                builder.parse_example(parser.spec, threads, slots)
            else:
                getattr(builder, name)(*args)
        # Records reach Python stages before their user: counted consumed
        # when told (complete="consumed"; shardq.torch's defer needs none).
        told = bool(python_ops) and not source["complete_when_read"]
        native = builder.iterator(-1 if told else source.get("defer", 0))
        if not python_ops and source.get("equal_steps") is None:
            return native  # next() / close() / stats()
        it = _native_then_python(native, python_ops, _batch_size_at_end(native_ops), told)
        if source.get("equal_steps") is not None:
            return _equal_steps(it, source, self._ops)
        return it


def _check_epoch(epoch, queue):
    """``epoch`` as an int checked against ``queue``'s num_epochs (None
    passes: every epoch)."""
    if epoch is None:
        return None
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise shardq.InvalidArgumentError(f"set_epoch: epoch must be an int >= 0, got {epoch!r}")
    num_epochs = queue.num_epochs
    if num_epochs is not None and num_epochs >= 0 and epoch >= num_epochs:
        raise shardq.InvalidArgumentError(
            f"set_epoch({epoch}): queue '{queue.name}' has num_epochs={num_epochs} "
            f"(epochs 0 to {num_epochs - 1})")
    return int(epoch)


# --- Equal steps ---

# How often a participant waiting for the others asks the coordinator again.
_STEPS_POLL = 0.02
# How long (seconds) a participant with no batch left waits for the others
# while none of them reports anything (a participant that died, or never
# started, would otherwise keep it waiting forever): as long as torch's
# default process-group timeout, past which a synchronous job is stuck.
STEPS_TIMEOUT = 1800.0


def _padding_batch(ops, template):
    """A batch of padding rows shaped as the pipeline's batches (from the
    parse_example spec, else like ``template``), its "_mask" all False."""
    import numpy as np
    batch_size = next((args[0] for name, *args in reversed(ops) if name == "batch"), None)
    parse = next((args[0] for name, *args in reversed(ops) if name == "parse_example"), None)
    if batch_size is None:
        raise shardq.InvalidArgumentError("equal_steps needs batches: call .batch(n)")
    if parse is not None:
        out = {}
        for name, (shape, dtype, _default) in parse.spec.items():
            if shape is None:  # VarLen: no values, every row empty
                values = (np.zeros(0, dtype=object) if dtype == "bytes"
                          else np.zeros(0, dtype=dtype))
                out[name] = shardq.Ragged(values, np.zeros(batch_size, dtype=np.int64))
                continue
            full = (batch_size,) + tuple(shape)
            out[name] = (np.full(full, b"", dtype=object) if dtype == "bytes"
                         else np.zeros(full, dtype=dtype))
    elif isinstance(template, dict) and "records" not in template:
        out = {k: (np.zeros((batch_size,) + v.shape[1:], dtype=v.dtype)
                   if isinstance(v, np.ndarray) and v.dtype != object
                   else [None] * batch_size)
               for k, v in template.items() if k != "_mask"}
    else:
        rows = template["records"] if template is not None else []
        out = {"records": [_padding_row(rows)] * batch_size}
    out["_mask"] = np.zeros(batch_size, dtype=np.bool_)
    return out


def _masked(batch):
    """A real batch with its "_mask" (all True)."""
    import numpy as np
    if isinstance(batch, dict):
        first = next(iter(batch.values()), None)
        rows = (0 if first is None else len(first.row_lengths)
                if isinstance(first, shardq.Ragged) else len(first))
        out = dict(batch)
    else:
        rows = len(batch)
        out = {"records": batch}
    out["_mask"] = np.ones(rows, dtype=np.bool_)
    return out


def _equal_steps(it, source, ops):
    """The batches of ``it`` (masked), then padding batches until this
    participant reaches the step count all participants agree on (see
    WorkQueue::AgreeSteps in include/shardq/work_queue.h)."""
    queue = source["queue"]
    native = queue._native if hasattr(queue, "_native") else queue
    participants, participant, timeout = source["equal_steps"]
    epoch = source.get("epoch")
    key = "all-epochs" if epoch is None else f"epoch-{epoch}"
    # A job torchrun restarted (every rank at once) is a pass of its own:
    # the counts its participants reported before the restart are stale.
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if restart not in ("", "0"):
        key += f"-restart-{restart}"

    def report(count, done):
        return native._agree_steps(key, participant, participants, count, done)

    count = 0
    template = None
    try:
        for batch in it:
            count += 1
            report(count, False)
            template = _masked(batch)
            yield template
    finally:
        if hasattr(it, "close"):
            it.close()
    tally = report(count, True)
    # What the others' reports have changed; the wait ends with an error
    # once nothing changed for `timeout` seconds.
    heard = None
    heard_at = time.monotonic()
    while True:
        if tally["agreed"]:
            for _ in range(tally["steps"] - count):
                yield _padding_batch(ops, template)
            return
        tally = report(count + 1, True)
        if tally["granted"]:
            count += 1
            yield _padding_batch(ops, template)
        elif not tally["agreed"]:
            now = time.monotonic()
            state = (tally["max_count"], tally["reported"], tally["done"])
            if state != heard:
                heard, heard_at = state, now
            elif now - heard_at > timeout:
                raise shardq.DeadlineExceededError(
                    f"equal_steps: participant {participant!r} has no batch left and waited "
                    f"{now - heard_at:.0f} s for the others of pass {key!r} of queue "
                    f"{queue.name!r} with no report from any of them: {tally['done']} of "
                    f"{participants} participants done, {tally['reported']} ever reported, "
                    f"the most batches reported {tally['max_count']} (this one: {count}). "
                    f"A participant that died or never started keeps the others waiting; "
                    f"restart the job, or raise steps_timeout if one step can take longer")
            time.sleep(_STEPS_POLL)


def _world_size():
    """torch.distributed's world size when it is initialised, else
    WORLD_SIZE (1 when unset)."""
    import sys
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    return int(os.environ.get("WORLD_SIZE", "1"))


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

def _swap_parse_split(ops):
    """parse then split == split then parse: both pipelines split batches
    of records and parse each replica's batch."""
    ops = list(ops)
    for i in range(len(ops) - 1):
        if ops[i][0] == "parse_example" and ops[i + 1][0] == "split":
            ops[i], ops[i + 1] = ops[i + 1], ops[i]
    return ops


def _batch_size_at_end(ops, batch_size=None):
    """The batch size of the elements after ``ops`` (starting from elements
    batched by ``batch_size``): known after a batch, kept through shuffle and
    prefetch (as the C++ Distribute requires), None otherwise."""
    for name, *args in ops:
        if name == "batch":
            batch_size = args[0]
        elif name not in ("shuffle", "prefetch"):
            batch_size = None
    return batch_size


def _check_splits(*op_lists):
    """INVALID_ARGUMENT, as the C++ Distribute, for a split whose input is
    not batched by batch() (optionally followed by shuffle or prefetch) or
    whose batch size is not a multiple of its replicas."""
    batch_size = None
    for ops in op_lists:
        for name, *args in ops:
            if name == "split":
                replicas = args[0]
                if batch_size is None:
                    raise shardq.InvalidArgumentError(
                        "split: its input must be batched by batch() (optionally followed "
                        "by shuffle or prefetch), so that the global batch size is known")
                if batch_size % replicas != 0:
                    raise shardq.InvalidArgumentError(
                        f"split: replicas = {replicas} must be a divisor of the batch size "
                        f"{batch_size}")
            batch_size = _batch_size_at_end([(name, *args)], batch_size)


def _plan(ops):
    """Splits ``ops`` into the prefix the C++ pipeline builds and the rest,
    which runs in Python (from the first Python map, or a stage C++ cannot
    apply to the element at that point)."""
    ops = _swap_parse_split(ops)
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
# The same semantics as the C++ stages they stand for (a Python map, and
# whatever follows it, runs here).

def _python_stages(it, ops, batch_size=None, delivery=None, cancel=None):
    """Chains the generators of ``ops`` over ``it``, whose elements are
    batches of ``batch_size`` rows when it is not None. With ``delivery``,
    ``it`` is _py_stages.tracked_source's pairs, and each element counts as
    delivered as it is yielded (see _py_stages.Delivery). ``cancel``: the
    native iterator's under ``it``, for a Python prefetch."""
    _check_splits([("batch", batch_size, False)] if batch_size else [], ops)
    for i, (name, *args) in enumerate(ops):
        if delivery is not None:
            it = _py_stages.tracked_stage(name, it, args, batch_size, delivery, cancel,
                                          short_ok=not _drops_short_batches(ops[i + 1:]))
        elif name == "split":
            it = _py_split(it, batch_size, *args)
        elif name == "prefetch":
            it = _PY_STAGES[name](it, *args, cancel)
        else:
            it = _PY_STAGES[name](it, *args)
        batch_size = _batch_size_at_end([(name, *args)], batch_size)
    return it if delivery is None else _py_stages.delivered(it, delivery)


def _drops_short_batches(ops):
    """Whether a split that drops short batches takes the batches made
    before ``ops`` (no other batch in between)."""
    for name, *args in ops:
        if name == "batch":
            return False
        if name == "split" and args[1] == "drop":
            return True
    return False


def _native_then_python(native, ops, batch_size, consumed):
    """The Python stages ``ops`` over a native iterator. ``consumed``
    (complete="consumed"; the iterator was made with defer < 0): its
    elements' records count as consumed only as what they became reaches
    the user, so none waiting in a Python buffer is lost if the pass stops."""
    if not consumed:
        return _python_stages(_closing(native), ops, batch_size, cancel=native.cancel)
    delivery = _py_stages.Delivery(native)
    return _python_stages(_py_stages.tracked_source(native, delivery), ops, batch_size,
                          delivery, native.cancel)


def from_queue(queue, reader="tfrecord", on_corrupt="fail", read_size=256, *,
               cycle_length=None, num_parallel_reads=1, complete="auto", _pass_siblings="",
               _defer=0,
               equal_steps=False, participants=None, participant=None,
               steps_timeout=STEPS_TIMEOUT):
    """The records of a WorkQueue's items, read by the C++ pipeline: bytes
    for "text" and "tfrecord", dict rows (column -> value) for "table".

    ``cycle_length``: items read at once, taking turns (default: up to 4,
    at most the queue's num_clients); ``num_parallel_reads``: threads
    reading them; ``read_size``: rows fetched per query for tables;
    ``on_corrupt``: "fail" or "skip" corrupt TFRecord regions (skipped ones
    are counted in the iterator's stats(): corrupt_regions, skipped_bytes);
    ``complete``: "consumed", "read" or "auto" (see the module docstring).
    The pipeline must be the queue's only taker (no take() on it
    meanwhile). ``_defer`` (shardq.torch): the records of a batch count as
    consumed only once that many more were handed out, or when the pipeline
    cannot go on without their items (Iterator::DeferConsumption). ``_pass_siblings``
    (shardq.torch): the worker-id prefix of
    the other DataLoader workers of this pass; the pipeline then ends, as
    the queue's end, once it holds nothing and they hold the rest.
    ``equal_steps``: see the module docstring; ``participants`` (default:
    the world size, torch.distributed's or WORLD_SIZE) iterate datasets
    over the queue, each named ``participant`` (default: the queue's
    worker id), and the chain must end in batches; a participant with no
    batch left raises DeadlineExceededError once none of the others has
    reported anything for ``steps_timeout`` seconds (one died or never
    started)."""
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
    steps = None
    if equal_steps:
        participants = _world_size() if participants is None else int(participants)
        if participants < 1:
            raise shardq.InvalidArgumentError(f"participants must be >= 1, got {participants}")
        steps_timeout = float(steps_timeout)
        if not steps_timeout > 0:
            raise shardq.InvalidArgumentError(
                f"steps_timeout must be > 0 seconds, got {steps_timeout}")
        steps = (participants, str(participant) if participant else queue.worker_id,
                 steps_timeout)
    return Dataset(None, (), dict(queue=queue, reader=reader, on_corrupt=on_corrupt,
                                  read_size=int(read_size), cycle_length=int(cycle_length),
                                  num_parallel_reads=int(num_parallel_reads),
                                  complete_when_read=complete == "read",
                                  siblings=str(_pass_siblings), epoch=None,
                                  defer=int(_defer),
                                  equal_steps=steps))
