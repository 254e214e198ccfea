"""shardq.data: from_queue with shuffle, batch, map(parse_example),
prefetch and split."""
import uuid

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
    ds = shardq.data.Dataset(lambda: iter(range(10))).batch(4).split(2)
    assert list(ds) == [[[0, 1], [2, 3]], [[4, 5], [6, 7]], [[8], [9]]]
    padded = list(shardq.data.Dataset(lambda: iter(range(5))).batch(5).split(2, remainder="pad"))
    assert padded == [[([0, 1, 2], [True, True, True]), ([3, 4, 4], [True, True, False])]]


def test_errors_reach_the_consumer_through_prefetch(tmp_path):
    files = write_files(tmp_path, 1, 5, width=1)

    def boom(x):
        raise ValueError("bad element")
    ds = shardq.data.from_queue(queue_of(files), reader="tfrecord").map(boom).prefetch(2)
    with pytest.raises(ValueError, match="bad element"):
        list(ds)
    with pytest.raises(ValueError, match="reader"):
        shardq.data.from_queue(queue_of(files), reader="csv")
