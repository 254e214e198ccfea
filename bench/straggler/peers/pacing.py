"""Per-record pacing and the start handshake shared by the peer consumers.

The same rules as bench/straggler/worker.cc, so that every mode of the
benchmark emulates the same training step:
  * record k of a run is finished no earlier than start + k * record_us *
    slowdown (a steady schedule: sleep only when ahead of it);
  * time spent waiting for input moves the schedule back by as long, so
    waiting for data costs time as it would a trainer.
"""

import time


class Pacer:
    def __init__(self, micros_per_record):
        self._step = micros_per_record * 1e-6
        self._next = time.monotonic()

    def waited(self, seconds):
        self._next += seconds

    def record(self):
        self._next += self._step
        ahead = self._next - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def wait_until(unix_seconds):
    delay = unix_seconds - time.time()
    if delay > 0:
        time.sleep(delay)


def consume(batches, slowdown, record_us, keys_path):
    """Reads `batches` (an iterator of lists of byte or str lines) with
    pacing; writes each line's first token to keys_path. Returns the result
    dict the harness expects (records, first, last: unix seconds)."""
    pacer = Pacer(record_us * slowdown)
    records = 0
    first = None
    last = time.time()
    with open(keys_path, "w") as keys:
        while True:
            asked = time.monotonic()
            try:
                batch = next(batches)
            except StopIteration:
                break
            pacer.waited(time.monotonic() - asked)
            for line in batch:
                if isinstance(line, bytes):
                    line = line.decode()
                pacer.record()
                keys.write(line.split(" ", 1)[0] + "\n")
                records += 1
            if len(batch):
                last = time.time()
                if first is None:
                    first = last
    return {"records": records, "first": first if first is not None else last,
            "last": last}
