"""Ray Data peer of the straggler benchmark.

  ray_peer.py --workers M [--cpus C]
      Starts a local Ray instance (C CPUs for Ray Data's read tasks) and M
      consumer actors (one process each, num_cpus=0), prints "loaded", then
      serves runs, one JSON command per stdin line:
        {"workers": N (<= M), "files": [...], "blocks": K or null, "batch": B,
         "slowdowns": [N floats], "record_us": t, "keys_dir": dir}
      For each it builds ray.data.read_text(files, override_num_blocks=K)
      (null: Ray's own choice) .streaming_split(N, equal=False) -- the
      dynamic split: blocks go to whichever consumer
      asks next -- hands split i to actor i < N, prints "ready" once every actor
      holds its split, reads the common start time (unix seconds) from the
      next stdin line, lets every actor read its split with the per-record
      pacing of pacing.py (iter_batches of B rows) and prints one line,
      "result " + the JSON list of the actors' results {"records", "first",
      "last"} (Ray may print other lines).
      {"quit": true} ends it.
"""

import argparse
import json
import os
import sys

PEERS_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, PEERS_DIR)
# The actors' processes import pacing.py too.
os.environ["PYTHONPATH"] = PEERS_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Keep every Ray process on 127.0.0.1, so the benchmark's traffic stays on
# loopback. Ray resolves "127.0.0.1" given to ray.init to the host's routable
# address unless clusters are disabled, which this variable does
# (ray/_private/services.py: get_node_ip_address).
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"

import ray  # noqa: E402

from pacing import consume, wait_until  # noqa: E402


@ray.remote(num_cpus=0)
class Consumer:
    def __init__(self, index):
        self._index = index
        self._job = None

    def ping(self):
        return self._index

    def prepare(self, split, slowdown, record_us, batch, keys_out):
        self._job = (split, slowdown, record_us, batch, keys_out)
        return True

    def run(self, start_at):
        split, slowdown, record_us, batch, keys_out = self._job
        wait_until(start_at)
        batches = (
            b["text"] for b in split.iter_batches(batch_size=batch, batch_format="numpy")
        )
        return consume(batches, slowdown, record_us, keys_out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, required=True)
    parser.add_argument("--cpus", type=int, default=os.cpu_count())
    args = parser.parse_args()

    ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    consumers = [Consumer.remote(i) for i in range(args.workers)]
    ray.get([c.ping.remote() for c in consumers])
    print("loaded", flush=True)
    while True:
        line = sys.stdin.readline()
        if not line:
            break
        command = json.loads(line)
        if command.get("quit"):
            break
        n = command["workers"]
        active = consumers[:n]
        dataset = ray.data.read_text(command["files"],
                                     override_num_blocks=command.get("blocks"))
        splits = dataset.streaming_split(n, equal=False)
        ray.get([
            c.prepare.remote(
                splits[i], command["slowdowns"][i], command["record_us"],
                command["batch"], os.path.join(command["keys_dir"], f"keys-{i}.txt"))
            for i, c in enumerate(active)
        ])
        print("ready", flush=True)
        start_at = float(sys.stdin.readline())
        results = ray.get([c.run.remote(start_at) for c in active])
        print("result", json.dumps(results), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()
