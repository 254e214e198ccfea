"""shardq for TensorFlow users: tf.data datasets over a shardq WorkQueue.

    import shardq, shardq.tf
    queue = shardq.WorkQueue(files, num_epochs=2, num_slices=80)
    ds = shardq.tf.dataset(queue, reader="tfrecord")   # records, read by shardq
    ds = ds.shuffle(1000).batch(32).map(parse)          # the rest is tf.data

``input_dataset(queue)`` gives the work items instead (each completed when
the next is requested), for tf.data's own readers; ``shardq.tf.data.WorkQueue``
is a WorkQueue whose ``input_dataset()`` is that dataset, so PAI's tf.data
examples run with only the import changed (``import shardq.tf as pai``):

    work_queue = pai.data.WorkQueue(files, num_epochs=2, shuffle=True)
    dataset = tf.data.TextLineDataset(work_queue.input_dataset())

(tf.data's readers read whole files: give such a queue no ``num_slices``;
with slices, read through ``dataset()``.)

This module imports without TensorFlow; its functions raise ImportError
naming what to install when TensorFlow is missing.
"""
import types

import shardq
from shardq import data as _data

__all__ = ["input_dataset", "dataset", "WorkQueue", "data"]


def _tensorflow():
    try:
        import tensorflow
    except ImportError as e:
        raise ImportError(
            "shardq.tf needs TensorFlow, which is not installed: pip install tensorflow "
            "(or tensorflow-cpu); shardq itself, shardq.data and shardq.torch work "
            "without it") from e
    return tensorflow


def input_dataset(queue):
    """A ``tf.data.Dataset`` of ``queue``'s work items (tf.string scalars:
    file names, or ``file?start=S&end=E`` slices). Each item is completed
    when the next one is requested, as ``queue.input_dataset()`` does; the
    dataset ends when every item of every epoch is completed."""
    tf = _tensorflow()

    def items():
        for item in queue.input_dataset():
            yield str(item).encode()
    return tf.data.Dataset.from_generator(items,
                                          output_signature=tf.TensorSpec((), tf.string))


def dataset(queue, reader="tfrecord", **options):
    """A ``tf.data.Dataset`` of the records of ``queue``'s items, read by
    shardq's C++ pipeline (``shardq.data.from_queue(queue, reader,
    **options)``): tf.string scalars, a text line or a TFRecord record each.
    Items are completed as their records are read, so every record of every
    epoch comes once; a second pass over a finished queue raises."""
    tf = _tensorflow()
    if reader not in ("text", "tfrecord"):
        raise shardq.InvalidArgumentError(
            f"shardq.tf.dataset reads 'text' or 'tfrecord' records, got {reader!r}")
    records = _data.from_queue(queue, reader=reader, **options)
    return tf.data.Dataset.from_generator(lambda: iter(records),
                                          output_signature=tf.TensorSpec((), tf.string))


class WorkQueue(shardq.WorkQueue):
    """A shardq.WorkQueue (same arguments, PAI's order) whose
    ``input_dataset()`` is a ``tf.data.Dataset`` of work items, as PAI's
    ``pai.data.WorkQueue`` is."""

    def input_dataset(self):
        return input_dataset(_Items(self))


class _Items:
    """The plain item iterator of a shardq.tf.WorkQueue."""

    def __init__(self, queue):
        self._queue = queue

    def input_dataset(self):
        return shardq.WorkQueue.input_dataset(self._queue)


# ``import shardq.tf as pai`` then ``pai.data.WorkQueue(...)``.
data = types.SimpleNamespace(WorkQueue=WorkQueue)
