"""Nothing to start in a cluster: when a job of several processes names no
coordinator (no address, no SHARDQ_ADDRESS, no "shardq" job in TF_CONFIG),
one of its own processes serves the queue and the others connect to it.

* TF_CONFIG: task 0 of the ``chief`` job (else ``master``, else ``ps``,
  else ``worker``) serves on its host at ``SHARDQ_PORT`` (default 7077).
* torchrun (``WORLD_SIZE`` > 1): rank 0 serves on
  ``MASTER_ADDR:SHARDQ_PORT``.

The rule is C++ (``FindClusterCoordinator`` in
src/client/cluster_coordinator.cc); this module starts the server, once per
process, when a WorkQueue is made in the serving task (not in a DataLoader
worker, which would take it down with it). ``WorkQueue(..., state_dir=DIR)``
makes that coordinator durable. If the port is already served (a ``shardq
serve`` the job started, as before), the task connects to it instead. The
serving process must live until the other tasks are done with the queue.
shardq.torch's WorkQueueDataset, made in the serving task's main process,
runs that coordinator as a child process instead (`python -m shardq.serve`):
its DataLoader workers fork from that process, and a forked copy of a
running gRPC server hangs them.
"""
import atexit
import sys
import threading

from shardq import _shardq
from shardq.errors import UnavailableError

_lock = threading.Lock()
_server = None  # the coordinator this process serves, for the process's life


def _in_dataloader_worker():
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return torch.utils.data.get_worker_info() is not None
    except Exception:  # noqa: BLE001 - an odd torch: assume the main process
        return False


def resolve(address, state_dir=None, token=None):
    """The address a WorkQueue should use: ``address`` when given; else the
    job's in-process coordinator (started here when this task serves it);
    else None (SHARDQ_ADDRESS, a TF_CONFIG "shardq" job, or this process
    alone, as the native discovery decides)."""
    if address:
        return address
    found = _shardq._cluster_coordinator("")
    if found is None:
        return None
    where, serve_here, _source = found
    if serve_here and not _in_dataloader_worker():
        _serve(where, state_dir, token)
    return where


def serving():
    """The port this process serves its job's queue on, or None."""
    return None if _server is None else _server.port


def _serve(where, state_dir, token):
    global _server
    with _lock:
        if _server is not None:
            return
        try:
            _server = _shardq._Server(where, token or "", state_dir or "")
        except UnavailableError as e:
            if "in use" not in str(e):
                raise
            # Already served there (e.g. `shardq serve` started by the job).


@atexit.register
def _stop():
    global _server
    if _server is not None:
        _server.stop()
        _server = None
