"""WorkQueue.add_summary: a background thread samples the queue's water
level (pending, leased, completed, per epoch; take rate; per-worker
progress; lease expiries; duplicates) into TensorBoard event files."""
import datetime
import os
import socket
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


def resolve_logdir(logdir):
    """Where add_summary writes: a directory as given; a torch SummaryWriter's
    log dir; None: $SHARDQ_SUMMARY_DIR, else runs/<Mon DD_HH-MM-SS>_<host>
    (torch's SummaryWriter default), made if missing."""
    if logdir is None:
        logdir = os.environ.get("SHARDQ_SUMMARY_DIR") or os.path.join(
            "runs", datetime.datetime.now().strftime("%b%d_%H-%M-%S") + "_" +
            socket.gethostname())
    elif not isinstance(logdir, (str, os.PathLike)):
        get = getattr(logdir, "get_logdir", None)
        if get is None:
            raise TypeError(f"logdir must be a path or a SummaryWriter, got "
                            f"{type(logdir).__name__}")
        logdir = get()
    os.makedirs(logdir, exist_ok=True)
    return os.fspath(logdir)


def start(queue, logdir, interval=10.0):
    return SummaryThread(queue, logdir, interval)
