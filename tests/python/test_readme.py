"""Every ```python block of README.md runs, in order, in one namespace that
holds the data the README's text describes; the results are checked."""
import pathlib
import re

import pytest

from example_data import write_files

torch = pytest.importorskip("torch")

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def python_blocks():
    return re.findall(r"```python\n(.*?)\n```", README.read_text(), flags=re.S)


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    blocks = python_blocks()
    assert len(blocks) >= 4
    files = []
    for i in range(3):
        p = tmp_path / f"part-{i}.txt"
        p.write_text("".join(f"{i}-{j}\n" for j in range(30)))
        files.append(str(p))
    numbers = tmp_path / "numbers.txt"
    numbers.write_text("".join(f"{i}\n" for i in range(100)))
    namespace = {"files": files,
                 "tfrecords": write_files(tmp_path, 2, 20, width=784),
                 "text_files": [str(numbers)]}
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)  # noqa: S102
    assert namespace["lines"] == 2 * 90          # 2 epochs of 90 lines
    assert namespace["seen"] > 0
    assert len(namespace["keys"]) > 0
    assert sorted(namespace["labels"]) == sorted(list(range(40)) * 2)
    assert sorted(namespace["after"]) == sorted(namespace["before"]) == list(range(100))


def test_docs_stand_on_their_own():
    # SPEC.md is not in the repository: no user-facing text may send readers there.
    import inspect
    import shardq
    import shardq.data
    import shardq.torch
    repo = README.parent
    texts = {str(p): p.read_text() for p in [README, *sorted((repo / "docs").glob("*.md"))]}
    for module in (shardq, shardq.data, shardq.torch):
        texts[module.__name__] = module.__doc__ or ""
        for name, obj in vars(module).items():
            if inspect.isclass(obj) or inspect.isfunction(obj):
                texts[f"{module.__name__}.{name}"] = inspect.getdoc(obj) or ""
                for attr, member in vars(obj).items() if inspect.isclass(obj) else ():
                    texts[f"{module.__name__}.{name}.{attr}"] = inspect.getdoc(member) or ""
    assert [where for where, text in texts.items() if "SPEC.md" in text] == []
