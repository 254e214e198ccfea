"""shardq with the real TensorFlow and TensorBoard (issue 19).

Usage: python tf_data.py WORK_DIR   (the python of a venv with tensorflow-cpu
and tensorboard from the package index, with the built shardq package on
PYTHONPATH; bench/interop/run makes one and calls this).

  1. PAI's tf.data example, with only the import changed (`import shardq.tf
     as pai` for `import pai`), reads every line of every epoch once.
  2. shardq.tf.input_dataset(queue) gives every work item of every epoch
     once; shardq.tf.dataset(queue, reader=...) gives every record of files
     written by tf.io.TFRecordWriter (and of text files) once per epoch,
     also through tf.data transformations (shuffle, batch, map with
     tf.io.parse_example).
  3. WorkQueue.add_summary() with no argument writes, under
     $SHARDQ_SUMMARY_DIR, an event file that tensorboard's EventAccumulator
     reads, with the queue's counters.
  4. TF 1.x queue code (tf.compat.v1 shuffle_batch) and shardq.shuffle_batch
     read the same multiset of records from the same files.

Prints one PASS/FAIL line per check and exits non-zero on any failure.
"""
import collections
import os
import pathlib
import sys
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf  # noqa: E402

import shardq  # noqa: E402
import shardq.tf  # noqa: E402

failures = 0


def check(name, ok, detail=""):
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def text_files(work, count=3, lines=200):
    paths = []
    for i in range(count):
        p = work / f"part-{i}.txt"
        p.write_text("".join(f"{i}-{j}\n" for j in range(lines)))
        paths.append(str(p))
    return paths


def tfrecord_files(work, count=2, per_file=150):
    paths = []
    for i in range(count):
        p = str(work / f"data-{i}.tfrecord")
        with tf.io.TFRecordWriter(p) as w:
            for j in range(per_file):
                label = i * per_file + j
                example = tf.train.Example(features=tf.train.Features(feature={
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=[label, -label])),
                    "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}))
                w.write(example.SerializeToString())
        paths.append(p)
    return paths


PAI_EXAMPLE = """
import tensorflow as tf
import pai

work_queue = pai.data.WorkQueue(files, num_epochs=2, shuffle=True, name="pai-tf-data")
dataset = tf.data.TextLineDataset(work_queue.input_dataset())
dataset = dataset.batch(64)
lines = []
for batch in dataset:
    lines += batch.numpy().tolist()
"""


def pai_example(work):
    files = text_files(work / "pai")
    code = PAI_EXAMPLE.replace("import pai\n", "import shardq.tf as pai\n")
    assert code.count("\n") == PAI_EXAMPLE.count("\n") and code != PAI_EXAMPLE
    namespace = {"files": files}
    exec(compile(textwrap.dedent(code), "pai_example", "exec"), namespace)  # noqa: S102
    expected = collections.Counter(
        line.encode() for f in files for line in open(f).read().split() for _ in range(2))
    got = collections.Counter(namespace["lines"])
    check("PAI tf.data example with only the import changed reads every line twice",
          got == expected, f"{sum(got.values())} lines, {sum(expected.values())} expected")


def items_and_records(work):
    files = text_files(work / "items")
    queue = shardq.WorkQueue(files, num_epochs=3, num_slices=12, name="tf-items")
    items = [x.decode() for x in shardq.tf.input_dataset(queue).as_numpy_iterator()]
    per_item = collections.Counter(items)
    check("input_dataset gives every item of every epoch once",
          len(per_item) == queue.num_items and set(per_item.values()) == {3},
          f"{len(items)} items, {queue.num_items} x 3 expected")

    queue = shardq.WorkQueue(files, num_epochs=2, num_slices=7, name="tf-text")
    lines = list(shardq.tf.dataset(queue, reader="text").as_numpy_iterator())
    expected = collections.Counter(
        line.encode() for f in files for line in open(f).read().split() for _ in range(2))
    check("dataset(reader='text') gives every line of every epoch once",
          collections.Counter(lines) == expected, f"{len(lines)} lines")

    records = tfrecord_files(work / "records")
    queue = shardq.WorkQueue(records, num_epochs=2, num_slices=5, name="tf-records")
    spec = {"x": tf.io.FixedLenFeature([2], tf.float32), "y": tf.io.FixedLenFeature([], tf.int64)}
    ds = (shardq.tf.dataset(queue, reader="tfrecord").shuffle(100, seed=1).batch(32)
          .map(lambda r: tf.io.parse_example(r, spec)))
    labels = [int(y) for batch in ds for y in batch["y"].numpy()]
    plain = [r.numpy() for r in tf.data.TFRecordDataset(records)]
    check("dataset(reader='tfrecord') of tf.io.TFRecordWriter files gives every record "
          "of every epoch once (shuffle, batch, tf.io.parse_example)",
          sorted(labels) == sorted(list(range(len(plain))) * 2), f"{len(labels)} records")
    try:
        list(shardq.tf.dataset(queue, reader="tfrecord").as_numpy_iterator())
        check("a second pass over a finished queue raises", False, "it ended quietly")
    except Exception as e:  # noqa: BLE001 - tf wraps the generator's error
        check("a second pass over a finished queue raises", "FAILED_PRECONDITION" in str(e)
              or "finished" in str(e), type(e).__name__)


def summary(work):
    logdir = work / "summary"
    os.environ["SHARDQ_SUMMARY_DIR"] = str(logdir)
    files = text_files(work / "summary-data", count=2, lines=50)
    queue = shardq.WorkQueue(files, num_epochs=2, num_slices=4, name="tb")
    writer = queue.add_summary(interval=0.05)
    n = sum(1 for _ in shardq.data.from_queue(queue, reader="text"))
    writer.stop()
    from tensorboard.backend.event_processing import event_accumulator
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    completed = acc.Scalars("shardq/tb/completed")[-1].value if "shardq/tb/completed" in tags \
        else None
    files_written = [p.name for p in pathlib.Path(logdir).rglob("events.out.tfevents.*")]
    check("add_summary() writes under SHARDQ_SUMMARY_DIR an event file tensorboard reads",
          n == 200 and completed == 8.0 and files_written,
          f"{len(tags)} scalar tags, completed={completed}, files={files_written}")


def tf1_queues(work):
    files = text_files(work / "tf1", count=2, lines=100)
    expected = collections.Counter(
        line.encode() for f in files for line in open(f).read().split() for _ in range(2))
    # TF 1.x graph code, the "before" of README's "Migrating from TF 1.x queues".
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        filename_queue = v1.train.string_input_producer(files, num_epochs=2)
        key, value = v1.TextLineReader().read(filename_queue)
        batch = v1.train.shuffle_batch([key, value], batch_size=16, capacity=200,
                                       min_after_dequeue=50, num_threads=2,
                                       allow_smaller_final_batch=True)
        init = [v1.local_variables_initializer(), v1.global_variables_initializer()]
    got_tf = collections.Counter()
    with v1.Session(graph=graph) as sess:
        sess.run(init)
        coord = v1.train.Coordinator()
        threads = v1.train.start_queue_runners(sess=sess, coord=coord)
        try:
            while not coord.should_stop():
                _, v = sess.run(batch)
                got_tf.update(v.tolist())
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
        coord.join(threads)
    # The same with shardq.
    queue = shardq.WorkQueue(files, num_epochs=2, name="tf1-after")
    key, value = shardq.TextLineReader().read(queue.input_producer())
    batch = shardq.shuffle_batch([key, value], batch_size=16, capacity=200,
                                 min_after_dequeue=50, num_threads=2,
                                 allow_smaller_final_batch=True)
    coord = shardq.Coordinator()
    threads = shardq.start_queue_runners(coord=coord)
    got = collections.Counter()
    try:
        while not coord.should_stop():
            _, v = batch.dequeue()
            got.update(v.tolist())
    except shardq.OutOfRangeError:
        pass
    finally:
        coord.request_stop()
    coord.join(threads)
    check("tf.compat.v1 shuffle_batch and shardq.shuffle_batch read the same records",
          got_tf == expected and got == expected,
          f"tf {sum(got_tf.values())}, shardq {sum(got.values())}, expected "
          f"{sum(expected.values())}")


def main():
    work = pathlib.Path(sys.argv[1])
    for sub in ("pai", "items", "records", "summary-data", "tf1"):
        (work / sub).mkdir(parents=True, exist_ok=True)
    print(f"tensorflow {tf.__version__}, shardq {shardq.__version__}", flush=True)
    for step in (pai_example, items_and_records, summary, tf1_queues):
        try:
            step(work)
        except Exception as e:  # noqa: BLE001 - report and go on
            check(step.__name__, False, f"{type(e).__name__}: {e}")
    print(f"tf_data: {failures} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
