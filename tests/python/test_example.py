"""parse_example and the TFRecord/Table readers from Python."""
import os
import sqlite3
import uuid

import numpy as np
import pytest

import shardq
from example_data import example_pb2, make_example, write_files


def test_parse_example_gives_contiguous_arrays_without_copies():
    records = [make_example(i, width=8) for i in range(5)]
    out = shardq.parse_example(records, {"x": shardq.FixedLen((8,), "float32"),
                                         "y": shardq.FixedLen((), "int64")})
    assert out["x"].shape == (5, 8) and out["x"].dtype == np.float32
    assert out["y"].tolist() == [0, 1, 2, 3, 4]
    assert out["x"][3, 1] == pytest.approx(3.001)
    assert out["x"].flags["C_CONTIGUOUS"]
    # The array owns the parser's buffer (no copy was made into numpy).
    assert out["x"].base is not None and not out["x"].flags["OWNDATA"]


def test_parse_example_errors_name_record_and_feature():
    records = [make_example(1, width=8), make_example(2, width=7)]
    with pytest.raises(ValueError, match="record 1: feature 'x' has 7 values, expected 8"):
        shardq.parse_example(records, {"x": shardq.FixedLen((8,), "float32")})
    with pytest.raises(ValueError, match="'z' is missing"):
        shardq.parse_example(records[:1], {"z": shardq.FixedLen((), "int64")})
    with pytest.raises(ValueError, match="dtype"):
        shardq.FixedLen((1,), "complex64")
    with pytest.raises(shardq.DataLossError):
        shardq.parse_example([b"\x0a\xff\xff\xff\xff\x0f"], {"y": shardq.FixedLen((), "int64")})


def test_a_shape_no_example_can_fill_is_refused_before_anything_is_allocated():
    # 4 TB per record: an InvalidArgumentError naming the feature, not a MemoryError.
    with pytest.raises(shardq.InvalidArgumentError, match="feature 'x'.*tf.Example can carry"):
        shardq.parse_example([make_example(1)], {"x": shardq.FixedLen((10**12,), "float32")})


def test_a_batch_too_large_to_hold_is_resource_exhausted_naming_the_feature():
    # 1 GiB a record is a possible tf.Example; 100 of them in one batch are not parsed.
    with pytest.raises(shardq.ResourceExhaustedError, match="feature 'x'.*smaller batches") as e:
        shardq.parse_example([make_example(1)] * 100,
                             {"x": shardq.FixedLen((2**28,), "float32")})
    assert e.value.code_name == "RESOURCE_EXHAUSTED"


def batches(reader, source, n):
    """The values of each read_up_to(source, n) until OutOfRangeError."""
    while True:
        try:
            yield reader.read_up_to(source, n)[1]
        except shardq.OutOfRangeError:
            return


def test_tfrecord_reader_over_a_queue_reads_every_record_once(tmp_path):
    files = write_files(tmp_path, 3, 20, width=4)
    queue = shardq.WorkQueue(files, num_slices=7, name=f"tfr-{uuid.uuid4().hex[:8]}")
    reader = shardq.TFRecordReader()
    labels = []
    for values in batches(reader, queue, 16):
        labels += shardq.parse_example(values, {"y": shardq.FixedLen((), "int64")})["y"].tolist()
    assert sorted(labels) == list(range(60))
    assert reader.stats["records"] == 60


def test_corrupt_tfrecord_is_data_loss_naming_file_and_offset(tmp_path):
    (path,) = write_files(tmp_path, 1, 3, width=4)
    data = bytearray(open(path, "rb").read())
    data[20] ^= 0xFF  # inside the first record's data
    open(path, "wb").write(bytes(data))
    queue = shardq.WorkQueue([path], name=f"bad-{uuid.uuid4().hex[:8]}")
    with pytest.raises(shardq.DataLossError, match="offset 0") as err:
        shardq.TFRecordReader().read_up_to(queue, 10)
    assert path in str(err.value)


def _tfrecords(path, records):
    with shardq.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    return str(path)


@pytest.mark.parametrize("bad", [3, 8, 40])  # 8: the first record after a chunk
def test_read_up_to_gives_the_records_before_an_error_then_the_error(tmp_path, bad):
    # read_up_to reads a call's records a few at a time (to copy each into
    # its bytes while in cache): a corrupt record met after the first few
    # still comes after every record before it, by the next call, and again
    # after that.
    records = [b"record %03d " % i + b"x" * (i * 7 % 300) for i in range(100)]
    path = _tfrecords(tmp_path / "c.tfrecord", records)
    data = bytearray(open(path, "rb").read())
    offset = sum(16 + len(r) for r in records[:bad])
    data[offset + 12 + 3] ^= 0xFF  # inside the data of record `bad`
    open(path, "wb").write(bytes(data))
    queue = shardq.WorkQueue([path], name=f"bad-{uuid.uuid4().hex[:8]}")
    reader = shardq.TFRecordReader()
    _, values = reader.read_up_to(queue, 64)
    assert values == records[:bad]
    for _ in range(2):
        with pytest.raises(shardq.DataLossError, match=f"offset {offset}"):
            reader.read_up_to(queue, 64)


@pytest.mark.parametrize("count", [7, 8, 9, 64, 65, 200])
def test_read_up_to_ends_with_out_of_range_after_the_last_records(tmp_path, count):
    records = [b"r%d" % i for i in range(count)]
    path = _tfrecords(tmp_path / "e.tfrecord", records)
    queue = shardq.WorkQueue([path], name=f"end-{uuid.uuid4().hex[:8]}")
    reader = shardq.TFRecordReader()
    got = []
    for values in batches(reader, queue, 64):
        assert 1 <= len(values) <= 64
        got += values
    assert got == records
    assert reader.stats["records"] == count
    with pytest.raises(shardq.OutOfRangeError):
        reader.read_up_to(queue, 64)


def test_table_reader_returns_typed_rows(tmp_path):
    db = tmp_path / "t.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE clicks (id INTEGER, score REAL, name TEXT, raw BLOB, missing TEXT)")
    con.executemany("INSERT INTO clicks VALUES (?, ?, ?, ?, ?)",
                    [(i, i / 2, f"n{i}", bytes([i]), None) for i in range(30)])
    con.commit()
    con.close()
    queue = shardq.WorkQueue([f"sqlite:{db}?table=clicks"], num_slices=4,
                             name=f"tbl-{uuid.uuid4().hex[:8]}")
    reader = shardq.TableReader()
    rows = []
    while True:
        try:
            _, values = reader.read_up_to(queue, 8)
        except shardq.OutOfRangeError:
            break
        rows += values
    assert sorted(r["id"] for r in rows) == list(range(30))
    r7 = next(r for r in rows if r["id"] == 7)
    assert r7 == {"id": 7, "score": 3.5, "name": "n7", "raw": b"\x07", "missing": None}


def image_example(pixels, label):
    e = example_pb2().Example()
    e.features.feature["image"].bytes_list.value.append(pixels)
    e.features.feature["label"].int64_list.value.append(label)
    return e.SerializeToString()


def test_uint8_reads_a_bytes_feature_as_raw_pixels_in_cpp():
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(4, 3, 5, 2), dtype=np.uint8)
    records = [image_example(img.tobytes(), i) for i, img in enumerate(images)]
    spec = {"image": shardq.FixedLen((3, 5, 2), "uint8"), "label": shardq.FixedLen((), "int64")}
    assert repr(spec["image"]) == "FixedLen((3, 5, 2), 'uint8')"
    for dtype in (np.dtype("uint8"), np.uint8):
        assert shardq.FixedLen((1,), dtype).dtype == "uint8"
    assert shardq.FixedLen((1,), np.float32).dtype == "float32"
    out = shardq.parse_example(records, spec)
    assert out["image"].dtype == np.uint8 and out["image"].shape == (4, 3, 5, 2)
    np.testing.assert_array_equal(out["image"], images)
    assert out["label"].tolist() == [0, 1, 2, 3]
    assert not out["image"].flags["OWNDATA"]  # the parser's buffer, not a copy


def test_uint8_length_mismatch_names_the_feature_and_both_byte_counts():
    spec = {"image": shardq.FixedLen((3, 5, 2), "uint8")}
    records = [image_example(bytes(30), 0), image_example(bytes(29), 1)]
    with pytest.raises(shardq.InvalidArgumentError,
                       match=r"record 1: feature 'image' has 29 bytes, expected 30 "
                             r"\(uint8 of shape \[3, 5, 2\]\)"):
        shardq.parse_example(records, spec)
    with pytest.raises(shardq.InvalidArgumentError, match="'label' holds int64 values"):
        shardq.parse_example(records, {"label": shardq.FixedLen((), "uint8")})


def test_uint8_images_through_the_cpp_pipeline(tmp_path):
    path = str(tmp_path / "images.tfrecord")
    images = np.arange(10 * 12, dtype=np.int64).reshape(10, 3, 2, 2).astype(np.uint8)
    with shardq.TFRecordWriter(path) as w:
        for i, img in enumerate(images):
            w.write(image_example(img.tobytes(), i))
    queue = shardq.WorkQueue([path], shuffle=False, name=f"u8-{uuid.uuid4().hex[:8]}")
    spec = {"image": shardq.FixedLen((3, 2, 2), "uint8"), "label": shardq.FixedLen((), "int64")}
    batches = list(shardq.data.from_queue(queue).batch(5).parse_example(spec).prefetch(1))
    got = np.concatenate([b["image"] for b in batches])
    labels = np.concatenate([b["label"] for b in batches])
    np.testing.assert_array_equal(got, images[labels])
    assert sorted(labels.tolist()) == list(range(10))


def test_a_large_file_cut_shorter_while_read_is_data_loss_not_a_crash(tmp_path):
    # Files of 256 KiB and more are read out of a memory mapping, where a cut
    # file is a SIGBUS under the reader (pytest's faulthandler holds SIGBUS
    # too): it must surface as DataLossError naming the file, in a process
    # that goes on. And the same for text lines.
    tfrecord = str(tmp_path / "big.tfrecord")
    with shardq.TFRecordWriter(tfrecord) as w:
        for i in range(400):
            w.write(bytes([i % 251]) * 1000)
    text = str(tmp_path / "big.txt")
    with open(text, "w") as f:
        f.write("".join(f"line {i} " + "x" * 990 + "\n" for i in range(400)))
    for path, reader in ((tfrecord, shardq.TFRecordReader()),
                         (text, shardq.TextLineReader())):
        size = os.path.getsize(path)
        assert size >= 256 * 1024
        queue = shardq.WorkQueue([path], name=f"cut-{uuid.uuid4().hex[:8]}")
        _, first = reader.read_up_to(queue, 5)
        assert len(first) == 5
        os.truncate(path, 50 * 1024)
        got = len(first)
        with pytest.raises(shardq.DataLossError, match="truncated while being read") as err:
            while True:
                got += len(reader.read_up_to(queue, 5)[1])
        assert path in str(err.value)
        assert got < 400
