"""Batches from DataLoader workers to the training process through
shared-memory slots that both keep mapped (used by shardq.torch).

torch sends a tensor from a worker by moving its storage into a new
shared-memory segment and passing the segment's file descriptor, with a
round trip to the worker for each storage; on two cores that alone cost
more than reading and parsing the batch. Here each batch's arrays are in a
slot: a shared-memory storage the worker keeps and reuses. The worker's
C++ parse_example stage parses a batch straight into a free slot (through
the native _SlotPool, which knows the slots); a batch parsed elsewhere
(no free slot was large enough) is copied into one. The first
time a slot travels torch sends its storage as usual; after that only
(worker pid, slot id, layout) travel, and the training process takes the
mapping it kept. The batch arrives as a plain dict of tensor views of the
slot (no copy). When the last tensor viewing a slot's batch is gone, the
training process marks the slot free (a byte of the slot, which both
processes see) and the worker writes a later batch there. A worker whose
slots are all in use (the loop keeps its batches) makes another, so
nothing is ever overwritten while in use; it keeps as many slots as it
has ever had in use at once, and _SPARE more (a worker whose batches are
held longer at times, a larger prefetch_factor or a slow step, then never
drops slots only to make them again: a new shared-memory segment, sent to
the training process once more), and tells the training process, with
its next batch, which ones it dropped.

Each slot starts with a header of _HEADER bytes: byte 0 is 1 while the
training process may read the slot, byte 1 is 1 once it keeps the slot
mapped (so the storage need not travel again).
"""
import os
import weakref

import numpy as np
import torch

import shardq

_HEADER = 64  # bytes; the batch's features start after it, each at a multiple of _ALIGN
_ALIGN = 64
_SPARE = 4  # slots a worker keeps beyond the most it has had in use at once
_IN_USE, _MAPPED = 0, 1  # header bytes


def _storage_of(tensor):
    return tensor.untyped_storage() if hasattr(tensor, "untyped_storage") \
        else tensor.storage().untyped()


class _Slot:
    """A worker's reusable shared-memory storage for one batch."""

    def __init__(self, slot_id, capacity):
        self.id = slot_id
        self.capacity = capacity
        self.storage = torch.UntypedStorage._new_shared(_HEADER + capacity)
        self.flat = torch.empty(0, dtype=torch.uint8).set_(self.storage)
        self.header = self.flat[:_HEADER].numpy()
        self.header[:] = 0
        self.base = self.storage.data_ptr()
        self.sent = False  # the batch now in it was pickled once


class _Slots:
    """One worker process's slots (made in that process: never inherited).
    ``pool`` (the native _SlotPool) knows them too: the worker's C++
    parse_example stage parses batches straight into free ones, and every
    claim of a slot, here or there, goes through it."""

    def __init__(self):
        self.pid = os.getpid()
        self.pool = shardq._shardq._SlotPool()
        self.slots = []
        self.by_id = {}
        self.by_base = {}  # storage data_ptr -> _Slot
        self.next_id = 0
        self.dropped = []  # ids of slots dropped since the last batch sent
        self.peak_in_use = 0  # the most slots in use at once so far
        # Set when the worker's parse_example stage parses into the pool
        # (shardq.torch): a batch it could not place then means a slot too
        # few, so the copy goes to a new one (the pool grows until the parser
        # finds one free; claimed() drops the free ones beyond _SPARE).
        self.parsing = False

    def acquire(self, nbytes):
        """A free slot of at least ``nbytes`` (a new one when ``parsing``),
        marked in use."""
        sid = -1 if self.parsing else self.pool.claim(nbytes)
        if sid >= 0:
            slot = self.by_id[sid]
        else:
            slot = _Slot(self.next_id, nbytes)
            self.next_id += 1
            slot.header[_IN_USE] = 1
            self.slots.append(slot)
            self.by_id[slot.id] = slot
            self.by_base[slot.base] = slot
            self.pool.add(slot.id, slot.base, slot.capacity)
        self.claimed(slot)
        return slot

    def claimed(self, slot):
        """``slot`` now holds a new batch (claimed here or by the parser):
        drops the free slots beyond the most ever in use at once plus
        _SPARE."""
        slot.sent = False
        free = [s for s in self.slots if s is not slot and s.header[_IN_USE] == 0]
        in_use = len(self.slots) - len(free)
        self.peak_in_use = max(self.peak_in_use, in_use)
        # Slots are made only when none free is large enough: beyond that
        # peak there are free ones only when batches grew; the smallest go.
        free.sort(key=lambda s: s.capacity, reverse=True)
        for extra in free[self.peak_in_use + _SPARE - in_use:]:
            if self.pool.remove(extra.id):  # false: the parser just claimed it
                self.slots.remove(extra)
                del self.by_id[extra.id]
                del self.by_base[extra.base]
                self.dropped.append(extra.id)

    def holding(self, array):
        """The slot whose batch area ``array``'s bytes lie in, or None."""
        start = array.__array_interface__["data"][0]
        for s in self.slots:
            if s.base + _HEADER <= start and start + array.nbytes <= s.base + _HEADER + s.capacity:
                return s
        return None


_slots = None


def _worker_slots():
    global _slots
    if _slots is None or _slots.pid != os.getpid():
        _slots = _Slots()
    return _slots


def _to_torch(v):
    """A parsed feature as torch sees it: a tensor over the numpy buffer
    (no copy), a list for an object (bytes) array, a Ragged of those for a
    VarLen feature."""
    if isinstance(v, shardq.Ragged):
        return shardq.Ragged(_to_torch(v.values), torch.from_numpy(v.row_lengths))
    return torch.from_numpy(v) if v.dtype != object else list(v)


def _placed(slots, arrays):
    """The slot the parser parsed these arrays into (they all lie in its
    batch area), or None."""
    fixed = [a for a in arrays.values() if not isinstance(a, shardq.Ragged) and a.dtype != object]
    if not fixed or not all(a.flags.c_contiguous for a in fixed):
        return None  # a strided view is not the bytes from its start on: copied
    slot = slots.holding(fixed[0])
    if slot is None or any(slots.holding(a) is not slot for a in fixed[1:]):
        return None
    return slot


def pack(arrays):
    """In a DataLoader worker: the parser's numpy arrays as a SlotBatch of
    tensor views of one slot: the slot they were parsed into
    (parse_example with the worker's slots), or else a slot they are copied
    into. Object arrays as lists and VarLen features as a Ragged of tensors
    (these travel as torch sends them)."""
    slots = _worker_slots()
    slot = _placed(slots, arrays)
    if slot is not None:
        slots.claimed(slot)
        out = SlotBatch()
        for name, a in arrays.items():
            if isinstance(a, shardq.Ragged) or a.dtype == object:
                out[name] = _to_torch(a)
                continue
            start = a.__array_interface__["data"][0] - slot.base
            out[name] = slot.flat[start:start + a.nbytes].view(
                torch.from_numpy(a).dtype).view(a.shape)
        return out
    offsets = {}
    total = 0
    for name, a in arrays.items():
        if not isinstance(a, shardq.Ragged) and a.dtype != object:
            offsets[name] = total
            total += -(-a.nbytes // _ALIGN) * _ALIGN
    slot = slots.acquire(max(total, 1))
    out = SlotBatch()
    for name, a in arrays.items():
        if name not in offsets:
            out[name] = _to_torch(a)
            continue
        start = _HEADER + offsets[name]
        dst = slot.flat[start:start + a.nbytes].view(torch.from_numpy(a).dtype).view(a.shape)
        np.copyto(dst.numpy(), a, casting="no")
        out[name] = dst
    # A slot the parser placed (part of) this batch in, now copied out: free
    # again (the arrays over it are the pipeline's, dropped after this).
    for a in arrays.values():
        if isinstance(a, np.ndarray) and a.dtype != object:
            held = slots.holding(a)
            if held is not None and held is not slot:
                slots.pool.release(held.id)
    return out


class SlotBatch(dict):
    """A worker's batch whose tensors are views of one slot. Pickled (to
    the training process) it is the slot's id and the layout of the
    tensors, plus the slot's storage the first time; it arrives as a plain
    dict (see _rebuild). The DataLoader rebuilds it from a dict of the same
    tensors (default_convert), so the slot is found from them."""

    def __copy__(self):
        return SlotBatch(self)

    def __deepcopy__(self, memo):
        return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in self.items()}

    def __reduce__(self):
        slots = _worker_slots()
        tensors = [v for v in self.values() if isinstance(v, torch.Tensor)]
        slot = slots.by_base.get(_storage_of(tensors[0]).data_ptr()) if tensors else None
        if slot is None or slot.sent or slot.header[_IN_USE] == 0:
            return _as_dict(self, slot)
        layout = []
        end = _HEADER
        for name, v in self.items():
            if not isinstance(v, torch.Tensor) or _storage_of(v).data_ptr() != slot.base:
                if isinstance(v, torch.Tensor) or isinstance(v, shardq.Ragged):
                    # Only values of this batch's making travel as they are.
                    if any(isinstance(t, torch.Tensor) and _storage_of(t).data_ptr() in
                           slots.by_base for t in _tensors_in(v)):
                        return _as_dict(self, slot)
                layout.append((name, None, None, 0, 0, v))
                continue
            offset = v.data_ptr() - slot.base
            nbytes = v.numel() * v.element_size()
            if not v.is_contiguous() or offset < _HEADER or offset + nbytes > slot.storage.nbytes():
                return _as_dict(self, slot)
            layout.append((name, v.dtype, tuple(v.shape), offset, nbytes, None))
            end = max(end, offset + nbytes)
        slot.sent = True
        storage = None if slot.header[_MAPPED] else slot.storage
        dropped, slots.dropped = slots.dropped, []
        return (_rebuild, (slots.pid, slot.id, storage, end, tuple(layout), tuple(dropped)))


def _tensors_in(v):
    return [v.values, v.row_lengths] if isinstance(v, shardq.Ragged) else [v]


def _as_dict(batch, slot):
    """The batch as torch would send a plain dict, with copies of what a
    slot holds (the slot is then free again: the worker reuses it)."""
    out = {}
    for k, v in batch.items():
        out[k] = v.clone() if slot is not None and isinstance(v, torch.Tensor) and \
            _storage_of(v).data_ptr() == slot.base else v
    if slot is not None and not slot.sent:
        slot.header[_IN_USE] = 0
    return (dict, (out,))


# --- In the training process ---

_mapped = {}  # (worker pid, slot id) -> the slot as a uint8 numpy array


def _release(flat):
    flat[_IN_USE] = 0


def _forget_dead_workers(pid):
    """Drops the slots of worker processes that are gone (a DataLoader
    starts new workers for every pass)."""
    for other in {p for p, _ in _mapped if p != pid}:
        try:
            os.kill(other, 0)
        except ProcessLookupError:
            for key in [k for k in _mapped if k[0] == other]:
                del _mapped[key]
        except PermissionError:
            pass


def _rebuild(pid, slot_id, storage, end, layout, dropped):
    for gone in dropped:
        _mapped.pop((pid, gone), None)
    key = (pid, slot_id)
    if storage is not None:
        _forget_dead_workers(pid)
        flat = torch.empty(0, dtype=torch.uint8).set_(storage).numpy()
        flat[_MAPPED] = 1
        _mapped[key] = flat
    else:
        flat = _mapped.get(key)
        if flat is None:
            raise shardq.FailedPreconditionError(
                f"batch slot {slot_id} of DataLoader worker {pid} is not mapped here "
                "(a batch of a worker's was unpickled by a process other than its loop)")
    # This batch's own view: when every tensor over it is gone, the slot is free.
    mine = flat[:end]
    weakref.finalize(mine, _release, flat)
    base = torch.from_numpy(mine)
    out = {}
    for name, dtype, shape, offset, nbytes, value in layout:
        out[name] = value if dtype is None else \
            base[offset:offset + nbytes].view(dtype).view(shape)
    return out
