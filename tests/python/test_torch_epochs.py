"""Epochs the torch way: set_epoch(e) before each pass reads epoch e once
(shardq.torch.WorkQueueDataset and shardq.data datasets)."""
import collections

import pytest

torch = pytest.importorskip("torch")

import shardq  # noqa: E402
import shardq.data  # noqa: E402
import shardq.torch  # noqa: E402
from example_data import write_files  # noqa: E402

FEATURES = {"y": shardq.FixedLen((), "int64")}


def _labels(loader):
    return [int(y) for batch in loader for y in batch["y"]]


def test_set_epoch_loop_reads_every_record_once_per_pass(tmp_path):
    _set_epoch_loop(tmp_path, workers=2)


def test_set_epoch_reaches_persistent_workers(tmp_path):
    # persistent_workers=True keeps the workers (and their copies of the
    # dataset) from the first pass: set_epoch must still reach them. It did
    # not: passes after the first read nothing, without an error.
    _set_epoch_loop(tmp_path, workers=2, persistent_workers=True)


def _set_epoch_loop(tmp_path, workers, **loader_args):
    files = write_files(tmp_path, 4, 25, width=4)
    dataset = shardq.torch.WorkQueueDataset(files, reader="tfrecord", features=FEATURES,
                                            batch_size=8, num_epochs=3, num_slices=12)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers,
                                         **loader_args)
    for epoch in range(3):
        dataset.set_epoch(epoch)
        assert sorted(_labels(loader)) == list(range(100)), f"epoch {epoch}"
    # The queue is finished: another pass raises rather than ending empty.
    with pytest.raises(shardq.FailedPreconditionError, match="earlier pass"):
        list(loader)


def test_without_set_epoch_one_pass_reads_every_epoch(tmp_path):
    files = write_files(tmp_path, 2, 10, width=4)
    dataset = shardq.torch.WorkQueueDataset(files, reader="tfrecord", features=FEATURES,
                                            batch_size=4, num_epochs=3, num_slices=4)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    counts = collections.Counter(_labels(loader))
    assert sorted(counts) == list(range(20)) and set(counts.values()) == {3}


def test_set_epoch_with_repeating_queue(tmp_path):
    files = write_files(tmp_path, 2, 10, width=4)
    dataset = shardq.torch.WorkQueueDataset(files, reader="tfrecord", features=FEATURES,
                                            batch_size=4, num_epochs=None, num_slices=4)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    for epoch in range(4):
        dataset.set_epoch(epoch)
        assert sorted(_labels(loader)) == list(range(20)), f"epoch {epoch}"


def test_set_epoch_refuses_an_epoch_the_queue_does_not_have(tmp_path):
    files = write_files(tmp_path, 1, 4, width=4)
    dataset = shardq.torch.WorkQueueDataset(files, reader="tfrecord", num_epochs=2)
    with pytest.raises(shardq.InvalidArgumentError, match="num_epochs=2"):
        dataset.set_epoch(2)
    with pytest.raises(shardq.InvalidArgumentError, match=">= 0"):
        dataset.set_epoch(-1)


def test_data_set_epoch_reads_one_epoch_per_pass(text_files):
    files = text_files(3, 20)
    queue = shardq.WorkQueue(files, num_epochs=3, num_slices=9, num_clients=8)
    ds = shardq.data.from_queue(queue, reader="text").batch(5)
    expected = sorted(f"f {i} line {j}".encode() for i in range(3) for j in range(20))
    for epoch in range(3):
        ds.set_epoch(epoch)  # the chain shares its queue source
        rows = sorted(r.rstrip(b"\n") for batch in ds for r in batch)
        assert rows == expected, f"epoch {epoch}"
        assert queue.stats()["completed"] == 9 * (epoch + 1)
    with pytest.raises(shardq.InvalidArgumentError, match="num_epochs=3"):
        ds.set_epoch(3)
    with pytest.raises(shardq.FailedPreconditionError, match="earlier pass"):
        list(ds)


# Last in this file: DataLoader workers are forked, and a fork after this
# process used gRPC itself (as it does without workers) may hang the child.
def test_set_epoch_loop_without_workers(tmp_path):
    _set_epoch_loop(tmp_path, workers=0)
