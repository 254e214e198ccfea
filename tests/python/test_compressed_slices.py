"""Issue 15 item 1: a gzip TFRecord file in a queue with num_slices is one
whole item, and every reader reads all of its records.

Before the fix the planner cut it as "f.gz?start=0&end=1" and the readers
stopped after its first record (its others lie past offset 1 of the
decompressed stream): 500 gzip + 500 plain records in 7 slices gave 501
records through TFRecordReader.read_up_to and 1 of 2000 through
shardq.data.from_queue, while the queue said finished."""
import collections
import gzip
import pathlib
import uuid

import shardq


def write_records(path, records):
    with shardq.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    return str(path)


def gzip_and_plain(tmp_path):
    gz_records = [b"gzip record %d" % i for i in range(500)]
    plain_records = [b"plain record %d" % i for i in range(500)]
    staging = write_records(tmp_path / "staging.tfrecord", gz_records)
    gz = tmp_path / "c.tfrecord.gz"
    gz.write_bytes(gzip.compress(pathlib.Path(staging).read_bytes()))
    pathlib.Path(staging).unlink()
    plain = write_records(tmp_path / "p.tfrecord", plain_records)
    return str(gz), plain, gz_records + plain_records


def queue_of(works, **kw):
    return shardq.WorkQueue(works, num_slices=7, name=f"gz-{uuid.uuid4().hex[:8]}", **kw)


def test_the_compressed_file_is_one_whole_item_and_the_plain_file_gets_the_rest(tmp_path):
    gz, plain, _ = gzip_and_plain(tmp_path)
    queue = queue_of([gz, plain], shuffle=False, num_clients=7)
    items = [queue.take() for _ in range(queue.num_items)]
    assert len(items) == 7
    assert [i for i in items if i.startswith(gz)] == [gz]  # no range: read whole
    assert all(i.startswith(plain + "?start=") for i in items if not i.startswith(gz))


def test_tfrecord_reader_reads_every_record_of_the_compressed_item(tmp_path):
    gz, plain, records = gzip_and_plain(tmp_path)
    queue = queue_of([gz, plain])
    reader = shardq.TFRecordReader()
    producer = queue.input_producer()
    values = []
    while True:
        try:
            _, batch = reader.read_up_to(producer, 64)
        except shardq.OutOfRangeError:
            break
        values += batch
    assert len(values) == 1000
    assert sorted(values) == sorted(records)
    assert queue.stats()["finished"]


def test_from_queue_reads_every_record_of_every_epoch(tmp_path):
    gz, plain, records = gzip_and_plain(tmp_path)
    queue = queue_of([gz, plain], num_epochs=2)
    seen = collections.Counter(shardq.data.from_queue(queue, reader="tfrecord"))
    assert sum(seen.values()) == 2000
    assert seen == collections.Counter(records * 2)
    assert queue.stats()["finished"]
