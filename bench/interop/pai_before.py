"""Runs the README's PAI "before" snippet with real TensorFlow.

PAI-TF (Alibaba's TensorFlow build with pai.data.WorkQueue) is not on PyPI,
so `pai.data.WorkQueue` is stood in for here by what it wraps in TF 1.x
graph code: a queue of work names that `reader.read_up_to` consumes
(tf.compat.v1.train.string_input_producer with the same num_epochs and
shuffle). Every other line of the snippet runs as written, against
tensorflow-cpu's tf.compat.v1 graph API: tf.TextLineReader,
reader.read_up_to(queue, 256), queue runners. The check: the "before" code
reads every line num_epochs times, exactly as the README's "after" code with
shardq does (tests/python/test_readme.py checks that side).

Usage: python pai_before.py README.md WORKDIR   (python of a venv with TF)
"""
import collections
import os
import re
import sys
import types

import tensorflow as tf


def before_snippet(readme):
    text = open(readme).read()
    m = re.search(r"```\n# before\n(work_queue = pai\.data\.WorkQueue.*?)```", text, flags=re.S)
    if not m:
        raise SystemExit("pai_before: README has no PAI '# before' snippet")
    return m.group(1)


class StandInWorkQueue:
    """pai.data.WorkQueue's call shape over TF 1.x's own input queue."""

    def __init__(self, works, num_epochs=1, shuffle=True, **unused):
        self._producer = tf.compat.v1.train.string_input_producer(
            works, num_epochs=num_epochs, shuffle=shuffle)

    def input_producer(self):
        return self._producer


def main():
    readme, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    files = []
    for i in range(3):
        path = os.path.join(workdir, f"part-{i}.txt")
        with open(path, "w") as f:
            f.writelines(f"{i}-{j}\n" for j in range(30))
        files.append(path)
    tf.compat.v1.disable_eager_execution()
    pai = types.SimpleNamespace(data=types.SimpleNamespace(WorkQueue=StandInWorkQueue))
    namespace = {"pai": pai, "tf": tf.compat.v1, "files": files}
    exec(compile(before_snippet(readme), "README.md (PAI before)", "exec"), namespace)
    values = namespace["values"]
    seen = collections.Counter()
    with tf.compat.v1.Session() as sess:
        sess.run([tf.compat.v1.global_variables_initializer(),
                  tf.compat.v1.local_variables_initializer()])
        coord = tf.compat.v1.train.Coordinator()
        threads = tf.compat.v1.train.start_queue_runners(sess=sess, coord=coord)
        try:
            while True:
                for v in sess.run(values):
                    seen[v.decode()] += 1
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
            coord.join(threads)
    expected = {f"{i}-{j}" for i in range(3) for j in range(30)}
    if set(seen) != expected or set(seen.values()) != {2}:
        raise SystemExit(f"pai_before: FAIL: {len(seen)} distinct lines, counts "
                         f"{sorted(set(seen.values()))}; expected 90 lines x 2 epochs")
    print(f"pai_before: OK: the README's PAI snippet read {sum(seen.values())} lines "
          f"(90 lines x 2 epochs) with tf.compat.v1 {tf.__version__}")


if __name__ == "__main__":
    main()
