"""tf.data service peer of the straggler benchmark.

  tfdata_peer.py server --workers K
      Runs a tf.data service dispatcher and K workers in this process (the
      servers bind a free port; every client here connects through
      localhost). Prints "ready <dispatcher target>", then serves until its
      stdin is closed.

  tfdata_peer.py consumer --dispatcher TARGET --index I
      One training process. Prints "loaded" once TensorFlow is imported,
      then serves runs, one JSON command per stdin line:
        {"job": name, "files": [...], "batch": B, "slowdown": s,
         "record_us": t, "keys_out": path}
      For each it builds TextLineDataset(files).batch(B) distributed with
      ShardingPolicy.DYNAMIC under the shared job name (every consumer of a
      run names the same job, so each element goes to exactly one of them,
      first come first served), creates its iterator, prints "ready", reads
      the common start time (unix seconds) from the next stdin line, reads
      with the per-record pacing of pacing.py and prints "result " + a JSON
      {"records", "first", "last"}. {"quit": true} ends it.

The tf.data workers read the files (cheap); the emulated per-record work,
and so the straggling, is in the consumers, as in training.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from pacing import consume, wait_until  # noqa: E402


def serve(args):
    import tensorflow as tf

    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    address = dispatcher.target.split("://", 1)[1]
    workers = [
        service.WorkerServer(service.WorkerConfig(dispatcher_address=address))
        for _ in range(args.workers)
    ]
    print("ready", dispatcher.target, flush=True)
    sys.stdin.read()
    del workers


def consumer(args):
    import tensorflow as tf

    service = tf.data.experimental.service
    print("loaded", flush=True)
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        command = json.loads(line)
        if command.get("quit"):
            return
        dataset = tf.data.TextLineDataset(command["files"]).batch(command["batch"])
        dataset = dataset.apply(
            service.distribute(
                processing_mode=service.ShardingPolicy.DYNAMIC,
                service=args.dispatcher,
                job_name=command["job"],
            )
        )
        iterator = iter(dataset)
        print("ready", flush=True)
        wait_until(float(sys.stdin.readline()))
        batches = (batch.numpy() for batch in iterator)
        result = consume(batches, command["slowdown"], command["record_us"],
                         command["keys_out"])
        print("result", json.dumps(result), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="role", required=True)
    server_parser = sub.add_parser("server")
    server_parser.add_argument("--workers", type=int, default=2)
    consumer_parser = sub.add_parser("consumer")
    consumer_parser.add_argument("--dispatcher", required=True)
    consumer_parser.add_argument("--index", type=int, required=True)
    args = parser.parse_args()
    if args.role == "server":
        serve(args)
    else:
        consumer(args)


if __name__ == "__main__":
    main()
