"""The GPU feed benchmark (issue 22): does the accelerator wait for data?

Makes a synthetic tf.Example TFRecord data set with shardq's own writer
(images as one bytes feature of uint8 pixels + an int64 label), then trains
a model for a fixed number of steps, fed each of these ways in turn:

  synthetic          one device batch reused every step: the upper bound
  shardq.data        from_queue(queue).batch().parse_example().prefetch():
                     C++ reading, CRC checks, batching and parsing (the image
                     decoded to a uint8 array by FixedLen(shape, "uint8"));
                     a thread pins each batch; non_blocking copy to the device
  WorkQueueDataset   shardq.torch.WorkQueueDataset in
                     DataLoader(num_workers=k, pin_memory=True)
  DataLoader+Python  the peer: DataLoader(num_workers=k, pin_memory=True)
                     over the same files, a plain Python TFRecord reader and
                     Python tf.Example decoding (written here; no tensorflow)
  shared queue xP    P training processes on this machine, each with its own
                     model, fed by shardq.data from one queue served by
                     `shardq serve` on 127.0.0.1

Normalisation (uint8 -> float, mean/std, channels-last) runs on the device
in every row. Per row: images/s, mean step time, the fraction of each step
the device waited for input (CUDA events around fetch + copy vs the whole
step; wall clock on CPU), CPU use (cores: CPU seconds of the process and its
children / wall seconds), peak device memory, and the ratio to synthetic.

Every row runs in its own process with its own deadline (a crash or hang
is that row's error; the other rows still run); results are rewritten to
OUT/gpu_feed.md and OUT/gpu_feed.json after every row, and the whole run
ends inside --minutes.

Usage: gpu_feed.py [--device auto|cuda|cpu] [--minutes M] [--out DIR] [--data DIR]
  --device cuda: ResNet-50 (torchvision), channels-last, bf16 autocast,
                 batch 256, SGD; 3x224x224 images, >= 2 GiB of data
  --device cpu:  a small conv net, 3x32x32 images, a few hundred records
                 (the mode `make test` runs, so the script cannot rot)
Needs torch (and torchvision for cuda), numpy and an importable shardq.
"""
import argparse
import faulthandler
import json
import math
import multiprocessing
import os
import platform
import queue as queue_mod
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_PACKAGE = os.path.join(HERE, "..", "..", "build", "python")
DATA_FORMAT = 1  # bump when the records written change

PROFILES = {
    # ~2.01 GiB of pixels: 14336 records of 150528 bytes, 56 batches of 256.
    "cuda": dict(model="resnet50", shape=(3, 224, 224), classes=1000, batch=256,
                 records=14336, files=16, writers=8, slices=64, warmup=10,
                 max_steps=300, min_steps=20, processes=2, teardown_s=15.0,
                 min_row_s=30.0),
    "cpu": dict(model="tiny", shape=(3, 32, 32), classes=10, batch=32,
                records=512, files=4, writers=2, slices=16, warmup=3,
                max_steps=12, min_steps=2, processes=2, teardown_s=8.0,
                min_row_s=10.0),
}
ROWS = ("synthetic", "shardq.data", "WorkQueueDataset", "DataLoader+Python", "shared queue")


def log(msg):
    print(f"[gpu_feed {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def import_shardq():
    """shardq from the path, else from the repo's build tree; the path is
    exported so row processes and shardq's own children find it too."""
    try:
        import shardq  # noqa: F401
    except ImportError:
        if not os.path.isdir(os.path.join(REPO_PACKAGE, "shardq")):
            raise
        sys.path.insert(0, os.path.abspath(REPO_PACKAGE))
        import shardq  # noqa: F401
    path = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["shardq"].__file__)))
    parts = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if path not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([path] + [p for p in parts if p])
    return sys.modules["shardq"]


# --- tf.Example decoding by hand, for the Python peer (shardq.example writes) ---

def _read_varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf, start, end):
    """(field number, wire type, value or (start, end) of a length-delimited
    payload) of the protobuf message in buf[start:end]."""
    pos = start
    while pos < end:
        tag, pos = _read_varint(buf, pos)
        wire = tag & 7
        if wire == 2:
            n, pos = _read_varint(buf, pos)
            yield tag >> 3, wire, (pos, pos + n)
            pos += n
        elif wire == 0:
            v, pos = _read_varint(buf, pos)
            yield tag >> 3, wire, v
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"not a tf.Example: wire type {wire} at byte {pos}")


def decode_example(buf):
    """{name: list of memoryviews (bytes_list) or ints (int64_list)} of a
    serialised tf.Example; float lists are skipped (none here)."""
    out = {}
    for f, _, (fs, fe) in (x for x in _fields(buf, 0, len(buf)) if x[0] == 1 and x[1] == 2):
        for g, _, (es, ee) in (x for x in _fields(buf, fs, fe) if x[0] == 1 and x[1] == 2):
            key, value = None, None
            for h, wire, v in _fields(buf, es, ee):
                if h == 1 and wire == 2:
                    key = bytes(buf[v[0]:v[1]]).decode()
                elif h == 2 and wire == 2:
                    value = v
            if key is None or value is None:
                continue
            for kind, wire, (ls, le) in _fields(buf, value[0], value[1]):
                if kind == 1:  # bytes_list
                    out[key] = [buf[s:e] for n, w, (s, e) in _fields(buf, ls, le) if n == 1]
                elif kind == 3:  # int64_list, packed or not
                    vals = []
                    for n, w, v in _fields(buf, ls, le):
                        if n == 1 and w == 0:
                            vals.append(v)
                        elif n == 1 and w == 2:
                            p = v[0]
                            while p < v[1]:
                                x, p = _read_varint(buf, p)
                                vals.append(x)
                    out[key] = vals
    return out


# --- The data set ---

def _write_file(task):
    path, first, count, shape, classes, seed = task
    import numpy as np
    import shardq
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    tmp = path + ".partial"
    with shardq.TFRecordWriter(tmp) as w:
        for r in range(count):
            w.write(shardq.example.serialize_example(
                {"image": rng.bytes(size), "label": int((first + r) % classes)}))
    os.replace(tmp, path)
    return os.path.getsize(path)


def make_data(data_dir, prof, timeout):
    """The files of the data set, written in parallel (reused when data_dir
    already holds a set made with the same parameters)."""
    os.makedirs(data_dir, exist_ok=True)
    files, records = prof["files"], prof["records"]
    want = dict(format=DATA_FORMAT, shape=list(prof["shape"]), classes=prof["classes"],
                records=records, files=files)
    paths = [os.path.join(data_dir, f"part-{i:03d}-of-{files:03d}.tfrecord") for i in range(files)]
    manifest = os.path.join(data_dir, "manifest.json")
    try:
        with open(manifest) as f:
            have = json.load(f)
        if (have.get("params") == want and
                all(os.path.getsize(p) == s for p, s in zip(paths, have["sizes"]))):
            log(f"data: reusing {files} files in {data_dir} ({size_text(sum(have['sizes']))})")
            return paths, dict(have, reused=True, seconds=0.0)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    per = records // files
    tasks = [(p, i * per, per, tuple(prof["shape"]), prof["classes"], 1000 + i)
             for i, p in enumerate(paths)]
    start = time.monotonic()
    with multiprocessing.get_context("fork").Pool(prof["writers"]) as pool:
        # A writer that dies would leave map() waiting for ever: bounded.
        sizes = pool.map_async(_write_file, tasks, chunksize=1).get(timeout=timeout)
    seconds = time.monotonic() - start
    info = dict(params=want, sizes=sizes, bytes=sum(sizes))
    with open(manifest, "w") as f:
        json.dump(info, f)
    log(f"data: wrote {files} files, {per * files} records, {size_text(sum(sizes))} "
        f"in {seconds:.1f} s with {prof['writers']} processes into {data_dir}")
    return paths, dict(info, reused=False, seconds=round(seconds, 2))


# --- CPU use of a process tree (Linux /proc; rusage elsewhere) ---

def tree_cpu(root):
    """{pid: CPU seconds} of `root` and its live descendants."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    parent, cpu = {}, {}
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        pids = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parent[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    if root not in cpu:
        import resource
        r = resource.getrusage(resource.RUSAGE_SELF)
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        return {root: r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime}
    keep, frontier = {root}, [root]
    while frontier:
        frontier = [p for p, pp in parent.items() if pp in frontier and p not in keep]
        keep.update(frontier)
    return {p: cpu[p] for p in keep}


def cpu_between(before, after):
    return sum(v - before.get(p, 0.0) for p, v in after.items())


# --- Feeds: iterators of (uint8 images [B, C, H, W], int64 labels [B]) on the host ---

def peer_dataset(paths, shape):
    """The peer's dataset; its class is made on first use (the orchestrator
    never imports torch) and kept as a module attribute, so it pickles."""
    cls = globals().get("PythonTFRecordImages")
    if cls is None:
        import torch.utils.data
        cls = type("PythonTFRecordImages", (torch.utils.data.IterableDataset,),
                   {k: v for k, v in vars(_PeerMethods).items()
                    if k not in ("__dict__", "__weakref__")})
        cls.__module__ = __name__
        globals()["PythonTFRecordImages"] = cls
    return cls(paths, shape)


class _PeerMethods:
    """The peer: a plain Python TFRecord reader (framing only; CRCs are not
    checked, which favours it) + Python tf.Example decoding, files split
    statically across DataLoader workers, epochs repeated without end."""

    def __init__(self, paths, shape):
        self.paths, self.shape = list(paths), tuple(shape)

    def __iter__(self):
        import numpy as np
        import torch
        info = torch.utils.data.get_worker_info()
        mine = self.paths[info.id::info.num_workers] if info else self.paths
        size = int(np.prod(self.shape))
        while mine:
            for path in mine:
                with open(path, "rb") as f:
                    while True:
                        header = f.read(12)
                        if len(header) < 12:
                            break
                        length = int.from_bytes(header[:8], "little")
                        record = bytearray(length)
                        if f.readinto(record) != length:
                            raise ValueError(f"{path}: truncated record")
                        f.read(4)
                        ex = decode_example(memoryview(record))
                        image = ex["image"][0]
                        if len(image) != size:
                            raise ValueError(f"{path}: image of {len(image)} bytes, expected {size}")
                        pixels = np.frombuffer(image, dtype=np.uint8).reshape(self.shape)
                        yield torch.from_numpy(pixels), ex["label"][0]


class Pinner:
    """Runs `source` in a thread, turning each parsed batch into (pinned on
    cuda) tensors ahead of the training loop; errors reach the consumer."""

    def __init__(self, source, pin, depth=3):
        self._q = queue_mod.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._source, self._pin = source, pin
        self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-feed-pin")
        self._thread.start()

    def _run(self):
        import torch
        try:
            if self._pin:  # as DataLoader's pin thread: this device's context
                torch.cuda.set_device(torch.cuda.current_device())
            for b in self._source:
                x, y = torch.from_numpy(b["image"]), torch.from_numpy(b["label"])
                if self._pin:
                    x, y = x.pin_memory(), y.pin_memory()
                while not self._stop.is_set():
                    try:
                        self._q.put(("ok", (x, y)), timeout=0.1)
                        break
                    except queue_mod.Full:
                        pass
                if self._stop.is_set():
                    return
            self._q.put(("end", None))
        except BaseException as e:  # handed to the consumer
            self._q.put(("err", e))

    def __iter__(self):
        return self

    def __next__(self):
        kind, v = self._q.get()
        if kind == "err":
            raise v
        if kind == "end":
            raise StopIteration
        return v

    def close(self):
        self._stop.set()
        self._thread.join(timeout=10)


def feature_spec(shardq, prof):
    return {"image": shardq.FixedLen(tuple(prof["shape"]), "uint8"),
            "label": shardq.FixedLen((), "int64")}


def epochs_for(cfg, processes=1):
    batches = (cfg["warmup"] + cfg["steps"] + 2 * cfg["workers"] + 4) * processes
    return max(2, math.ceil(batches * cfg["batch"] / cfg["records"]) + 1)


def make_feed(row, cfg, torch, device):
    """(iterator of host or device batches, close function, note)."""
    import shardq
    cuda = device.type == "cuda"
    b, shape = cfg["batch"], tuple(cfg["shape"])
    if row == "synthetic":
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randint(0, 256, (b,) + shape, dtype=torch.uint8, generator=g).to(device)
        y = torch.randint(0, cfg["classes"], (b,), generator=g).to(device)

        def same():
            while True:
                yield x, y
        return same(), lambda: None, "one device batch reused"
    spec = feature_spec(shardq, cfg)
    if row in ("shardq.data", "shared queue"):
        shared = row == "shared queue"
        queue = shardq.WorkQueue(
            cfg["paths"], num_epochs=epochs_for(cfg, cfg["processes"] if shared else 1),
            shuffle=True, seed=1, num_slices=cfg["slices"], num_clients=4,
            name=cfg["queue_name"], address=cfg.get("address"),
            worker_id=f"trainer{cfg.get('rank', 0)}-pid{os.getpid()}")
        reads = 2 if cuda else 1
        parse = min(4, max(1, (os.cpu_count() or 2) // 4)) if cuda else 1
        ds = (shardq.data.from_queue(queue, "tfrecord", cycle_length=4, num_parallel_reads=reads,
                                     complete="read")
              .batch(b, drop_remainder=True).parse_example(spec, num_parallel_calls=parse)
              .prefetch(4))
        it = iter(ds)
        pinner = Pinner(it, pin=cuda)

        def close():
            pinner.close()
            getattr(it, "close", lambda: None)()
            queue.close()
        note = f"{reads} read + {parse} parse threads, prefetch 4, pin thread"
        if shared:
            note = f"{cfg['processes']} processes, {cfg['server']}; " + note
        return pinner, close, note
    if row == "WorkQueueDataset":
        ds = shardq.torch.WorkQueueDataset(
            cfg["paths"], reader="tfrecord", features=spec, batch_size=b, drop_remainder=True,
            num_epochs=epochs_for(cfg), shuffle=True, seed=1, num_slices=cfg["slices"],
            name=cfg["queue_name"])
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=cfg["workers"],
                                             pin_memory=cuda)
        it = iter(loader)

        def batches():
            for d in it:
                yield d["image"], d["label"]

        def close():
            it._shutdown_workers() if hasattr(it, "_shutdown_workers") else None
        return batches(), close, f"num_workers={cfg['workers']}"
    if row == "DataLoader+Python":
        loader = torch.utils.data.DataLoader(peer_dataset(cfg["paths"], shape),
                                             batch_size=b, drop_last=True,
                                             num_workers=cfg["workers"], pin_memory=cuda)
        it = iter(loader)

        def close():
            it._shutdown_workers() if hasattr(it, "_shutdown_workers") else None
        return it, close, f"num_workers={cfg['workers']}, CRCs not checked"
    raise ValueError(f"unknown row {row!r}")


# --- One row, in its own process ---

def make_model(cfg, torch, device):
    if cfg["model"] == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(weights=None, num_classes=cfg["classes"])
    else:
        nn = torch.nn
        model = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(32, cfg["classes"]))
    model = model.to(device, memory_format=torch.channels_last).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    return model, opt


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def wait_for_go(cfg):
    """The shared-queue row starts measuring in every process at once."""
    open(os.path.join(cfg["barrier"], f"ready.{cfg['rank']}"), "w").close()
    go = os.path.join(cfg["barrier"], "go")
    while not os.path.exists(go):
        if time.time() > cfg["deadline"]:
            raise TimeoutError("the other training processes never became ready")
        time.sleep(0.01)


def run_row(row, cfg):
    """Trains cfg["steps"] measured steps (fewer when the deadline comes
    first) and returns the row's figures; the result file is written before
    the feed is torn down."""
    t_begin = time.time()
    import torch
    import torch.nn.functional as F
    import torch.utils.data  # noqa: F401
    import shardq.torch  # noqa: F401
    device = torch.device(cfg["device"])
    cuda = device.type == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            raise RuntimeError(f"--device cuda, but torch {torch.__version__} sees no CUDA device "
                               f"(built for CUDA {torch.version.cuda})")
        torch.backends.cudnn.benchmark = True
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(cfg.get("rank", 0))
    if not cuda and "rank" in cfg:  # the processes share the cores
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // cfg["processes"]))
    model, opt = make_model(cfg, torch, device)
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    feed, close, note = make_feed(row, cfg, torch, device)
    res = dict(row=row, note=note, batch=cfg["batch"], warmup=cfg["warmup"])
    try:
        def step(x, y):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                x = ((x.float() - mean) / std).contiguous(memory_format=torch.channels_last)
                loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss

        fetched = [0]

        def fetch():
            try:
                x, y = next(feed)
            except StopIteration:
                raise RuntimeError(f"the feed ended after {fetched[0]} batches") from None
            fetched[0] += 1
            return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

        for i in range(cfg["warmup"]):
            loss = step(*fetch())
            if time.time() > cfg["deadline"] - 0.25 * cfg["teardown_s"]:
                res["note"] += f"; warm-up cut to {i + 1} steps"
                break
        inject_fault(row)
        if cuda:
            torch.cuda.synchronize()
        res["setup_s"] = round(time.time() - t_begin, 2)
        if "barrier" in cfg:
            wait_for_go(cfg)
        print(f"  {row}{' #%d' % cfg['rank'] if 'rank' in cfg else ''}: set up in "
              f"{res['setup_s']} s, measuring up to {cfg['steps']} steps", flush=True)
        marks, waits_wall, steps = [], [], 0
        cpu0, wall0, t0 = tree_cpu(os.getpid()), time.time(), time.perf_counter()
        # Past the deadline, stop once min_steps are in; a little later (the
        # teardown margin is meant for the feed's shutdown), after any step.
        last_call = cfg["deadline"] + 0.25 * cfg["teardown_s"]
        while steps < cfg["steps"]:
            now = time.time()
            if (steps >= cfg["min_steps"] and now > cfg["deadline"]) or (steps and now > last_call):
                res["time_capped"] = True
                break
            if cuda:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
            s0 = time.perf_counter()
            x, y = fetch()
            if cuda:
                e1.record()
                marks.append((e0, e1))
            waits_wall.append(time.perf_counter() - s0)
            loss = step(x, y)
            steps += 1
        if cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        wall1, cpu1 = time.time(), tree_cpu(os.getpid())
        if cuda and marks:
            total = marks[0][0].elapsed_time(end)
            wait = sum(e0.elapsed_time(e1) for e0, e1 in marks)
            res["wait_frac"] = wait / total if total > 0 else None
            res["step_ms_device"] = total / len(marks)
        else:
            res["wait_frac"] = sum(waits_wall) / wall if wall > 0 else None
        res.update(ok=True, steps=steps, wall_s=round(wall, 3), t_start=wall0, t_end=wall1,
                   images=steps * cfg["batch"], images_per_s=steps * cfg["batch"] / wall,
                   step_ms=1000 * wall / max(1, steps), cpu_s=cpu_between(cpu0, cpu1),
                   cpu_cores=cpu_between(cpu0, cpu1) / wall, loss=float(loss))
        if cuda:
            res["gpu_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        write_json(cfg["result"], res)
        return res
    finally:
        try:
            close()
        except Exception as e:  # the figures are in; note it
            print(f"  {row}: closing the feed raised {type(e).__name__}: {e}", flush=True)


def inject_fault(row):
    """SHARDQ_GPU_FEED_FAULT="ROW=raise|crash|hang;...": the tests' way to
    check that one row's failure leaves the others running."""
    for part in os.environ.get("SHARDQ_GPU_FEED_FAULT", "").split(";"):
        name, _, kind = part.partition("=")
        if name != row:
            continue
        if kind == "raise":
            raise RuntimeError("injected fault")
        if kind == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if kind == "hang":
            time.sleep(1e6)


def child_main(row, config_path):
    with open(config_path) as f:
        cfg = json.load(f)
    import_shardq()
    # A hang shows where it is: every thread's stack, just before the kill.
    faulthandler.dump_traceback_later(max(1.0, cfg["kill_at"] - time.time() - 2), exit=False)
    try:
        run_row(row, cfg)
    except BaseException as e:
        traceback.print_exc()
        write_json(cfg["result"], dict(row=row, ok=False, error=f"{type(e).__name__}: {e}"))
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: every figure is written already


# --- The orchestrator ---

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_shardq_cli():
    import shardq
    site = os.path.dirname(os.path.dirname(os.path.abspath(shardq.__file__)))
    for d in (os.environ.get("SHARDQ_BIN"), os.path.join(HERE, "..", "..", "build", "bin"),
              os.path.join(site, "bin")):
        if d and os.access(os.path.join(d, "shardq"), os.X_OK):
            return os.path.join(d, "shardq")
    return shutil.which("shardq")


class Server:
    """`shardq serve` on a free loopback port; `python -m shardq.serve`
    where no shardq command is installed or it does not start."""

    def __init__(self, workdir, log_file):
        cli = find_shardq_cli()
        if cli:
            try:
                self._start(workdir, log_file, "shardq serve", port_file=True,
                            cmd=[cli, "serve", "--listen", "127.0.0.1:0"])
                return
            except RuntimeError as e:
                log(f"shared queue: {e}; trying python -m shardq.serve")
        port = free_port()
        self._start(workdir, log_file, "python -m shardq.serve", port_file=False, port=port,
                    cmd=[sys.executable, "-m", "shardq.serve", "--listen", f"127.0.0.1:{port}"])

    def _start(self, workdir, log_file, kind, cmd, port_file, port=None):
        path = os.path.join(workdir, f"port.{uuid.uuid4().hex[:6]}")
        if port_file:
            cmd = cmd + ["--port-file", path]
        self.proc = subprocess.Popen(cmd, stdout=log_file, stderr=log_file,
                                     start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{kind} exited with {self.proc.returncode}")
            try:
                if port_file:
                    with open(path) as f:
                        port = int(f.read().strip())
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{kind} did not listen within 20 s")
            time.sleep(0.05)
        self.address = f"127.0.0.1:{port}"
        self.kind = f"{kind} on {self.address}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def launch(row, cfg, workdir, tag):
    cfg_path = os.path.join(workdir, f"{tag}.config.json")
    write_json(cfg_path, cfg)
    if os.path.exists(cfg["result"]):  # an earlier run's, into the same --out
        os.remove(cfg["result"])
    log_file = open(os.path.join(workdir, f"{tag}.log"), "w")
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", row,
                             "--config", cfg_path], stdout=None, stderr=log_file,
                            start_new_session=True)
    proc.log_path, proc.log_file = log_file.name, log_file
    return proc


def reap(proc, kill_at):
    """Waits for a row process until kill_at; kills its whole group then."""
    try:
        proc.wait(timeout=max(0.1, kill_at - time.time()))
        killed = False
    except subprocess.TimeoutExpired:
        killed = True
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the feed's workers and coordinators too
    except ProcessLookupError:
        pass
    proc.wait()
    proc.log_file.close()
    return killed


def read_result(proc, cfg, killed):
    res = None
    try:
        with open(cfg["result"]) as f:
            res = json.load(f)
    except (OSError, ValueError):
        pass
    tail = ""
    try:
        with open(proc.log_path, errors="replace") as f:
            lines = [ln.rstrip() for ln in f if ln.strip()]
        # A hang: faulthandler's stacks, most recent call first; show each
        # thread's innermost frame. Otherwise the log's last lines.
        inner = [lines[i + 1].strip() for i, ln in enumerate(lines[:-1])
                 if "most recent call first" in ln]
        tail = " | ".join(inner[:4] if killed and inner else lines[-3:])[-600:]
    except OSError:
        pass
    if res is None:
        code = proc.returncode
        if killed:
            why = "killed at its time limit (a hang?)"
        elif code is not None and code < 0:
            why = f"died of signal {signal.Signals(-code).name}"
        else:
            why = f"exited with {code}"
        res = dict(ok=False, error=f"no result: {why}" + (f"; log: {tail}" if tail else ""))
    elif not res.get("ok") and tail:
        res["error"] = res.get("error", "") + f" (log: {tail})"
    elif killed:
        res["note"] = res.get("note", "") + "; killed while tearing the feed down"
    return res


def run_single(row, base, workdir, kill_at):
    cfg = dict(base, result=os.path.join(workdir, f"{slug(row)}.result.json"),
               queue_name=f"gpu-feed-{slug(row)}-{uuid.uuid4().hex[:8]}")
    proc = launch(row, cfg, workdir, slug(row))
    killed = reap(proc, kill_at)
    return read_result(proc, cfg, killed)


def run_shared(base, workdir, kill_at):
    """P training processes, one queue on a `shardq serve` on loopback."""
    n = base["processes"]
    barrier = os.path.join(workdir, "shared.barrier")
    shutil.rmtree(barrier, ignore_errors=True)  # an earlier run's "go"
    os.makedirs(barrier)
    server_log = open(os.path.join(workdir, "shared.server.log"), "w")
    server = Server(workdir, server_log)
    try:
        name = f"gpu-feed-shared-{uuid.uuid4().hex[:8]}"
        procs = []
        for r in range(n):
            cfg = dict(base, rank=r, barrier=barrier, address=server.address, server=server.kind,
                       queue_name=name, steps=max(base["min_steps"], base["steps"] // n),
                       result=os.path.join(workdir, f"shared.{r}.result.json"))
            procs.append((launch("shared queue", cfg, workdir, f"shared.{r}"), cfg))
        # Start measuring together once every process has warmed up.
        while not all(os.path.exists(os.path.join(barrier, f"ready.{r}")) for r in range(n)):
            if any(p.poll() is not None for p, _ in procs) or time.time() > base["deadline"]:
                break
            time.sleep(0.02)
        cpu0 = tree_cpu(server.proc.pid)
        open(os.path.join(barrier, "go"), "w").close()
        parts = [read_result(p, c, reap(p, kill_at)) for p, c in procs]
        server_cpu = cpu_between(cpu0, tree_cpu(server.proc.pid))
    finally:
        server.stop()
        server_log.close()
    bad = [f"process {r}: {p.get('error')}" for r, p in enumerate(parts) if not p.get("ok")]
    if bad:
        return dict(ok=False, error="; ".join(bad))
    span = max(p["t_end"] for p in parts) - min(p["t_start"] for p in parts)
    images = sum(p["images"] for p in parts)
    waits = [p["wait_frac"] for p in parts if p.get("wait_frac") is not None]
    res = dict(ok=True, note=parts[0]["note"], steps=sum(p["steps"] for p in parts),
               images=images, wall_s=round(span, 3), images_per_s=images / span,
               step_ms=sum(p["step_ms"] for p in parts) / n,
               wait_frac=sum(waits) / len(waits) if waits else None,
               cpu_cores=(sum(p["cpu_s"] for p in parts) + server_cpu) / span,
               setup_s=max(p["setup_s"] for p in parts),
               time_capped=any(p.get("time_capped") for p in parts),
               processes=parts)
    if all("gpu_peak_gib" in p for p in parts):
        res["gpu_peak_gib"] = sum(p["gpu_peak_gib"] for p in parts)
    return res


def slug(row):
    return "".join(c if c.isalnum() else "_" for c in row)


def environment(device):
    env = dict(python=platform.python_version(), machine=platform.machine(),
               cpus=os.cpu_count())
    try:
        import shardq
        env["shardq"] = getattr(shardq, "__version__", "?")
    except ImportError as e:
        env["shardq"] = f"not importable: {e}"
    try:
        st = os.statvfs("/dev/shm")
        env["dev_shm_gib"] = round(st.f_bavail * st.f_frsize / 2**30, 1)
    except OSError:
        pass
    probe = ("import json, torch\n"
             "d = dict(torch=torch.__version__, cuda=torch.version.cuda,"
             " cuda_available=torch.cuda.is_available())\n"
             "if torch.cuda.is_available(): d['gpu'] = torch.cuda.get_device_name(0)\n"
             "try:\n import torchvision; d['torchvision'] = torchvision.__version__\n"
             "except ImportError: d['torchvision'] = None\n"
             "print(json.dumps(d))\n")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=60)
        env.update(json.loads(out.stdout.strip().splitlines()[-1]))
    except Exception as e:  # reported; the rows will say what fails
        env["torch"] = f"probe failed: {type(e).__name__}: {e}"
    return env


def size_text(n):
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def fmt(v, spec, missing="—"):
    return missing if v is None else format(v, spec)


def write_report(out, meta, results):
    synth = results.get("synthetic", {})
    base = synth.get("images_per_s") if synth.get("ok") else None
    for r in results.values():
        if r.get("ok") and base:
            r["vs_synthetic"] = r["images_per_s"] / base
    write_json(os.path.join(out, "gpu_feed.json"), dict(meta, rows=results))
    env, cfg = meta["environment"], meta["config"]
    lines = [
        f"# GPU feed benchmark ({meta['device']} mode)", "",
        f"{env.get('gpu', 'no GPU')}; {env.get('cpus')} CPUs; Python {env.get('python')}, "
        f"torch {env.get('torch')}, torchvision {env.get('torchvision')}, "
        f"shardq {env.get('shardq')}.",
        f"Model {cfg['model']}, images {'x'.join(map(str, cfg['shape']))} uint8, batch "
        f"{cfg['batch']}, {cfg['warmup']} warm-up steps then up to {cfg['steps']} measured; "
        f"data: {cfg['records']} records in {cfg['files']} files "
        f"({size_text(meta.get('data', {}).get('bytes', 0))}); DataLoader num_workers="
        f"{cfg['workers']}.", "",
        "| feed | images/s | vs synthetic | step ms | input wait | CPU cores | peak GPU GiB "
        "| steps | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in ROWS:
        r = results.get(row)
        if r is None:
            continue
        if not r.get("ok"):
            err = str(r.get("error", "?")).replace("|", "/").replace("\n", " ")
            lines.append(f"| {row} | — | — | — | — | — | — | — | **failed**: {err} |")
            continue
        wait = r.get("wait_frac")
        notes = r.get("note", "") + ("; time-capped" if r.get("time_capped") else "")
        lines.append(
            f"| {row} | {r['images_per_s']:.0f} | {fmt(r.get('vs_synthetic'), '.2f')} | "
            f"{r['step_ms']:.1f} | {fmt(None if wait is None else 100 * wait, '.1f')}% | "
            f"{r['cpu_cores']:.1f} | {fmt(r.get('gpu_peak_gib'), '.1f')} | {r['steps']} | "
            f"{notes.replace('|', '/')} |")
    lines += ["", "input wait: share of the measured steps' time the device waited for the next "
              "batch (fetch + host-to-device copy; CUDA events on cuda, wall clock on cpu). "
              "CPU cores: CPU seconds of the training process(es), their workers and "
              "coordinators / wall seconds.", ""]
    with open(os.path.join(out, "gpu_feed.md"), "w") as f:
        f.write("\n".join(lines))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    ap.add_argument("--minutes", type=float, default=None,
                    help="the whole run ends within this (default 7 for cuda, 3 for cpu)")
    ap.add_argument("--out", default=None, help="results directory (default ./gpu_feed_out)")
    ap.add_argument("--data", default=None,
                    help="data set directory (default /tmp/shardq-gpu-feed-DEVICE); kept and "
                         "reused by a later run with the same parameters")
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated subset of: "
                    + ", ".join(ROWS))
    ap.add_argument("--workers", type=int, default=None, help="DataLoader num_workers")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a profile value, e.g. records=2048, model=tiny, "
                         "shape=3x224x224, batch=64 (for trying the script out)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child_main(args.child, args.config)

    t0 = time.time()
    device = args.device
    if device == "auto":
        device = "cuda" if _cuda_available() else "cpu"
    elif device == "cuda" and not _cuda_available():
        # Said before the data set (GBs) is written, not by every row after it.
        print("gpu_feed: --device cuda, but torch sees no CUDA device here "
              "(use --device cpu to try the benchmark out)", file=sys.stderr)
        return 2
    minutes = args.minutes if args.minutes is not None else (7.0 if device == "cuda" else 3.0)
    end = t0 + minutes * 60 - 10  # the report and the exit fit in the rest
    out = os.path.abspath(args.out or "gpu_feed_out")
    data_dir = os.path.abspath(args.data or f"/tmp/shardq-gpu-feed-{device}")
    work = os.path.join(out, "logs")
    os.makedirs(work, exist_ok=True)
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"unknown rows {unknown}; choose from {list(ROWS)}")
    import_shardq()
    prof = dict(PROFILES[device])
    for item in args.set:
        key, _, value = item.partition("=")
        if key not in prof:
            ap.error(f"--set {item}: no such value; choose from {sorted(prof)}")
        if key == "shape":
            prof[key] = tuple(int(d) for d in value.split("x"))
        else:
            prof[key] = type(prof[key])(value)
    workers = args.workers or (min(8, max(2, (os.cpu_count() or 4) // 2)) if device == "cuda" else 2)
    log(f"device {device}, budget {minutes} min, out {out}, data {data_dir}")
    env = environment(device)
    log("environment: " + ", ".join(f"{k}={v}" for k, v in env.items()))
    cfg = dict(prof, device=device, workers=workers, steps=prof["max_steps"])
    cfg["shape"] = list(cfg["shape"])
    meta = dict(device=device, minutes=minutes, started=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                environment=env, config={k: v for k, v in cfg.items()})
    results = {}
    try:
        paths, data_info = make_data(data_dir, prof, timeout=max(60.0, 0.4 * (end - time.time())))
        meta["data"] = data_info
        cfg["paths"] = paths
    except Exception as e:
        traceback.print_exc()
        meta["data"] = dict(error=f"{type(e).__name__}: {e}")
        cfg["paths"] = []
    write_report(out, meta, results)

    for i, row in enumerate(rows):
        left = end - time.time()
        rows_left = len(rows) - i
        share = left / rows_left
        if left < prof["min_row_s"]:
            results[row] = dict(ok=False, error=f"skipped: {left:.0f} s left of the budget")
            log(f"{row}: skipped, {left:.0f} s left")
            write_report(out, meta, results)
            continue
        share = max(share, prof["min_row_s"])
        kill_at = time.time() + share
        base = dict(cfg, deadline=kill_at - prof["teardown_s"], kill_at=kill_at)
        log(f"{row}: up to {share:.0f} s")
        try:
            if row != "synthetic" and not cfg["paths"]:
                raise RuntimeError(f"no data set: {meta['data'].get('error')}")
            if row == "shared queue":
                res = run_shared(base, work, kill_at)
            else:
                res = run_single(row, base, work, kill_at)
        except Exception as e:
            traceback.print_exc()
            res = dict(ok=False, error=f"{type(e).__name__}: {e}")
        results[row] = res
        if row == "synthetic" and res.get("ok"):
            cfg["steps"] = steps_from_budget(res, prof, end - time.time(), rows_left - 1)
            meta["config"]["steps"] = cfg["steps"]
            log(f"measured steps per row from here: {cfg['steps']}")
        if res.get("ok"):
            log(f"{row}: {res['images_per_s']:.0f} images/s, step {res['step_ms']:.1f} ms, "
                f"input wait {fmt(res.get('wait_frac') and 100 * res['wait_frac'], '.1f')}%, "
                f"{res['steps']} steps, CPU {res['cpu_cores']:.1f} cores")
        else:
            log(f"{row}: FAILED: {res.get('error')}")
        write_report(out, meta, results)

    meta["seconds"] = round(time.time() - t0, 1)
    table = write_report(out, meta, results)
    print("\n" + table, flush=True)
    log(f"done in {meta['seconds']} s; wrote {out}/gpu_feed.md and gpu_feed.json")
    failed = [r for r, v in results.items() if not v.get("ok")]
    return 1 if failed else 0


def steps_from_budget(synth, prof, left, rows_left):
    """Measured steps for the next rows: about half of each row's share at
    the synthetic step time (input-bound rows are slower and may be capped
    by their deadline, which the table says)."""
    if rows_left <= 0:
        return prof["max_steps"]
    usable = left / rows_left - synth.get("setup_s", 0) - prof["teardown_s"]
    steps = int(0.5 * usable / (synth["step_ms"] / 1000.0))
    return max(prof["min_steps"], min(prof["max_steps"], steps))


def _cuda_available():
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                             capture_output=True, text=True, timeout=120)
        return out.stdout.strip().endswith("True")
    except Exception:
        return False


if __name__ == "__main__":
    sys.exit(main())
