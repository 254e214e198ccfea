"""tf.Example parsing into numpy arrays (one contiguous buffer per feature,
owned by the array: no copy on the way to torch.from_numpy)."""
from shardq import _shardq
from shardq.errors import InvalidArgumentError

_DTYPES = {"float32": "float32", "float": "float32", "int64": "int64", "uint8": "uint8",
           "bytes": "bytes", "string": "bytes"}


def _dtype_name(dtype):
    """"uint8" for np.uint8, np.dtype("uint8") or torch.uint8."""
    name = getattr(dtype, "name", None)
    if name is None and isinstance(dtype, type):
        try:
            import numpy
            name = numpy.dtype(dtype).name
        except (ImportError, TypeError):
            pass
    if name is None:
        name = str(dtype).rsplit(".", 1)[-1]  # torch.uint8 -> uint8
    return name


class FixedLen:
    """A feature holding exactly prod(shape) values per record, e.g.
    ``FixedLen((784,), "float32")`` or ``FixedLen((), "int64")``.

    ``"uint8"`` reads a bytes feature as raw bytes (like tf.io.decode_raw):
    ``FixedLen((3, 224, 224), "uint8")`` takes an image stored as its
    150528 pixel bytes into a uint8 array of that shape per record, parsed
    in C++; a record whose bytes (its values, concatenated) are not exactly
    prod(shape) long raises InvalidArgumentError naming the feature and
    both byte counts."""

    def __init__(self, shape, dtype):
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise InvalidArgumentError(f"FixedLen shape {shape} has a negative dimension")
        name = dtype if isinstance(dtype, str) else _dtype_name(dtype)
        if name not in _DTYPES:
            raise InvalidArgumentError(
                f"FixedLen dtype {dtype!r} is not float32, int64, uint8 or bytes")
        self.shape = shape
        self.dtype = _DTYPES[name]

    def __repr__(self):
        return f"FixedLen({self.shape}, {self.dtype!r})"


class ExampleParser:
    """Parses batches of serialised tf.Example records with one feature spec."""

    def __init__(self, features):
        if not features:
            raise InvalidArgumentError("parse_example needs at least one feature")
        for name, spec in features.items():
            if not isinstance(spec, FixedLen):
                raise InvalidArgumentError(
                    f"feature {name!r}: expected shardq.FixedLen, got {type(spec).__name__}")
        self.spec = {name: (spec.shape, spec.dtype) for name, spec in features.items()}
        self._native = _shardq._ExampleParser(self.spec)

    def __call__(self, records):
        return self._native.parse(list(records))


def parse_example(records, features):
    """Parses serialised tf.Example records into {name: numpy array of shape
    (len(records), *spec.shape)}. Errors name the record and the feature."""
    return ExampleParser(features)(records)


def parse_example_fn(features):
    """A callable parsing a batch of records with ``features``; as a
    shardq.data ``map`` argument it is the C++ parse_example stage."""
    return ExampleParser(features)


# --- Writing tf.Example records (proto/shardq/example.proto), for making
# test data and datasets without TensorFlow or a protobuf package. ---

def _varint(n):
    n &= (1 << 64) - 1  # a negative int64 is its two's complement, 10 bytes
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(number, payload):
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _feature(name, value):
    """The serialised Feature for one value of serialize_example."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = [value]
    kind = getattr(getattr(value, "dtype", None), "kind", None)  # numpy arrays
    if kind is not None:
        if kind == "f":
            return _field(2, _field(1, value.astype("<f4").tobytes()))
        if kind in "iub" and value.dtype.name != "uint8":
            return _field(3, _field(1, b"".join(_varint(int(v)) for v in value.ravel())))
        if value.dtype.name == "uint8":  # raw bytes, as FixedLen(..., "uint8") reads them
            return _field(1, _field(1, value.tobytes()))
        raise InvalidArgumentError(f"feature {name!r}: cannot encode an array of {value.dtype}")
    if isinstance(value, (int, float)):
        value = [value]
    value = list(value)
    if not value:
        raise InvalidArgumentError(
            f"feature {name!r}: an empty list has no type; pass an empty numpy array")
    if all(isinstance(v, (bytes, bytearray, memoryview)) for v in value):
        return _field(1, b"".join(_field(1, bytes(v)) for v in value))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        for v in value:
            if not -(1 << 63) <= v < (1 << 63):
                raise InvalidArgumentError(f"feature {name!r}: {v} does not fit in int64")
        return _field(3, _field(1, b"".join(_varint(v) for v in value)))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        import struct
        return _field(2, _field(1, struct.pack(f"<{len(value)}f", *value)))
    raise InvalidArgumentError(
        f"feature {name!r}: values must be all bytes, all ints or all numbers, "
        f"got {sorted({type(v).__name__ for v in value})}")


def serialize_example(features):
    """Serialises one tf.Example from {name: value}, readable by TensorFlow
    and by parse_example. A value is bytes or a list of bytes (bytes_list),
    an int or list of ints (int64_list), a float or list of numbers
    (float_list, as float32), or a numpy array: float -> float_list, other
    integers -> int64_list, uint8 -> one bytes value holding its raw bytes
    (what ``FixedLen(shape, "uint8")`` reads back). Features are written in
    name order, as protobuf writes a map. InvalidArgumentError names a
    feature whose value has no such type (an empty list, mixed values)."""
    if not features:
        raise InvalidArgumentError("serialize_example needs at least one feature")
    entries = b"".join(
        _field(1, _field(1, str(name).encode()) + _field(2, _feature(name, features[name])))
        for name in sorted(features))
    return _field(1, entries)  # Example.features
