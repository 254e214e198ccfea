"""shardq.VarLen: variable-length tf.Example features as values + row
lengths (shardq.Ragged), in parse_example, shardq.data and shardq.torch."""
import numpy as np
import pytest

import shardq
import shardq.data


def _records():
    rows = [{"ids": [1], "w": [0.5], "y": 0},
            {"y": 1},  # lacks the VarLen features: empty rows
            {"ids": [2, 3, 4], "w": [1.5, 2.5], "tag": [b"a", b"b"], "y": 2}]
    return [shardq.serialize_example(r) for r in rows]


FEATURES = {"ids": shardq.VarLen("int64"), "w": shardq.VarLen("float32"),
            "tag": shardq.VarLen("bytes"), "y": shardq.FixedLen((), "int64")}


def test_parse_example_gives_values_and_row_lengths():
    out = shardq.parse_example(_records(), FEATURES)
    ids = out["ids"]
    assert isinstance(ids, shardq.Ragged)
    assert ids.values.dtype == np.int64 and ids.values.tolist() == [1, 2, 3, 4]
    assert ids.row_lengths.tolist() == [1, 0, 3]
    assert [r.tolist() for r in ids.rows()] == [[1], [], [2, 3, 4]]
    assert out["w"].values.dtype == np.float32 and out["w"].row_lengths.tolist() == [1, 0, 2]
    assert out["tag"].values.tolist() == [b"a", b"b"]
    assert out["tag"].row_lengths.tolist() == [0, 0, 2]
    assert out["y"].tolist() == [0, 1, 2]


def test_varlen_of_the_wrong_type_is_an_error_naming_the_feature():
    with pytest.raises(shardq.InvalidArgumentError, match="'y'"):
        shardq.parse_example(_records(), {"y": shardq.VarLen("float32")})
    with pytest.raises(shardq.InvalidArgumentError, match="VarLen dtype"):
        shardq.VarLen("complex")


def test_varlen_through_the_pipeline(tmp_path):
    path = tmp_path / "v.tfrecord"
    with shardq.TFRecordWriter(str(path)) as w:
        for r in _records():
            w.write(r)
    queue = shardq.WorkQueue([str(path)], num_clients=4, name="varlen-data")
    batches = list(shardq.data.from_queue(queue).batch(3).parse_example(FEATURES))
    assert len(batches) == 1
    assert sorted(batches[0]["ids"].values.tolist()) == [1, 2, 3, 4]
    assert sorted(batches[0]["ids"].row_lengths.tolist()) == [0, 1, 3]


def test_varlen_under_torch_is_a_ragged_of_tensors(tmp_path):
    torch = pytest.importorskip("torch")
    import shardq.torch
    path = tmp_path / "v.tfrecord"
    with shardq.TFRecordWriter(str(path)) as w:
        for r in _records():
            w.write(r)
    features = {"ids": shardq.VarLen("int64"), "y": shardq.FixedLen((), "int64")}
    for workers in (2,):  # forked workers: see test_torch_epochs.py on workers=0
        ds = shardq.torch.WorkQueueDataset([str(path)], features=features, batch_size=3)
        batches = list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))
        assert len(batches) == 1
        ids = batches[0]["ids"]
        assert isinstance(ids.values, torch.Tensor) and isinstance(ids.row_lengths, torch.Tensor)
        rows = {int(y): r.tolist() for y, r in zip(batches[0]["y"], ids.rows())}
        assert rows == {0: [1], 1: [], 2: [2, 3, 4]}
        nested = ids.to_nested()
        assert nested.is_nested
