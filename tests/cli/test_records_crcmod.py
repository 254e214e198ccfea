"""Cross-check of the TFRecord format against an independent encoder and
decoder written here in Python, with Debian's python3-crcmod computing
CRC32C: files it writes are read by `shardq`, record for record and slice by
slice, and files `shardq` writes are byte-identical to it and decode with it."""
import gzip
import random
import struct

import pytest

from cli_helpers import run

crcmod = pytest.importorskip("crcmod.predefined")
crc32c = crcmod.mkCrcFun("crc-32c")


def masked_crc(data):
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def encode(records):
    out = bytearray()
    for data in records:
        length = struct.pack("<Q", len(data))
        out += length + struct.pack("<I", masked_crc(length))
        out += data + struct.pack("<I", masked_crc(data))
    return bytes(out)


def decode(blob):
    records, pos = [], 0
    while pos < len(blob):
        length_bytes = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        assert length_crc == masked_crc(length_bytes), f"length crc at {pos}"
        data = blob[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        assert data_crc == masked_crc(data), f"data crc at {pos}"
        records.append(data)
        pos += 16 + length
    assert pos == len(blob)
    return records


def random_records(rng, count):
    records = []
    for _ in range(count):
        kind = rng.random()
        size = (rng.randrange(65) if kind < 0.75 else rng.randrange(4097) if kind < 0.97
                else rng.randrange(1 << 20))
        records.append(rng.randbytes(size) if rng.random() < 0.5 else b"\n" * size)
    return records


def cat_hex(item, *flags):
    out = run("cat", "--format", "hex", *flags, item).stdout
    return [bytes.fromhex(line) for line in out.split("\n")[:-1]]


def test_crcmod_matches_the_published_crc32c_vector():
    assert crc32c(b"123456789") == 0xE3069283


def test_shardq_reads_files_of_the_reference_encoder(tmp_path):
    rng = random.Random(31)
    for trial in range(4):
        records = random_records(rng, rng.randrange(1, 120))
        path = tmp_path / f"ref-{trial}.tfrecord"
        blob = encode(records)
        path.write_bytes(blob)
        assert cat_hex(str(path)) == records
        k = rng.randrange(2, 30)
        sliced = []
        for j in range(k):
            sliced += cat_hex(f"{path}?start={len(blob) * j // k}&end={len(blob) * (j + 1) // k}")
        assert sliced == records, f"trial {trial}, {k} slices"


def test_shardq_reads_gzip_files_of_the_reference_encoder(tmp_path):
    records = random_records(random.Random(32), 60)
    path = tmp_path / "ref.tfrecord.gz"
    path.write_bytes(gzip.compress(encode(records)))
    assert cat_hex(str(path)) == records


def test_shardq_writes_what_the_reference_encoder_writes(tmp_path):
    lines = ["", "a", "line with spaces", "\u00e9t\u00e9", "x" * 70000]
    text = tmp_path / "in.txt"
    text.write_text("".join(line + "\n" for line in lines))
    expected = [line.encode() for line in lines]
    plain = tmp_path / "out.tfrecord"
    run("tfrecord-write", str(text), str(plain))
    assert plain.read_bytes() == encode(expected)
    assert decode(plain.read_bytes()) == expected
    gz = tmp_path / "out.tfrecord.gz"
    run("tfrecord-write", str(text), str(gz))
    assert decode(gzip.decompress(gz.read_bytes())) == expected
