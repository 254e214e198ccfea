"""The Python package tests run against the build tree: build/python must
hold the shardq package (make build puts it there)."""
import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE_DIR = pathlib.Path(os.environ.get("SHARDQ_PYTHONPATH", REPO / "build" / "python"))
if not (PACKAGE_DIR / "shardq").is_dir():
    raise RuntimeError(f"{PACKAGE_DIR}/shardq is missing: run `make build` first")
sys.path.insert(0, str(PACKAGE_DIR))


@pytest.fixture
def text_files(tmp_path):
    def make(count, lines, prefix="f"):
        paths = []
        for i in range(count):
            p = tmp_path / f"{prefix}{i}.txt"
            p.write_text("".join(f"{prefix} {i} line {j}\n" for j in range(lines)))
            paths.append(str(p))
        return paths
    return make
