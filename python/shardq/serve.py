"""`python -m shardq.serve --listen ADDRESS`: a coordinator in its own
process (used by shardq.torch for DataLoader workers). Stops on SIGTERM, and
with --exit-with-parent when the process that started it is gone (even by
SIGKILL), so a killed trainer leaves no coordinator holding its port."""
import argparse
import os
import signal
import threading

from shardq import _shardq


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True, help="HOST:PORT or unix:PATH")
    parser.add_argument("--token", default="")
    parser.add_argument("--state-dir", default="")
    parser.add_argument("--exit-with-parent", action="store_true")
    args = parser.parse_args()
    parent = os.getppid()
    server = _shardq._Server(args.listen, args.token, args.state_dir)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(0.5):
        if args.exit_with_parent and os.getppid() != parent:
            break
    server.stop()


if __name__ == "__main__":
    main()
