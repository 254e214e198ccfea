"""Fixtures of the command-line tests; helpers live in cli_helpers.py (a
module name of its own, so it does not clash with other conftest files)."""
import pytest

from cli_helpers import Coordinator


@pytest.fixture
def coordinator(tmp_path):
    c = Coordinator(tmp_path)
    yield c
    c.stop()


@pytest.fixture
def start_coordinator(tmp_path):
    started = []

    def start(*extra_args):
        c = Coordinator(tmp_path, *extra_args)
        started.append(c)
        return c

    yield start
    for c in started:
        c.stop()
