"""`python -m shardq.serve --listen ADDRESS`: a coordinator in its own
process (used by shardq.torch for DataLoader workers). Stops on SIGTERM."""
import argparse
import signal
import threading

from shardq import _shardq


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True, help="HOST:PORT or unix:PATH")
    parser.add_argument("--token", default="")
    parser.add_argument("--state-dir", default="")
    args = parser.parse_args()
    server = _shardq._Server(args.listen, args.token, args.state_dir)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    server.stop()


if __name__ == "__main__":
    main()
