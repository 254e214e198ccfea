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
