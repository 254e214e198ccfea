"""TensorFlow 1.x's QueueRunner, Coordinator and tf.train.batch family
over shardq's queues (shardq/queues.py, whose docstring has an example).
A runner's threads are C++ threads (include/shardq/pipeline/coordinator.h):
they read records with shardq's readers without the GIL (``key, value =
reader.read(queue)``), or call a Python function or iterator for each
element.
"""
import atexit
import contextlib
import sys
import threading
import time
import weakref

from shardq import _shardq
from shardq.errors import InvalidArgumentError, OutOfRangeError, _from_code
from shardq.queues import _BYTES, FIFOQueue, RandomShuffleQueue

__all__ = ["QueueRunner", "Coordinator", "add_queue_runner", "start_queue_runners", "batch",
           "batch_join", "shuffle_batch", "shuffle_batch_join", "Batches"]


# --- Reading records in C++ threads ---

class _ReadComponent:
    """The key or the value of ``reader.read(source)``: names a component
    of each record that a queue runner's C++ threads read."""

    def __init__(self, read, index):
        self._read, self._index = read, index

    def __repr__(self):
        return f"<{self._read.reader} record {'key' if self._index == 0 else 'value'}>"


class _Read:
    """``key, value = reader.read(source)``: what TF's reader.read() gives,
    here a description of a record stream that shuffle_batch, batch and
    QueueRunner read from (unpack it, or pass it whole for (key, value))."""

    def __init__(self, source, reader, on_corrupt):
        self.source, self.reader, self.on_corrupt = source, reader, on_corrupt
        self._parts = (_ReadComponent(self, 0), _ReadComponent(self, 1))

    def __iter__(self):
        return iter(self._parts)

    def __getitem__(self, index):
        return self._parts[index]

    def __len__(self):
        return 2


def _reader_read(kind):
    def read(self, queue):
        """(key, value) of the next record of ``queue`` (a WorkQueue or its
        input_producer()), for shuffle_batch, batch and QueueRunner: their
        C++ threads read the records, each with a reader of this kind."""
        on_corrupt = "fail"
        return _Read(queue, kind, on_corrupt)
    return read


def _read_op(tensors):
    """(native _ReadOp, structure) when ``tensors`` are components of one
    reader.read(); None when they are something else."""
    if isinstance(tensors, _Read):
        tensors = list(tensors)
    if isinstance(tensors, _ReadComponent):
        items, form = [tensors], "single"
    elif isinstance(tensors, dict):
        items, form = list(tensors.values()), "dict"
    elif isinstance(tensors, (list, tuple)):
        items, form = list(tensors), "tuple"
    else:
        return None
    if not items or not all(isinstance(t, _ReadComponent) for t in items):
        if any(isinstance(t, _ReadComponent) for t in items):
            raise InvalidArgumentError("a batch mixes reader.read() outputs with other values")
        return None
    reads = {id(t._read): t._read for t in items}
    if len(reads) != 1:
        raise InvalidArgumentError("a batch's components come from one reader.read()")
    read = next(iter(reads.values()))
    op = _shardq._ReadOp(read.source, read.reader, read.on_corrupt, [t._index for t in items])
    return op, form


# --- QueueRunner and Coordinator ---

class _Producer:
    """A Python enqueue op run by a C++ runner thread: the user's callable
    (or iterator) gives an element (or with enqueue_many, a batch); None,
    StopIteration or OutOfRangeError end the thread."""

    def __init__(self, queue, op, enqueue_many, runner):
        self._queue, self._runner, self._many = queue, runner, enqueue_many
        self._pending = []
        if callable(op):
            self._next = op
        else:
            iterator, lock = iter(op), threading.Lock()

            def next_locked():  # one iterator may feed several threads
                with lock:
                    return next(iterator)
            self._next = next_locked

    def __call__(self):
        try:
            while not self._pending:
                try:
                    vals = self._next()
                except (StopIteration, OutOfRangeError):
                    return None
                if vals is None:
                    return None
                if not self._many:
                    return self._queue._pack(vals, batch=False)
                priorities, components = self._queue._pack(vals, batch=True)
                n = len(components[0]) if components else 0
                for r in range(n):
                    self._pending.append((0 if priorities is None else int(priorities[r]),
                                          [c[r] for c in components]))
            return self._pending.pop(0)
        except BaseException as e:  # noqa: B902 - handed to the coordinator, then re-raised
            self._runner._failed(e)
            raise

    def native(self):
        def call():
            out = self()
            if out is None:
                return None
            priority, components = out
            return (0 if priority is None else int(priority), components)
        return call


_RUNNERS = []          # add_queue_runner's collection (TF's QUEUE_RUNNERS)
_LIVE = weakref.WeakSet()  # coordinators with threads, stopped at exit


class _RunnerThreads:
    """What create_threads / start_queue_runners return for a runner (its
    threads are C++ threads, joined by Coordinator.join)."""

    def __init__(self, runner, coord):
        self.runner, self.coord = runner, coord

    def start(self):
        self.runner._start(self.coord)

    def is_alive(self):
        return self.runner._started and not self.coord._native.join(0)

    def join(self, timeout=None):
        self.coord._native.join(timeout)

    def __repr__(self):
        return f"<queue runner threads of {self.runner.queue.name!r}>"


class QueueRunner:
    """Keeps ``queue`` filled by one C++ thread per enqueue op (TF's
    tf.train.QueueRunner). An enqueue op is the output of a shardq reader's
    ``read(source)`` (read in C++ without the GIL), or a callable / iterator
    giving the next element (called with the GIL). When every thread has
    run out the queue is closed, so consumers drain it and then get
    OutOfRangeError; an error in one thread stops the coordinator, closes
    the queue with cancel, and is raised by Coordinator.join."""

    def __init__(self, queue, enqueue_ops=None, close_op=None, cancel_op=None,
                 queue_closed_exception_types=None, name=None, enqueue_many=False):
        if not enqueue_ops:
            raise InvalidArgumentError("QueueRunner needs at least one enqueue op")
        self.queue, self.name = queue, name or f"{queue.name}_runner"
        self._ops = list(enqueue_ops)
        self._many = enqueue_many
        self._started = False
        self._coord = None
        self._errors = []

    def _failed(self, error):
        self._errors.append(error)
        if self._coord is not None:
            self._coord.request_stop(error)

    def _start(self, coord):
        if self._started:
            return
        producers = []
        for op in self._ops:
            read = _read_op(op)
            if read is not None:
                native_op, form = read
                self._adopt_form(form, len(native_op.picks))
                producers.append(native_op)
            else:
                producers.append(_Producer(self.queue, op, self._many, self).native())
        self._coord = coord
        native = _shardq._QueueRunner(self.queue, producers)
        native.start(coord._native)
        self._started = True
        coord._runners.append(self)
        _LIVE.add(coord)

    def _adopt_form(self, form, count):
        q = self.queue
        if q._dtypes is None:
            q._dtypes = [_BYTES] * count
        if q._form is None:
            q._form = "single" if form == "single" else "tuple"

    def create_threads(self, sess=None, coord=None, daemon=False, start=False):
        """Starts (with start=True) this runner's threads in ``coord`` (a
        Coordinator; None: a private one) and returns a handle for
        ``coord.join(threads)``; with start=False its ``start()`` does."""
        coord = coord or Coordinator()
        handle = _RunnerThreads(self, coord)
        if start:
            handle.start()
        return [handle]


def add_queue_runner(qr, collection=None):
    """Adds a QueueRunner for start_queue_runners (TF's collection)."""
    _RUNNERS.append(qr)


def start_queue_runners(sess=None, coord=None, daemon=True, start=True, collection=None):
    """Starts every added QueueRunner not started yet in ``coord`` and
    returns their thread handles (for ``coord.join(threads)``)."""
    coord = coord or Coordinator()
    threads = []
    for qr in list(_RUNNERS):
        if not qr._started:
            threads += qr.create_threads(sess, coord=coord, daemon=daemon, start=start)
    _RUNNERS[:] = [qr for qr in _RUNNERS if not qr._started]
    return threads


class Coordinator:
    """Stops a group of threads together (TF's tf.train.Coordinator): queue
    runners' C++ threads and Python threads given to ``join``.
    ``request_stop(ex)`` keeps the first exception that is not a clean stop
    (OutOfRangeError, or ``clean_stop_exception_types``) and ``join``
    raises it once the threads are done."""

    def __init__(self, clean_stop_exception_types=None):
        self._native = _shardq._ThreadCoordinator()
        self._clean = tuple(clean_stop_exception_types or (OutOfRangeError,))
        self._lock = threading.Lock()
        self._exception = None
        self._threads = set()
        self._runners = []
        self.joined = False

    def request_stop(self, ex=None):
        if isinstance(ex, tuple):  # sys.exc_info()
            ex = ex[1]
        if ex is not None and not isinstance(ex, self._clean):
            with self._lock:
                if self._exception is None:
                    self._exception = ex
        self._native.request_stop()

    def should_stop(self):
        return self._native.should_stop()

    def wait_for_stop(self, timeout=None):
        return self._native.wait_for_stop(timeout)

    @contextlib.contextmanager
    def stop_on_exception(self):
        """``with coord.stop_on_exception():`` any exception in the block
        requests a stop (and is kept for join) instead of propagating."""
        try:
            yield
        except BaseException:  # noqa: B902 - TF's contract: every exception
            self.request_stop(sys.exc_info())

    def register_thread(self, thread):
        with self._lock:
            self._threads.add(thread)

    def raise_requested_exception(self):
        with self._lock:
            if self._exception is not None:
                raise self._exception

    def join(self, threads=None, stop_grace_period_secs=120, ignore_live_threads=False):
        """Waits until every thread is done or a stop is requested, then
        gives the threads ``stop_grace_period_secs`` to finish: RuntimeError
        naming those still running (unless ignore_live_threads). Then raises
        the exception kept by request_stop, or a runner thread's error."""
        with self._lock:
            python_threads = [t for t in set(threads or ()) | self._threads
                              if isinstance(t, threading.Thread)]

        def all_done(wait):
            """Waits up to `wait` seconds for the threads; True if all ended."""
            if not self._native.join(wait):
                return False
            alive = [t for t in python_threads if t.is_alive()]
            if alive:
                alive[0].join(wait)
            return not any(t.is_alive() for t in python_threads)

        while not all_done(0.1) and not self._native.wait_for_stop(0.0):
            pass
        grace_end = time.monotonic() + stop_grace_period_secs
        while not all_done(max(0.0, min(0.1, grace_end - time.monotonic()))) and \
                time.monotonic() < grace_end:
            pass
        self.joined = True
        stragglers = [t.name for t in python_threads if t.is_alive()]
        if not self._native.join(0):
            stragglers.append("queue runner threads")
        if stragglers and not ignore_live_threads:
            raise RuntimeError(f"Coordinator stopped with threads still running: "
                               f"{', '.join(stragglers)}")
        self._raise_error()

    def _raise_error(self):
        self.raise_requested_exception()
        code, message = self._native.error()
        if code != 0:
            raise _from_code(code, message)


@atexit.register
def _stop_all():
    """Threads of a queue runner call Python: stop them before the
    interpreter goes away."""
    for coord in list(_LIVE):
        coord._native.request_stop()
        coord._native.join(5.0)


# --- tf.train.batch and friends ---

class Batches:
    """What batch / shuffle_batch / batch_join return: ``dequeue()`` gives
    the next batch, shaped like ``tensors`` (a list, a dict, or one value),
    where TF 1.x code ran ``sess.run(batch)``; iterating gives batches until
    the input is exhausted. Its QueueRunner is started by
    start_queue_runners, or by the first dequeue if nobody started it."""

    def __init__(self, queue, runner, batch_size, allow_smaller_final_batch, form, names):
        self.queue, self.runner = queue, runner
        self.batch_size = int(batch_size)
        self._up_to = bool(allow_smaller_final_batch)
        self._form, self._names = form, names

    def dequeue(self, timeout=None):
        if not self.runner._started:
            self.runner._start(Coordinator())
        try:
            if self._up_to:
                out = self.queue.dequeue_up_to(self.batch_size, timeout=timeout)
            else:
                out = self.queue.dequeue_many(self.batch_size, timeout=timeout)
        except OutOfRangeError:
            # A runner that failed closed the queue: its error, not the end.
            self.runner._coord._raise_error()
            raise
        if self._form == "single":
            return out
        if self._form == "dict":
            return out if isinstance(out, dict) else dict(zip(self._names, out))
        return list(out) if isinstance(out, tuple) else [out]

    def __iter__(self):
        while True:
            try:
                yield self.dequeue()
            except OutOfRangeError:
                return

    def __repr__(self):
        return f"<shardq batches of {self.batch_size} from {self.queue!r}>"


def _form_of(tensors):
    if isinstance(tensors, _Read):
        return "tuple", None
    if isinstance(tensors, dict):
        return "dict", list(tensors)
    if isinstance(tensors, (list, tuple)):
        return "tuple", None
    return "single", None


def _make_batches(queue, ops, batch_size, allow_smaller_final_batch, enqueue_many, form,
                  names):
    if queue._names is None and names is not None:
        queue._names, queue._form = names, "dict"
    runner = QueueRunner(queue, ops, enqueue_many=enqueue_many)
    add_queue_runner(runner)
    return Batches(queue, runner, batch_size, allow_smaller_final_batch, form, names)


def _ops_for(tensors, num_threads):
    """The enqueue ops for ``tensors``: a reader.read() output (one C++
    reader per thread) or a callable / iterator shared by the threads."""
    if _read_op(tensors) is not None:
        return [tensors] * num_threads
    if callable(tensors) or hasattr(tensors, "__next__") or hasattr(tensors, "__iter__") and \
            not isinstance(tensors, (list, tuple, dict)):
        return [tensors] * num_threads
    raise InvalidArgumentError(
        "tensors must be a reader's read() output (key, value), a list or dict of them, or a "
        "callable / iterator giving the next element (values in shardq are not graph tensors)")


def _check_batch_args(batch_size, num_threads, dynamic_pad):
    if int(batch_size) < 1:
        raise InvalidArgumentError(f"batch_size must be >= 1, got {batch_size}")
    if int(num_threads) < 1:
        raise InvalidArgumentError(f"num_threads must be >= 1, got {num_threads}")
    if dynamic_pad:
        raise InvalidArgumentError("dynamic_pad is not supported: pad in the enqueue op")


def batch(tensors, batch_size, num_threads=1, capacity=32, enqueue_many=False, shapes=None,
          dynamic_pad=False, allow_smaller_final_batch=False, shared_name=None, name=None):
    """Batches in input order (per thread) through a FIFOQueue filled by
    ``num_threads`` runner threads (TF's tf.train.batch)."""
    _check_batch_args(batch_size, num_threads, dynamic_pad)
    form, names = _form_of(tensors)
    queue = FIFOQueue(capacity, shapes=shapes, name=shared_name or name or "batch")
    return _make_batches(queue, _ops_for(tensors, num_threads), batch_size,
                         allow_smaller_final_batch, enqueue_many, form, names)


def batch_join(tensors_list, batch_size, capacity=32, enqueue_many=False, shapes=None,
               dynamic_pad=False, allow_smaller_final_batch=False, shared_name=None, name=None):
    """As batch, with one thread per entry of ``tensors_list`` (e.g. one
    reader each), all feeding one FIFOQueue (TF's tf.train.batch_join)."""
    _check_batch_args(batch_size, 1, dynamic_pad)
    form, names = _form_of(tensors_list[0])
    queue = FIFOQueue(capacity, shapes=shapes, name=shared_name or name or "batch_join")
    ops = [op for t in tensors_list for op in _ops_for(t, 1)]
    return _make_batches(queue, ops, batch_size, allow_smaller_final_batch, enqueue_many, form,
                         names)


def shuffle_batch(tensors, batch_size, capacity, min_after_dequeue, num_threads=1, seed=None,
                  enqueue_many=False, shapes=None, allow_smaller_final_batch=False,
                  shared_name=None, name=None):
    """Batches drawn at random from a RandomShuffleQueue of ``capacity``
    that keeps ``min_after_dequeue`` elements behind until its input ends
    (TF's tf.train.shuffle_batch)."""
    _check_batch_args(batch_size, num_threads, False)
    form, names = _form_of(tensors)
    queue = RandomShuffleQueue(capacity, min_after_dequeue, shapes=shapes, seed=seed,
                               name=shared_name or name or "shuffle_batch")
    return _make_batches(queue, _ops_for(tensors, num_threads), batch_size,
                         allow_smaller_final_batch, enqueue_many, form, names)


def shuffle_batch_join(tensors_list, batch_size, capacity, min_after_dequeue, seed=None,
                       enqueue_many=False, shapes=None, allow_smaller_final_batch=False,
                       shared_name=None, name=None):
    """shuffle_batch with one thread per entry of ``tensors_list``."""
    _check_batch_args(batch_size, 1, False)
    form, names = _form_of(tensors_list[0])
    queue = RandomShuffleQueue(capacity, min_after_dequeue, shapes=shapes, seed=seed,
                               name=shared_name or name or "shuffle_batch_join")
    ops = [op for t in tensors_list for op in _ops_for(t, 1)]
    return _make_batches(queue, ops, batch_size, allow_smaller_final_batch, enqueue_many, form,
                         names)


def _install_reader_read():
    """TF's ``key, value = reader.read(queue)`` on shardq's readers."""
    for cls, kind in ((_shardq.TextLineReader, "text"), (_shardq.TFRecordReader, "tfrecord")):
        cls.read = _reader_read(kind)


_install_reader_read()
