"""The `shardq` console command of the wheel, and `python -m shardq`.

Both run the C++ command line (the same program as `build/bin/shardq`)
with the arguments given: the process is replaced by it (exec), so its
output, exit status and signals are the command's own. The binary is found,
in this order:

1. `shardq/_bin/shardq`, where the wheel installs it;
2. `$SHARDQ_BIN`: the binary, or the directory that holds it (as the tests
   set it, e.g. `build/bin`);
3. `build/bin/shardq`, when the package runs from `build/python` (make build).
"""
import os
import pathlib
import sys

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent


def find_binary():
    """The path of the `shardq` binary, or None when there is none."""
    candidates = [_PACKAGE_DIR / "_bin" / "shardq"]
    env = os.environ.get("SHARDQ_BIN")
    if env:
        env_path = pathlib.Path(env)
        candidates.append(env_path / "shardq" if env_path.is_dir() else env_path)
    candidates.append(_PACKAGE_DIR.parent.parent / "bin" / "shardq")  # build/python/shardq
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def main(argv=None):
    """Execs the `shardq` binary with argv (default: this process's arguments)."""
    args = sys.argv[1:] if argv is None else list(argv)
    binary = find_binary()
    if binary is None:
        sys.stderr.write(
            "shardq: the shardq binary is missing: looked in "
            f"{_PACKAGE_DIR / '_bin'}, $SHARDQ_BIN and {_PACKAGE_DIR.parent.parent / 'bin'} "
            "(install the wheel, or run `make build`)\n")
        return 1
    sys.stdout.flush()
    sys.stderr.flush()
    # argv[0] "shardq": the command's usage lines name it as the user typed it.
    os.execv(str(binary), ["shardq", *args])
    return 1  # not reached: execv replaces the process or raises OSError


if __name__ == "__main__":
    sys.exit(main())
