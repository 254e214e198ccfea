"""A file that changed size since its queue was planned is refused when its
items are read (SPEC: what cannot be trusted is refused, naming it): a
file that grew would otherwise have the records appended after planning
read by no item, silently. In process and through `shardq serve`."""
import os

import pytest

import shardq
from serve_helpers import read_all, served, unique


def files(tmp_path):
    text = tmp_path / "lines.txt"
    text.write_text("".join(f"line {i}\n" for i in range(40)))
    tfrecord = tmp_path / "records.tfrecord"
    with shardq.TFRecordWriter(str(tfrecord)) as w:
        for i in range(40):
            w.write(f"record {i}".encode())
    return text, tfrecord


def check_refused(make_queue, tmp_path):
    text, tfrecord = files(tmp_path)
    for path, reader, grow in [
            (text, shardq.TextLineReader(), lambda p: p.open("a").write("line 40\n")),
            (tfrecord, shardq.TFRecordReader(),
             lambda p: p.write_bytes(p.read_bytes()[:-18]))]:  # one record shorter
        # Unchanged: every record once.
        assert len(read_all(reader, make_queue([str(path)]).input_producer())) == 40
        queue = make_queue([str(path)])
        grow(path)
        with pytest.raises(shardq.FailedPreconditionError,
                           match=f"'{path}' changed since the plan was made: size now"):
            read_all(reader, queue.input_producer())


def test_a_file_that_changed_size_since_planning_is_refused(tmp_path):
    check_refused(lambda works: shardq.WorkQueue(works, num_slices=4, name=unique("grow")),
                  tmp_path)


def test_a_file_that_changed_size_is_refused_through_a_coordinator(tmp_path):
    with served(tmp_path) as (address, _):
        check_refused(lambda works: shardq.WorkQueue(works, num_slices=4, name=unique("grow"),
                                                     address=address), tmp_path)


def test_a_whole_file_item_reads_the_file_as_it_is(tmp_path):
    # Without num_slices an item is the whole file, whatever its size now:
    # nothing of it can be missed.
    text, _ = files(tmp_path)
    queue = shardq.WorkQueue([str(text)], name=unique("whole"))
    text.open("a").write("line 40\n")
    assert len(read_all(shardq.TextLineReader(), queue.input_producer())) == 41


def test_a_download_of_a_slice_of_a_grown_file_is_refused(tmp_path):
    # WorkQueue(download_dir=...): take() copies the item; a slice of a file
    # that grew since planning is refused, and the item goes back.
    text, _ = files(tmp_path)
    queue = shardq.WorkQueue([str(text)], num_slices=2, shuffle=False, name=unique("dl"),
                             download_dir=str(tmp_path / "copies"))
    first = queue.take()
    assert first.path is not None and os.path.getsize(first.path) > 0
    queue.complete(first)
    text.open("a").write("line 40\n")
    with pytest.raises(shardq.FailedPreconditionError, match="changed since the plan was made"):
        queue.take()
    assert queue.stats()["completed"] == 1
