#!/usr/bin/python3
"""Starts an etcd cluster on free loopback ports for a bench's bash run script.

    ETCD_ENDPOINTS="$(/usr/bin/python3 bench/etcd_members.py DIR [--members 3])"

prints H:P,H:P,... (what `shardq serve --etcd` takes) once every member
reports a healthy cluster. Each member's PID is appended to DIR/etcd.pids as
soon as it is started, so that the caller's exit trap can stop them by PID
even if it is interrupted while this program waits. The members keep
running after this program exits, with their data dirs and logs under DIR.
If a member does not come up, this program stops the ones it started and
exits 1 naming it.

The members are tests/cli/etcd_cluster.py's EtcdCluster (one way of running
etcd for the tests and the benches), which needs the `etcd` binary (Debian
package etcd-server).
"""
import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "cli"))
from etcd_cluster import EtcdCluster  # noqa: E402


class RecordedCluster(EtcdCluster):
    """An EtcdCluster that appends each member's PID to `pid_file` when it starts it."""

    def __init__(self, root, members, pid_file):
        super().__init__(root, members=members)
        self.pid_file = pid_file

    def _launch(self, member, state):
        super()._launch(member, state)
        with open(self.pid_file, "a") as f:
            f.write(f"{member.proc.pid}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path, help="where the members keep data and logs")
    parser.add_argument("--members", type=int, default=3, choices=(1, 3))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    cluster = None
    try:
        # No etcd binary: the constructor raises pytest's Skipped, naming the package.
        cluster = RecordedCluster(args.dir, args.members, args.dir / "etcd.pids")
        cluster.start()
    except BaseException as e:  # noqa: BLE001 (also KeyboardInterrupt: stop what started)
        if cluster is not None:
            cluster.stop()
        print(f"etcd_members: {e}", file=sys.stderr)
        return 1
    print(cluster.endpoints)
    return 0


if __name__ == "__main__":
    sys.exit(main())
