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


@pytest.fixture
def etcd_cluster(tmp_path):
    """A started 3-member etcd cluster on loopback (skipped without etcd)."""
    from etcd_cluster import EtcdCluster
    cluster = EtcdCluster(tmp_path, members=3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def etcd_single(tmp_path):
    """A started 1-member etcd on loopback (skipped without etcd)."""
    from etcd_cluster import EtcdCluster
    cluster = EtcdCluster(tmp_path, members=1)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
