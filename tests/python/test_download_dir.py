"""WorkQueue(download_dir=...) with local files: take() copies each item to a
file of its own under the directory, which several workers (processes, or
queues of one process) may share without one copy overwriting another."""
import collections
import os
import uuid

import shardq


def lines_file(tmp_path, n=4000):
    path = tmp_path / "data.txt"
    path.write_text("".join(f"line {i}\n" for i in range(n)))
    return str(path), [b"line %d" % i for i in range(n)]


def test_two_workers_sharing_a_download_dir_each_read_their_own_items(tmp_path):
    path, expected = lines_file(tmp_path)
    staging = tmp_path / "copies"
    name = f"dl-{uuid.uuid4().hex[:8]}"
    a, b = (shardq.WorkQueue([path], num_slices=8, name=name, worker_id=w,
                             download_dir=str(staging)) for w in "ab")
    got = []
    for _ in range(4):
        # Both hold an item (of the same work) at once.
        held = [q.take() for q in (a, b)]
        assert held[0].path != held[1].path
        assert all(os.path.basename(i.path).endswith("-data.txt") for i in held)
        for q, item in zip((a, b), held):
            with open(item.path, "rb") as f:
                mine = f.read().splitlines()
            # The copy holds exactly the lines of its own slice.
            start, end = item.start, item.end
            assert mine == [line for line, offset in offsets(expected) if start <= offset < end]
            got += mine
            q.complete(item)
    assert collections.Counter(got) == collections.Counter(expected)
    assert os.listdir(staging) == []


def offsets(lines):
    at = 0
    for line in lines:
        yield line, at
        at += len(line) + 1


def test_a_failed_copy_leaves_no_file_behind(tmp_path):
    # The copy of a slice of a file that changed size since planning is
    # refused; its placeholder is removed and the item goes back.
    path, _ = lines_file(tmp_path, 100)
    staging = tmp_path / "copies"
    q = shardq.WorkQueue([path], num_slices=2, name=f"dl-{uuid.uuid4().hex[:8]}",
                         download_dir=str(staging), take_ahead=0)
    with open(path, "a") as f:
        f.write("one more\n")
    try:
        q.take()
        raise AssertionError("the copy of a grown file was not refused")
    except shardq.FailedPreconditionError:
        pass
    assert os.listdir(staging) == []
    assert q.stats()["leased"] == 0 and q.stats()["pending"] == 2


def test_one_item_held_in_two_epochs_has_two_copies(tmp_path):
    # The same item in epochs 0 and 1, held at once: each copy is its own,
    # and completing one removes only its copy (the copies were keyed by
    # the item string: the second replaced the first, which then leaked).
    path, expected = lines_file(tmp_path, n=10)
    staging = tmp_path / "copies"
    q = shardq.WorkQueue([path], num_epochs=2, num_clients=2, download_dir=str(staging),
                         name=f"dl-epochs-{uuid.uuid4().hex[:8]}")
    first, second = q.take(timeout=10), q.take(timeout=10)
    assert (first.epoch, second.epoch) == (0, 1)
    assert first.path != second.path
    assert sorted(os.listdir(staging)) == sorted(
        os.path.basename(i.path) for i in (first, second))
    q.complete(second)
    assert os.listdir(staging) == [os.path.basename(first.path)]
    with open(first.path, "rb") as f:
        assert f.read().splitlines() == expected
    q.complete(first)
    assert os.listdir(staging) == []
