"""One version from one source, and the `shardq` entry point of the Python
package: shardq.__version__, `shardq --version` and the wheel's metadata all
come from project(shardq VERSION ...) in the root CMakeLists.txt; the
package's `shardq` command (shardq._cli, also `python -m shardq`) runs the
C++ command line. The wheel itself is tested by tests/wheel/check-wheel."""
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import PACKAGE_DIR, REPO


def cmake_project_version():
    text = (REPO / "CMakeLists.txt").read_text()
    match = re.search(r"project\(shardq\s+VERSION\s+([0-9][0-9.]*)", text)
    assert match, "no project(shardq VERSION ...) in CMakeLists.txt"
    return match.group(1)


def built_binary():
    path = pathlib.Path(os.environ.get("SHARDQ_BIN", REPO / "build" / "bin")) / "shardq"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make build` first")
    return path


def run_package_cli(args, env_bin=None):
    """`python -m shardq ARGS` with the package from PACKAGE_DIR (build/python)."""
    env = {k: v for k, v in os.environ.items() if k != "SHARDQ_BIN"}
    env["PYTHONPATH"] = str(PACKAGE_DIR)
    if env_bin is not None:
        env["SHARDQ_BIN"] = str(env_bin)
    return subprocess.run([sys.executable, "-m", "shardq", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_package_version_is_the_cmake_project_version():
    import shardq
    assert shardq.__version__ == cmake_project_version()


def test_pyproject_takes_its_version_from_cmake():
    text = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', text, flags=re.M)
    assert not re.search(r"^version\s*=", text, flags=re.M)
    regex = re.search(r"^regex = '(.*)'$", text, flags=re.M).group(1)
    assert re.search(regex, (REPO / "CMakeLists.txt").read_text()).group("value") == \
        cmake_project_version()


def test_binary_prints_the_project_version():
    result = subprocess.run([str(built_binary()), "--version"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"shardq {cmake_project_version()}"


@pytest.mark.skipif(PACKAGE_DIR != REPO / "build" / "python",
                    reason="finds build/bin from build/python only")
def test_entry_point_finds_build_bin_from_build_python():
    # No SHARDQ_BIN: shardq._cli looks beside build/python, in build/bin.
    result = run_package_cli(["--version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"shardq {cmake_project_version()}"


def test_entry_point_runs_the_binary_help_and_usage_error():
    help_run = run_package_cli(["--help"], env_bin=built_binary().parent)
    assert help_run.returncode == 0, help_run.stderr
    assert "serve" in help_run.stdout and "worker" in help_run.stdout
    bad = run_package_cli(["no-such-verb"], env_bin=built_binary().parent)
    assert bad.returncode == 2, (bad.stdout, bad.stderr)  # the CLI's usage error


def test_entry_point_main_is_the_console_script(tmp_path):
    # The wheel's [project.scripts] shardq = "shardq._cli:main"; SHARDQ_BIN
    # may also name the binary itself. Exit status passes through (exec).
    missing = str(tmp_path / "missing.txt")
    code = f"import sys; from shardq._cli import main; sys.exit(main(['count', {missing!r}]))"
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR), SHARDQ_BIN=str(built_binary()))
    via_entry = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, timeout=60)
    direct = subprocess.run([str(built_binary()), "count", missing],
                            capture_output=True, text=True, timeout=60)
    assert direct.returncode not in (0, 2), direct.stderr
    assert via_entry.returncode == direct.returncode
    assert via_entry.stderr == direct.stderr


def test_entry_point_passes_signals_to_the_command(tmp_path):
    # The entry point execs: SIGTERM to the process started as
    # `python -m shardq serve` reaches serve itself, which stops cleanly
    # (exit 0) where a Python parent would have died of the signal.
    port_file = tmp_path / "port"
    env = dict(os.environ, PYTHONPATH=str(PACKAGE_DIR), SHARDQ_BIN=str(built_binary().parent))
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardq", "serve", "--listen", "127.0.0.1:0",
         "--port-file", str(port_file)], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert port_file.exists(), proc.stderr.read() if proc.poll() is not None else "no port"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_entry_point_without_a_binary_says_where_it_looked(tmp_path, monkeypatch, capsys):
    import shardq._cli
    monkeypatch.setattr(shardq._cli, "_PACKAGE_DIR", tmp_path / "python" / "shardq")
    monkeypatch.delenv("SHARDQ_BIN", raising=False)
    assert shardq._cli.find_binary() is None
    assert shardq._cli.main(["--version"]) == 1
    err = capsys.readouterr().err
    assert "shardq binary is missing" in err and str(tmp_path / "python" / "shardq" / "_bin") in err
