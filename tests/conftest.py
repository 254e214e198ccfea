"""A watchdog for every test under tests/: a test still running after
SHARDQ_TEST_TIMEOUT seconds (default 300) names itself, dumps every
thread's stack and ends the run with exit status 1, so a hang shows where
it is instead of running into CI's limit with no output. (pytest-timeout
is not among the Debian packages this project installs.) And a temporary
directory for the whole run, under pytest's own (see _run_temp_dir)."""
import faulthandler
import os
import signal
import sys
import tempfile
import threading

import pytest

TIMEOUT_S = float(os.environ.get("SHARDQ_TEST_TIMEOUT", "300"))

# A shell that starts pytest in the background (`cmd &`, nohup) hands it
# SIGINT ignored, and Python then installs no KeyboardInterrupt handler:
# the Ctrl-C tests (_thread.interrupt_main, os.kill(SIGINT)) would wait
# forever. They test the behaviour of an interactive run, so give every
# run Python's own handler.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _expire(nodeid):
    sys.__stderr__.write(f"\n!!! {nodeid} still running after {TIMEOUT_S:g} s: "
                         "every thread's stack follows, then the run ends\n")
    faulthandler.dump_traceback(file=sys.__stderr__, all_threads=True)
    sys.__stderr__.flush()
    os._exit(1)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if TIMEOUT_S <= 0:
        yield
        return
    timer = threading.Timer(TIMEOUT_S, _expire, args=(item.nodeid,))
    timer.daemon = True
    timer.start()
    # The backstop where the interpreter itself is stuck (a thread holding
    # the GIL in native code): faulthandler's own thread needs no GIL.
    faulthandler.dump_traceback_later(TIMEOUT_S + 30, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        timer.cancel()


@pytest.fixture(scope="session", autouse=True)
def _run_temp_dir(tmp_path_factory):
    """TMPDIR for the run: what the code under test and the processes the
    tests start put in temporary files (shardq.torch's coordinator socket,
    multiprocessing's pymp-* directories) lands under pytest's directory of
    this run, which pytest rotates, not in the shared /tmp; even what a
    process killed on purpose by a test could not remove."""
    temp = tmp_path_factory.mktemp("tmp", numbered=False)
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(temp)
    tempfile.tempdir = None  # tempfile reads TMPDIR again
    yield temp
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None
