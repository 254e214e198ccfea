#!/usr/bin/env python3
"""Starts an etcd cluster on free loopback ports for a bench's bash run script.

    eval "$(/usr/bin/python3 bench/etcd_members.py DIR [--members 3])"

sets ETCD_ENDPOINTS=H:P,H:P,... (what `shardq serve --etcd` takes) and
ETCD_PIDS="P1 P2 P3" once every member reports a healthy cluster. The members
keep running after this program exits, with their data dirs and logs under
DIR; the caller stops them by those PIDs. If a member does not come up, this
program stops the ones it started and exits 1 naming it.

The members are tests/cli/etcd_cluster.py's EtcdCluster (one way of running
etcd for the tests and the benches), which needs the `etcd` binary (Debian
package etcd-server).
"""
import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "cli"))
from etcd_cluster import EtcdCluster  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path, help="where the members keep data and logs")
    parser.add_argument("--members", type=int, default=3, choices=(1, 3))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    cluster = None
    try:
        cluster = EtcdCluster(args.dir, members=args.members)  # no etcd binary: pytest's Skipped
        cluster.start()
    except BaseException as e:  # noqa: BLE001 (also KeyboardInterrupt: stop what started)
        if cluster is not None:
            cluster.stop()
        print(f"etcd_members: {e}", file=sys.stderr)
        return 1
    pids = " ".join(str(m.proc.pid) for m in cluster.members)
    print(f"ETCD_ENDPOINTS={cluster.endpoints}")
    print(f'ETCD_PIDS="{pids}"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
