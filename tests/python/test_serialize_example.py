"""shardq.serialize_example writes the bytes protobuf writes for the same
tf.Example, and parse_example reads them back."""
import numpy as np
import pytest

import shardq
from example_data import example_pb2


def _protobuf_example(features):
    e = example_pb2().Example()
    for name, (kind, values) in features.items():
        getattr(e.features.feature[name], kind).value.extend(values)
    return e


def test_bytes_match_protobuf_for_every_kind():
    ours = shardq.serialize_example({
        "label": 7, "neg": [-1, -(1 << 63), (1 << 63) - 1], "x": [0.5, -2.25, 3],
        "img": b"\x00\x01\xff", "names": [b"a", b""]})
    theirs = _protobuf_example({
        "label": ("int64_list", [7]), "neg": ("int64_list", [-1, -(1 << 63), (1 << 63) - 1]),
        "x": ("float_list", [0.5, -2.25, 3.0]), "img": ("bytes_list", [b"\x00\x01\xff"]),
        "names": ("bytes_list", [b"a", b""])})
    # Map order is not fixed in protobuf's output: compare parsed messages,
    # and our bytes with a deterministic serialisation of the same message.
    parsed = example_pb2().Example()
    parsed.ParseFromString(ours)
    assert parsed == theirs
    assert ours == theirs.SerializeToString(deterministic=True)


def test_numpy_arrays_and_round_trip_through_parse_example():
    img = np.arange(12, dtype=np.uint8).reshape(3, 4)
    rec = shardq.serialize_example({"img": img, "f": np.array([1.5, 2.5], dtype=np.float64),
                                 "i": np.array([3, -4], dtype=np.int32)})
    out = shardq.parse_example([rec, rec], {
        "img": shardq.FixedLen((3, 4), "uint8"), "f": shardq.FixedLen((2,), "float32"),
        "i": shardq.FixedLen((2,), "int64")})
    assert (out["img"][1] == img).all()
    assert out["f"].tolist() == [[1.5, 2.5], [1.5, 2.5]]
    assert out["i"].tolist() == [[3, -4], [3, -4]]


@pytest.mark.parametrize("value, words", [
    ([], "empty list"), ([1, b"x"], "all bytes"), ([True], "all bytes"),
    ([1 << 63], "does not fit in int64"), (np.array(["a"]), "cannot encode an array")])
def test_values_without_a_feature_type_are_refused_naming_the_feature(value, words):
    with pytest.raises(shardq.InvalidArgumentError, match=f"feature 'bad'.*{words}"):
        shardq.serialize_example({"ok": 1, "bad": value})
    with pytest.raises(shardq.InvalidArgumentError, match="at least one feature"):
        shardq.serialize_example({})
