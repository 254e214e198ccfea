"""shardq.data: from_queue with shuffle, batch, map(parse_example),
prefetch and split."""
import uuid

import numpy as np
import pytest

import shardq
from example_data import write_files


def queue_of(files, **kw):
    return shardq.WorkQueue(files, name=f"data-{uuid.uuid4().hex[:8]}", **kw)


def test_pipeline_reads_every_record_once_per_epoch_as_parsed_batches(tmp_path):
    files = write_files(tmp_path, 3, 30, width=4)
    spec = {"x": shardq.FixedLen((4,), "float32"), "y": shardq.FixedLen((), "int64")}
    # Items complete only once their records are consumed, so the queue
    # must let this worker hold enough of them to fill a batch.
    queue = queue_of(files, num_epochs=2, num_slices=9, num_clients=16)
    ds = (shardq.data.from_queue(queue, reader="tfrecord")
          .shuffle(50, seed=1).batch(16).map(lambda b: shardq.parse_example(b, spec)).prefetch(2))
    labels = []
    for batch in ds:
        assert batch["x"].shape == (len(batch["y"]), 4)
        labels += batch["y"].tolist()
    assert sorted(labels) == sorted(list(range(90)) * 2)


def test_shuffle_is_deterministic_with_a_seed(tmp_path):
    files = write_files(tmp_path, 1, 40, width=1)
    runs = []
    for _ in range(2):
        ds = shardq.data.from_queue(queue_of(files, shuffle=False), reader="tfrecord").shuffle(
            10, seed=7)
        runs.append(list(ds))
    assert runs[0] == runs[1] and len(runs[0]) == 40


def test_split_gives_every_replica_the_same_number_of_rows():
    # The C++ Distribute's semantics (one split): a short batch is dropped
    # whole, or spread in contiguous runs and padded.
    ds = shardq.data.Dataset(lambda: iter(range(10))).batch(4).split(2)
    assert list(ds) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    padded = list(shardq.data.Dataset(lambda: iter(range(5))).batch(4).split(2, remainder="pad"))
    assert padded == [[([0, 1], [True, True]), ([2, 3], [True, True])],
                      [([4, None], [True, False]), ([None, None], [False, False])]]
    records = list(shardq.data.Dataset(lambda: iter([b"a", b"b", b"c"])).batch(6)
                   .split(3, remainder="pad"))
    assert records == [[([b"a", b""], [True, False]), ([b"b", b""], [True, False]),
                        ([b"c", b""], [True, False])]]


def test_split_needs_a_batch_whose_size_the_replicas_divide():
    # Refused as the C++ stage refuses it, over a queue and in Python.
    with pytest.raises(shardq.InvalidArgumentError, match="divisor of the batch size 5"):
        iter(shardq.data.Dataset(lambda: iter(range(5))).batch(5).split(2))
    with pytest.raises(shardq.InvalidArgumentError, match="batched by batch"):
        iter(shardq.data.Dataset(lambda: iter([[1, 2]])).split(2))
    with pytest.raises(shardq.InvalidArgumentError, match="batched by batch"):
        iter(shardq.data.Dataset(lambda: iter(range(4))).batch(2).map(list).split(2))


def _cpp_and_python(files, build):
    """The elements of build(from_queue(...)) with the stages in C++, and
    with them in Python (after an identity Python map), over the same
    records in the same order (one item read at a time, queue order fixed)."""
    out = []
    for python in (False, True):
        queue = queue_of(files, shuffle=False, num_slices=len(files), num_clients=8)
        ds = shardq.data.from_queue(queue, reader="tfrecord", cycle_length=1)
        if python:
            ds = ds.map(lambda r: r)
        it = iter(build(ds))
        assert isinstance(it, shardq._shardq._PipelineIterator) != python
        out.append(list(it))
    return out


@pytest.mark.parametrize("remainder", ["drop", "pad"])
def test_cpp_and_python_split_agree(tmp_path, remainder):
    files = write_files(tmp_path, 2, 11, width=2)  # 22 records: 2 batches of 8 + 6
    cpp, py = _cpp_and_python(files, lambda d: d.batch(8).split(4, remainder=remainder))
    assert len(cpp) == (3 if remainder == "pad" else 2)
    assert cpp == py
    if remainder == "pad":
        last = cpp[-1]
        assert [len(rows) for rows, _ in last] == [2, 2, 2, 2]
        assert [mask for _, mask in last] == [[True, True], [True, True], [True, False],
                                              [True, False]]
        assert last[2][0][1] == b"" and last[3][0][1] == b""


def test_cpp_and_python_parsed_split_agree(tmp_path):
    files = write_files(tmp_path, 2, 11, width=2)
    spec = {"x": shardq.FixedLen((2,), "float32"), "y": shardq.FixedLen((), "int64")}
    cpp, py = _cpp_and_python(
        files, lambda d: d.batch(8).parse_example(spec).split(4, remainder="pad"))
    assert len(cpp) == len(py) == 3
    for step_c, step_p in zip(cpp, py):
        for (feat_c, mask_c), (feat_p, mask_p) in zip(step_c, step_p):
            assert mask_c.dtype == mask_p.dtype == np.bool_
            np.testing.assert_array_equal(mask_c, mask_p)
            for k in spec:
                np.testing.assert_array_equal(feat_c[k], feat_p[k])  # padding: a copy of a real row


def test_errors_reach_the_consumer_through_prefetch(tmp_path):
    files = write_files(tmp_path, 1, 5, width=1)

    def boom(x):
        raise ValueError("bad element")
    ds = shardq.data.from_queue(queue_of(files), reader="tfrecord").map(boom).prefetch(2)
    with pytest.raises(ValueError, match="bad element"):
        list(ds)
    with pytest.raises(ValueError, match="reader"):
        shardq.data.from_queue(queue_of(files), reader="csv")
