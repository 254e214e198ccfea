"""WorkQueue.add_summary: a background thread samples the queue's water
level (pending, leased, completed, per epoch; take rate; per-worker
progress; lease expiries; duplicates) into TensorBoard event files."""
import threading

from shardq import _shardq


class SummaryThread:
    """Samples every ``interval`` seconds until stop() (also at exit)."""

    def __init__(self, queue, logdir, interval):
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval}")
        self._writer = _shardq._QueueSummary(queue, str(logdir))
        self._interval = float(interval)
        self._stop = threading.Event()
        self._writer.sample()  # fail now, in the caller, if logdir is unusable
        self._thread = threading.Thread(target=self._run, name="shardq-summary", daemon=True)
        self._thread.start()

    @property
    def path(self):
        """The event file being written."""
        return self._writer.path

    def _run(self):
        while not self._stop.wait(self._interval):
            try:
                self._writer.sample()
            except Exception:  # the coordinator may be restarting; try again
                pass

    def stop(self):
        """Stops sampling after one last sample."""
        self._stop.set()
        self._thread.join()
        self._writer.sample()


def start(queue, logdir, interval=10.0):
    return SummaryThread(queue, logdir, interval)
