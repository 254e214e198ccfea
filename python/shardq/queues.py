"""TensorFlow 1.x's input queues, in shardq: the same classes and functions,
executed at once (as TF 2's eager ``tf.queue`` ops are) instead of inside a
session, with the queues and their runners' threads in C++.

    queue = shardq.WorkQueue(files, num_epochs=2, num_slices=40)
    reader = shardq.TFRecordReader()
    key, value = reader.read(queue.input_producer())     # read by C++ threads
    batches = shardq.shuffle_batch([key, value], batch_size=32, capacity=1000,
                                   min_after_dequeue=200, num_threads=2, seed=7)
    coord = shardq.Coordinator()
    threads = shardq.start_queue_runners(coord=coord)
    try:
        while not coord.should_stop():
            keys, values = batches.dequeue()             # TF: sess.run(batch)
    except shardq.OutOfRangeError:                       # every epoch read
        pass
    finally:
        coord.request_stop()
    coord.join(threads)

Elements are tuples (or dicts, with ``names``) of components, each ``bytes``
(TF's string) or a numpy array (Python numbers become arrays). ``dequeue()``
returns a tuple (the value itself for a one-component queue; a dict with
names); ``dequeue_many(n)`` stacks each component into an array of shape
``[n, ...]`` (a numpy object array of bytes for strings). Errors are TF's:
an enqueue to a closed queue raises ``CancelledError``, a dequeue from a
closed, drained queue ``OutOfRangeError``, and a ``timeout=`` that runs out
``DeadlineExceededError``. Blocking calls release the GIL; on the main
thread Ctrl-C interrupts them. QueueRunner, Coordinator and the batching
functions are in shardq/queue_runners.py.
"""
from shardq import _shardq
from shardq.errors import InvalidArgumentError

__all__ = ["FIFOQueue", "RandomShuffleQueue", "PriorityQueue"]

_BYTES = "bytes"  # the dtype of a string component


class _Numpy:
    """numpy, imported at the first use of a queue rather than by `import
    shardq` (about 70 ms, and OpenBLAS starts threads that spin a while: a
    process that only reads records pays for neither). The first attribute
    looked up replaces this stand-in with the module."""

    def __getattr__(self, name):
        import numpy
        globals()["np"] = numpy
        return getattr(numpy, name)


np = _Numpy()


def _dtype(d):
    """A numpy dtype or _BYTES from a numpy dtype, its name, a Python type
    or a tf.DType (tf.string is bytes)."""
    name = getattr(d, "name", None)
    if d in (bytes, str, "string", "bytes", "str") or name == "string":
        return _BYTES
    if hasattr(d, "as_numpy_dtype"):  # a tf.DType
        d = d.as_numpy_dtype
    try:
        dtype = np.dtype(d)
    except TypeError:
        raise InvalidArgumentError(f"not a dtype: {d!r}") from None
    if dtype.kind == "O":
        return _BYTES
    return dtype


def _dtype_of(value):
    if isinstance(value, (bytes, bytearray, str)):
        return _BYTES
    dtype = np.asarray(value).dtype
    return _BYTES if dtype.kind in "OSU" else dtype


class _QueueBase:
    """What every queue kind shares: the element structure (a single value,
    a tuple, or a dict with ``names``), dtypes and shapes, and the calls."""

    _priority = False

    def __init__(self, kind, capacity, dtypes, shapes, names, name, min_after_dequeue=0,
                 seed=None):
        if names is not None and isinstance(names, str):
            names = [names]
        if dtypes is not None and not isinstance(dtypes, (list, tuple)):
            dtypes = [dtypes]
        if shapes is not None and dtypes is not None and len(shapes) != len(dtypes):
            raise InvalidArgumentError(f"queue '{name}': {len(shapes)} shapes for "
                                       f"{len(dtypes)} dtypes")
        if names is not None and dtypes is not None and len(names) != len(dtypes):
            raise InvalidArgumentError(f"queue '{name}': {len(names)} names for "
                                       f"{len(dtypes)} dtypes")
        self._dtypes = None if dtypes is None else [_dtype(d) for d in dtypes]
        self._shapes = None if shapes is None else [None if s is None else tuple(s)
                                                    for s in shapes]
        self._names = None if names is None else list(names)
        # "single", "tuple" or "dict"; fixed by names, dtypes or the first element.
        self._form = "dict" if names is not None else None
        if self._form is None and dtypes is not None:
            self._form = "tuple" if len(dtypes) > 1 else None
        self._native = _shardq._TFQueue(kind, str(name), int(capacity), int(min_after_dequeue),
                                        0 if seed is None else int(seed) & (2**64 - 1))

    # --- structure ---

    def _flatten(self, vals):
        """The component values of one element (or batch), in order."""
        if isinstance(vals, dict):
            if self._form not in (None, "dict"):
                raise InvalidArgumentError(f"queue '{self.name}' holds {self._form}s, got a dict")
            if self._names is None:
                self._names = list(vals)
            if set(vals) != set(self._names):
                raise InvalidArgumentError(f"queue '{self.name}': element keys {sorted(vals)} "
                                           f"are not the queue's names {sorted(self._names)}")
            self._form = "dict"
            return [vals[n] for n in self._names]
        if self._form == "dict":
            raise InvalidArgumentError(f"queue '{self.name}' has names {self._names}: "
                                       f"enqueue a dict")
        if isinstance(vals, (tuple, list)) and not (
                self._form == "single" and self._dtypes is not None and len(vals) != 1):
            if self._form is None:
                self._form = "tuple" if len(vals) != 1 else "single"
            return list(vals)
        if self._form is None:
            self._form = "single"
        return [vals]

    def _unflatten(self, components):
        if self._form == "dict":
            return dict(zip(self._names, components))
        if self._form == "single" and len(components) == 1:
            return components[0]
        return tuple(components)

    def _check_count(self, values):
        if self._dtypes is None:
            self._dtypes = [_dtype_of(v) for v in values]
        if len(values) != len(self._dtypes):
            raise InvalidArgumentError(f"queue '{self.name}' has {len(self._dtypes)} components, "
                                       f"got {len(values)}")

    def _component(self, i, value, batch):
        """Component i as the native queue takes it: bytes (a list of bytes
        in a batch) or a C-contiguous array of the component's dtype."""
        dtype = self._dtypes[i]
        if dtype is _BYTES:
            def one(v):
                if isinstance(v, str):
                    return v.encode()
                if isinstance(v, (bytes, bytearray, np.bytes_)):
                    return bytes(v)
                raise InvalidArgumentError(f"queue '{self.name}': component {i} is bytes, "
                                           f"got {type(v).__name__}")
            return [one(v) for v in value] if batch else one(value)
        array = np.asarray(value)
        if not np.can_cast(array.dtype, dtype, casting="same_kind"):
            raise InvalidArgumentError(f"queue '{self.name}': component {i} is {dtype}, "
                                       f"got {array.dtype}")
        array = np.asarray(array, dtype=dtype, order="C")
        shape = None if self._shapes is None else self._shapes[i]
        got = array.shape[1:] if batch else array.shape
        if shape is not None and (len(got) != len(shape) or any(
                s is not None and s != g for s, g in zip(shape, got))):
            raise InvalidArgumentError(f"queue '{self.name}': component {i} must have shape "
                                       f"{shape}, got {got}")
        return array

    def _pack(self, vals, batch):
        values = self._flatten(vals)
        priority = None
        if self._priority:
            if self._form == "dict" or not values:
                raise InvalidArgumentError(f"priority queue '{self.name}': enqueue a tuple "
                                           f"(priority, value, ...)")
            priority, values = values[0], values[1:]
        self._check_count(values)
        return priority, [self._component(i, v, batch) for i, v in enumerate(values)]

    def _result(self, priority, components, batch):
        if batch:
            components = [_object_array(c) if isinstance(c, list) else c for c in components]
        else:
            components = [c[()] if isinstance(c, np.ndarray) and c.ndim == 0 else c
                          for c in components]
        if self._priority:
            p = np.asarray(priority, dtype=np.int64) if batch else priority
            return tuple([p] + components)
        return self._unflatten(components)

    # --- TF's QueueBase ---

    def enqueue(self, vals, timeout=None):
        """Adds one element, blocking while the queue is full."""
        priority, components = self._pack(vals, batch=False)
        if self._priority:
            self._native.enqueue(components, int(priority), timeout=timeout)
        else:
            self._native.enqueue(components, timeout=timeout)

    def enqueue_many(self, vals, timeout=None):
        """Adds the elements of a batch (each component sliced along its
        first dimension), in order, blocking while the queue is full."""
        priorities, components = self._pack(vals, batch=True)
        if self._priority:
            self._native.enqueue_many(components, [int(p) for p in priorities], timeout=timeout)
        else:
            self._native.enqueue_many(components, timeout=timeout)

    def dequeue(self, timeout=None):
        """Removes one element, blocking while none is available;
        OutOfRangeError once the queue is closed and drained."""
        priority, components = self._native.dequeue(timeout=timeout)
        return self._result(priority, components, batch=False)

    def dequeue_many(self, n, timeout=None):
        """Removes exactly n elements, stacked; OutOfRangeError if the
        queue is closed with fewer left (they stay for dequeue_up_to)."""
        priorities, components = self._native.dequeue_many(int(n), False, timeout=timeout)
        return self._result(priorities, components, batch=True)

    def dequeue_up_to(self, n, timeout=None):
        """As dequeue_many while the queue is open; once closed, returns
        what is left (1 to n); OutOfRangeError when nothing is."""
        priorities, components = self._native.dequeue_many(int(n), True, timeout=timeout)
        return self._result(priorities, components, batch=True)

    def close(self, cancel_pending_enqueues=False):
        """No more enqueues; consumers drain what is left. With
        cancel_pending_enqueues, blocked enqueues fail with CancelledError."""
        self._native.close(bool(cancel_pending_enqueues))

    def size(self):
        return self._native.size()

    def is_closed(self):
        return self._native.closed

    name = property(lambda self: self._native.name)
    capacity = property(lambda self: self._native.capacity)
    names = property(lambda self: self._names)
    shapes = property(lambda self: self._shapes)

    @property
    def dtypes(self):
        return None if self._dtypes is None else [
            bytes if d is _BYTES else d for d in self._dtypes]

    def __repr__(self):
        return (f"shardq.{type(self).__name__}(name={self.name!r}, capacity={self.capacity}, "
                f"size={self.size()})")


def _object_array(values):
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


class FIFOQueue(_QueueBase):
    """First in, first out (TF's tf.queue.FIFOQueue). ``dtypes`` (numpy
    dtypes, their names, ``bytes``/"string", or tf.DTypes) and ``shapes``
    are optional: without them the first element fixes the structure."""

    def __init__(self, capacity, dtypes=None, shapes=None, names=None, shared_name=None,
                 name="fifo_queue"):
        super().__init__("fifo", capacity, dtypes, shapes, names, shared_name or name)


class RandomShuffleQueue(_QueueBase):
    """Dequeues a uniformly random element, keeping at least
    ``min_after_dequeue`` behind while open (TF's RandomShuffleQueue). The
    same ``seed`` and the same sequence of calls give the same order."""

    def __init__(self, capacity, min_after_dequeue, dtypes=None, shapes=None, names=None,
                 seed=None, shared_name=None, name="random_shuffle_queue"):
        super().__init__("shuffle", capacity, dtypes, shapes, names, shared_name or name,
                         min_after_dequeue=min_after_dequeue, seed=seed)


class PriorityQueue(_QueueBase):
    """Dequeues the smallest priority first, in enqueue order among equal
    ones (TF's PriorityQueue). Elements are tuples ``(priority, value,
    ...)`` with an int priority; dequeue returns them the same way."""

    _priority = True

    def __init__(self, capacity, types=None, shapes=None, names=None, shared_name=None,
                 name="priority_queue"):
        if names is not None:
            raise InvalidArgumentError("PriorityQueue elements are tuples (priority, ...), "
                                       "not dicts")
        super().__init__("priority", capacity, types, shapes, None, shared_name or name)
        self._form = "tuple"
