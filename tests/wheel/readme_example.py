"""Runs README.md's ```python blocks against an installed shardq wheel, from
a scratch directory, with the data their text describes, and checks the
results as tests/python/test_readme.py does. Blocks that use torch run only
where torch is installed. Used by tests/wheel/check-wheel:

    python readme_example.py README.md
"""
import pathlib
import re
import sys
import tempfile

import shardq


def make_example(label, width):
    """A tf.Example with "x" (width floats) and "y" (one int64)."""
    return shardq.example.serialize_example(
        {"x": [label + i / 1000.0 for i in range(width)], "y": label})


def main(readme):
    blocks = re.findall(r"```python\n(.*?)\n```", pathlib.Path(readme).read_text(), flags=re.S)
    assert len(blocks) >= 4, f"{readme}: only {len(blocks)} python blocks"
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="shardq-wheel-readme-"))
    files = []
    for i in range(3):
        p = tmp / f"part-{i}.txt"
        p.write_text("".join(f"{i}-{j}\n" for j in range(30)))
        files.append(str(p))
    tfrecords = []
    for f in range(2):
        path = tmp / f"part-{f}.tfrecord"
        with shardq.TFRecordWriter(str(path)) as w:
            for r in range(20):
                w.write(make_example(f * 20 + r, 784))
        tfrecords.append(str(path))
    numbers = tmp / "numbers.txt"
    numbers.write_text("".join(f"{i}\n" for i in range(100)))
    namespace = {"files": files, "tfrecords": tfrecords, "text_files": [str(numbers)],
                 "shardq": shardq}
    ran = skipped = 0
    for block in blocks:
        if "torch" in block and not have_torch:
            skipped += 1
            continue
        exec(compile(block, str(readme), "exec"), namespace)  # noqa: S102
        ran += 1
    assert namespace["lines"] == 2 * 90, namespace["lines"]
    assert sorted(namespace["labels"]) == sorted(list(range(40)) * 2)
    assert len(namespace["keys"]) > 0
    if have_torch:
        assert namespace["seen"] > 0
        assert sorted(namespace["after"]) == sorted(namespace["before"]) == list(range(100))
    why = " (they use torch, which is not installed)" if skipped else ""
    print(f"  README python blocks: {ran} ran, {skipped} skipped{why}; "
          f"shardq {shardq.__version__} from {pathlib.Path(shardq.__file__).parent}")


if __name__ == "__main__":
    main(sys.argv[1])
