"""tf.Example parsing into numpy arrays (one contiguous buffer per feature,
owned by the array: no copy on the way to torch.from_numpy)."""
import collections

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
    both byte counts.

    ``default_value``: what a record lacking the feature gets (else parsing
    raises InvalidArgumentError naming the record and the feature): a
    scalar, repeated over the shape, or prod(shape) values (any nesting,
    e.g. a numpy array of the shape); for "uint8" bytes of prod(shape)
    bytes; for "bytes" a bytes value or prod(shape) of them."""

    def __init__(self, shape, dtype, default_value=None):
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise InvalidArgumentError(f"FixedLen shape {shape} has a negative dimension")
        name = dtype if isinstance(dtype, str) else _dtype_name(dtype)
        if name not in _DTYPES:
            raise InvalidArgumentError(
                f"FixedLen dtype {dtype!r} is not float32, int64, uint8 or bytes")
        self.shape = shape
        self.dtype = _DTYPES[name]
        self.default_value = default_value
        self.default = None if default_value is None else self._flat_default(default_value)

    def _flat_default(self, value):
        """default_value as the flat list (or raw bytes, for uint8) the C++
        parser takes; InvalidArgumentError when its size is not prod(shape)."""
        count = 1
        for d in self.shape:
            count *= d
        if self.dtype == "uint8":
            raw = bytes(value) if not hasattr(value, "tobytes") else value.tobytes()
            if len(raw) != count:
                raise InvalidArgumentError(
                    f"FixedLen default_value has {len(raw)} bytes, shape {self.shape} holds {count}")
            return raw
        if isinstance(value, (bytes, str, int, float)) or getattr(value, "ndim", 1) == 0:
            flat = [value] * count
        else:
            flat = list(_flatten(value))
        if self.dtype == "bytes":
            flat = [v.encode() if isinstance(v, str) else bytes(v) for v in flat]
        else:
            flat = [float(v) if self.dtype == "float32" else int(v) for v in flat]
        if len(flat) != count:
            raise InvalidArgumentError(
                f"FixedLen default_value has {len(flat)} values, shape {self.shape} holds {count}")
        return flat

    def __repr__(self):
        extra = "" if self.default_value is None else f", default_value={self.default_value!r}"
        return f"FixedLen({self.shape}, {self.dtype!r}{extra})"


class VarLen:
    """A variable-length feature (tf.io.VarLenFeature): any number of
    values per record, none when a record lacks it. Parsed into a
    ``shardq.Ragged(values, row_lengths)``: ``values`` holds every row's
    values one after the other (numpy, dtype as FixedLen's; an object
    array for "bytes"), ``row_lengths`` (int64) how many each row has.
    shardq.torch hands it over as a Ragged of tensors; ``to_nested()``
    makes a torch nested tensor."""

    def __init__(self, dtype):
        name = dtype if isinstance(dtype, str) else _dtype_name(dtype)
        if name not in _DTYPES:
            raise InvalidArgumentError(
                f"VarLen dtype {dtype!r} is not float32, int64, uint8 or bytes")
        self.dtype = _DTYPES[name]

    def __repr__(self):
        return f"VarLen({self.dtype!r})"


class Ragged(collections.namedtuple("Ragged", ["values", "row_lengths"])):
    """A batch of a VarLen feature: (values, row_lengths), see VarLen. A
    named tuple, so torch's DataLoader keeps it one (converting its
    members)."""
    __slots__ = ()

    def rows(self):
        """The values of each row, as a list of slices of ``values``."""
        out, start = [], 0
        for n in self.row_lengths.tolist():
            out.append(self.values[start:start + n])
            start += n
        return out

    def to_nested(self):
        """A torch nested tensor of the rows (numeric features)."""
        import torch
        return torch.nested.nested_tensor([torch.as_tensor(r) for r in self.rows()])

    def __repr__(self):
        return f"Ragged(values={self.values!r}, row_lengths={self.row_lengths!r})"


def _flatten(value):
    if hasattr(value, "ravel"):
        yield from value.ravel().tolist()
        return
    for v in value:
        if isinstance(v, (list, tuple)) or hasattr(v, "ravel"):
            yield from _flatten(v)
        else:
            yield v


class ExampleParser:
    """Parses batches of serialised tf.Example records with one feature spec."""

    def __init__(self, features):
        if not features:
            raise InvalidArgumentError("parse_example needs at least one feature")
        for name, spec in features.items():
            if not isinstance(spec, (FixedLen, VarLen)):
                raise InvalidArgumentError(
                    f"feature {name!r}: expected shardq.FixedLen or shardq.VarLen, "
                    f"got {type(spec).__name__}")
        # A shape of None marks a VarLen feature.
        self.spec = {name: (spec.shape, spec.dtype, spec.default)
                     if isinstance(spec, FixedLen) else (None, spec.dtype, None)
                     for name, spec in features.items()}
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
