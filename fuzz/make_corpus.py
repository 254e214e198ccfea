#!/usr/bin/env python3
"""Writes the seed corpus under fuzz/corpus/ (run once; the files are kept
in the repository and replayed by `make test`). Standard library only: the
CRC32C and the tf.Example wire format are written out here.

Inputs that fuzzing found interesting are copied into fuzz/corpus/<target>/
by hand (named for what they show), not written by this script:
  example_parser/spec0-wrong-wire-type-in-bytes-list: a BytesList value with
  wire type 5; protobuf keeps it as an unknown field, the parser rejects the
  record (it made the first differential oracle misfire).
  queue_snapshot/found-*: edits of the target's snapshot that random
  mutation found (fuzz/queue_snapshot_fuzzer.cc): the unedited snapshot
  itself (a late completion of an item another worker held made pending
  -1), an epoch record removed under a lease, a pending item of an epoch
  not begun, and a worker record whose held count disagrees with its
  leases."""
import gzip
import os
import random
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def record(data, length=None):
    header = struct.pack("<Q", len(data) if length is None else length)
    return (header + struct.pack("<I", masked(header)) + data +
            struct.pack("<I", masked(data)))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def tfrecord_seeds():
    recs = [b"", b"hello", bytes(range(256)) + b"x" * 44]
    valid = b"".join(record(r) for r in recs)
    write("tfrecord_slice", "valid-3", valid)
    write("tfrecord_slice", "empty-file", b"")
    many = b"".join(record(b"r%d" % i * (i % 7)) for i in range(20))
    write("tfrecord_slice", "valid-20-small", many)
    bad_data = bytearray(valid)
    bad_data[len(record(b"")) + 12] ^= 0x01  # in the data of "hello"
    write("tfrecord_slice", "corrupt-data-crc-middle", bytes(bad_data))
    bad_len = bytearray(valid)
    bad_len[9] ^= 0x40  # the length CRC of the first record
    write("tfrecord_slice", "corrupt-length-crc-first", bytes(bad_len))
    write("tfrecord_slice", "truncated-last", valid[:-7])
    huge = record(b"abc", length=1 << 60)[:12] + b"abc" + b"\0" * 4
    write("tfrecord_slice", "length-2pow60", record(b"ok") + huge + record(b"after"))
    embedded = record(record(b"inner") + b"tail")
    write("tfrecord_slice", "embedded-record", record(b"a") + embedded + record(b"z"))
    write("tfrecord_slice", "trailing-garbage", valid + b"garbage!")
    write("tfrecord_slice", "gzip-valid", gzip.compress(many, mtime=0))
    write("tfrecord_slice", "zlib-valid", zlib.compress(valid))


def item_seeds():
    items = {
        "tfrecord-range": b"data/part-3.tfrecord?start=1048576&end=2097152",
        "sqlite": b"sqlite:data/train.db?table=clicks&start=100000&end=200000",
        "question-in-work": b"a?b=c?start=1",
        "start-after-end": b"x?start=5&end=3",
        "negative": b"file?start=-1",
        "plain": b"plain/path.txt",
        "not-a-query": b"weird?name&x",
        "spec-parts": b"work\n\x0c\x22\nkey=value\nk2=v=2",
    }
    for name, data in items.items():
        write("item_string", name, data)


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, payload):  # length-delimited
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def floats(values):
    return field(2, field(1, b"".join(struct.pack("<f", v) for v in values)) if values else b"")


def int64s(values):
    return field(3, field(1, b"".join(varint(v) for v in values)) if values else b"")


def bytes_list(values):
    return field(1, b"".join(field(1, v) for v in values))


def example(features):  # features: {name: Feature bytes}, sorted as protobuf does
    entries = b"".join(field(1, field(1, k.encode()) + field(2, v))
                       for k, v in sorted(features.items()))
    return field(1, entries)


def batch(spec, records):
    return bytes([spec]) + b"".join(struct.pack("<H", len(r)) + r for r in records)


def example_seeds():
    good = example({"a": floats([1.5, -2.0]), "b": int64s([-7]), "c": bytes_list([b"img"])})
    write("example_parser", "spec0-valid", batch(0, [good, good]))
    write("example_parser", "spec0-missing-b",
          batch(0, [good, example({"a": floats([1.0, 2.0]), "c": bytes_list([b"x"])})]))
    write("example_parser", "spec0-wrong-type",
          batch(0, [example({"a": int64s([1, 2]), "b": int64s([3]), "c": bytes_list([b"x"])})]))
    unpacked = field(2, b"\x0d" + struct.pack("<f", 1.0) + b"\x0d" + struct.pack("<f", 2.0))
    write("example_parser", "spec0-unpacked-floats",
          batch(0, [example({"a": unpacked, "b": int64s([1]), "c": bytes_list([b""])})]))
    write("example_parser", "spec1-int64", batch(1, [example({"a": int64s([1, 1 << 40, -1])})]))
    write("example_parser", "spec2-bytes",
          batch(2, [example({"b": floats([0.0, 1.0]), "c": bytes_list([b"p", b"q"])})]))
    write("example_parser", "spec3-empty-lists",
          batch(3, [example({"a": floats([]), "b": bytes_list([])})]))
    write("example_parser", "spec4-truncated", batch(4, [good[:-3]]))


def queue_snapshot_seeds():
    # The target edits a snapshot it makes itself: an input is (offset low,
    # offset high, XOR byte) triples, or 0xFF and a whole snapshot.
    edit_seeds("queue_snapshot", 17)
    write("queue_snapshot", "raw-empty", b"\xff")
    write("queue_snapshot", "raw-format-3-only", b"\xff" + field_varint(20, 3))
    write("queue_snapshot", "raw-format-9", b"\xff" + field_varint(20, 9))


def journal_replay_seeds():
    # The target edits a journal it makes itself: (offset low, offset high,
    # XOR byte) triples.
    edit_seeds("journal_replay", 23)


def edit_seeds(target, seed):
    """No edit, and 48 inputs of 1 to 6 random (offset, XOR byte) edits."""
    write(target, "unchanged", b"")
    rng = random.Random(seed)
    for k in range(48):
        edits = bytes(rng.randrange(256) for _ in range(3 * (1 + k % 6)))
        write(target, "edits-%02d" % k, edits)


def field_varint(num, value):
    return varint(num << 3) + varint(value)


if __name__ == "__main__":
    tfrecord_seeds()
    item_seeds()
    example_seeds()
    queue_snapshot_seeds()
    journal_replay_seeds()
