"""tf.data.TFRecordDataset over one file, for bench/read_throughput/run.

Prints "<seconds> <records> <data bytes>" like the C++ driver. Modes:
  reduce   dataset.batch(B).reduce(...) counting records and their
           bytes: the whole loop runs inside TensorFlow (C++), with no Python
           and no function call per record (an unbatched reduce calls its
           function once per record and is much slower); the fastest way we
           found for tf.data to read a file, so the peer we compare with.
           B (argument 3, default 1024) is chosen by the run script to make
           batches of about 4 MiB: 1024 records of ~1 KB, 41 of ~100 KB
           (batches of 100 MB made tf.data ~20% slower; TFRecordDataset's
           default 256 KiB read buffer was faster than 1 or 16 MiB).
  iterate  `for record in dataset` in Python, as a training loop would
           iterate it; pays TensorFlow's per-element eager overhead.
TFRecordDataset checks the length and data CRC32C of every record, as
shardq does. Timing excludes importing TensorFlow.
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402


def main():
    mode, path = sys.argv[1], sys.argv[2]
    batch = int(sys.argv[3]) if len(sys.argv) > 3 else 1024
    dataset = tf.data.TFRecordDataset(path)
    start = time.perf_counter()
    if mode == "reduce":
        records, data_bytes = dataset.batch(batch).reduce(
            (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
            lambda acc, b: (acc[0] + tf.size(b, out_type=tf.int64),
                            acc[1] + tf.reduce_sum(
                                tf.cast(tf.strings.length(b), tf.int64))))
        records, data_bytes = int(records), int(data_bytes)
    elif mode == "iterate":
        records = data_bytes = 0
        for r in dataset:
            records += 1
            data_bytes += len(r.numpy())
    else:
        sys.exit(f"unknown mode {mode}")
    seconds = time.perf_counter() - start
    print(f"{seconds:.6f} {records} {data_bytes}")


if __name__ == "__main__":
    main()
