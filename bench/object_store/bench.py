"""bench/object_store driver: one TFRecord data set (>= 1 GiB in >= 64
objects) on a local MinIO, read in one run by
  - a plain parallel GET loop (curl --aws-sigv4, 4 at once): the server's raw
    GET throughput on this machine, the reference;
  - shardq's reader over s3:// works (WorkQueue + TFRecordReader, 1 and 4
    worker threads; records parsed and both CRC32Cs checked), the works cut
    into --slices slices and, in rows of their own, each object one whole
    item (no num_slices: a GET per object, and none to sniff it), and
    shardq.data.from_queue (the C++ pipeline that shardq.torch uses);
  - boto3 get_object(...)["Body"].read() of whole objects (1 and 4 threads;
    bytes only, no record parsing);
  - shardq's reader over the same files on local disk (1 and 4 workers);
  - the same reader from C++ (bench/object_store/object_read.cc: no Python
    bytes per record), over s3:// and local files, 1 and 4 workers;
  - curl GETs of the byte ranges shardq's slices fetch (each slice plus
    the 256 KiB look-ahead), 4 at once: the server's throughput for reads
    cut as shardq cuts them, which no reader of those slices can pass.
Each contender runs in a child process, REPEATS times interleaved; the best
run counts. CPU per GB is the child's user+sys seconds per 1e9 bytes, and
MinIO's own seconds per 1e9 bytes beside it."""
import argparse
import os
import pathlib
import resource
import subprocess
import sys
import threading
import time
import uuid

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "build" / "python"))


def proc_cpu(pid):
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- children ---------------------------------------------------------------

def read_shardq(works, workers, slices):
    """slices 0: no num_slices (every object one whole item)."""
    import shardq
    name = f"bench-{uuid.uuid4().hex[:8]}"
    queues = [shardq.WorkQueue(works, num_slices=slices or None, name=name)
              for _ in range(workers)]
    totals = [0] * workers

    def run(i):
        reader = shardq.TFRecordReader()
        producer = queues[i].input_producer()
        n = 0
        while True:
            try:
                _, values = reader.read_up_to(producer, 64)
            except shardq.OutOfRangeError:
                break
            n += sum(len(v) for v in values)
        totals[i] = n

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(totals)


def read_pipeline(works, slices):
    """shardq.data.from_queue (the C++ pipeline, as shardq.torch uses it) over
    one worker's queue: records as bytes, nothing else done with them."""
    import shardq
    queue = shardq.WorkQueue(works, num_slices=slices or None,
                             name=f"bench-{uuid.uuid4().hex[:8]}")
    return sum(len(r) for r in shardq.data.from_queue(queue, reader="tfrecord"))


def read_boto3(bucket, keys, workers):
    import boto3
    import botocore.config
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                      config=botocore.config.Config(max_pool_connections=workers,
                                                    s3={"addressing_style": "path"}))
    lock = threading.Lock()
    todo = list(keys)
    total = [0]

    def run():
        while True:
            with lock:
                if not todo:
                    return
                key = todo.pop()
            n = len(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            with lock:
                total[0] += n

    threads = [threading.Thread(target=run) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return total[0]


def child(args):
    if args.mode == "shardq":
        n = read_shardq(args.works, args.workers, args.slices)
    elif args.mode == "pipeline":
        n = read_pipeline(args.works, args.slices)
    elif args.mode == "boto3":
        n = read_boto3(args.bucket, args.keys, args.workers)
    print(n)


# --- parent -------------------------------------------------------------------

def write_data(local_dir, objects, object_bytes, record_bytes):
    import shardq
    local_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    payload = os.urandom(record_bytes * 2)
    for i in range(objects):
        path = local_dir / f"part-{i:05d}.tfrecord"
        paths.append(path)
        if path.exists():
            continue
        with shardq.TFRecordWriter(str(path)) as w:
            written = 0
            j = 0
            while written < object_bytes:
                start = (j * 7919) % record_bytes
                w.write(payload[start:start + record_bytes])
                written += record_bytes + 16
                j += 1
    return paths


def slice_ranges(size, slices_per_object):
    """The byte ranges (curl's first-last) a reader of an object cut into
    equal slices fetches: each slice and the look-ahead past its end."""
    look_ahead = 256 << 10
    cuts = [size * i // slices_per_object for i in range(slices_per_object + 1)]
    return [f"{a}-{min(b + look_ahead, size) - 1}" for a, b in zip(cuts, cuts[1:])]


def timed(cmd, env, minio_pid):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = proc_cpu(minio_pid)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc_cpu(minio_pid) - server_before, out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--child", action="store_true")
    p.add_argument("--mode")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--slices", type=int, default=128)
    p.add_argument("--bucket")
    p.add_argument("--keys", nargs="*")
    p.add_argument("--works", nargs="*")
    p.add_argument("--objects", type=int, default=64)
    p.add_argument("--object-bytes", type=int, default=16 << 20)
    p.add_argument("--record-bytes", type=int, default=64 << 10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--data-dir", default=str(REPO / "build" / "object-store-bench"))
    p.add_argument("--out")
    args = p.parse_args()
    if args.child:
        return child(args)

    from minio_server import MinioServer
    data_dir = pathlib.Path(args.data_dir)
    paths = write_data(data_dir / f"local-{args.objects}x{args.object_bytes}-{args.record_bytes}",
                       args.objects, args.object_bytes, args.record_bytes)
    total_bytes = sum(path.stat().st_size for path in paths)
    server = MinioServer(data_dir / f"minio-{uuid.uuid4().hex[:6]}")
    try:
        bucket = "bench"
        server.admin.make_bucket(bucket)
        keys = [f"data/{path.name}" for path in paths]
        for key, path in zip(keys, paths):
            server.admin.put(bucket, key, path.read_bytes())
        env = dict(os.environ, **server.env(),
                   PYTHONPATH=os.pathsep.join([str(REPO / "build" / "python"),
                                               os.environ.get("PYTHONPATH", "")]))
        me = [sys.executable, __file__, "--child"]
        s3_works = [f"s3://{bucket}/data/*.tfrecord"]
        url_list = "\n".join(f"{server.endpoint}/{bucket}/{key}" for key in keys) + "\n"
        curl = ["sh", "-c",
                "xargs -P 4 -n 8 curl -sf --aws-sigv4 aws:amz:us-east-1:s3 "
                f"--user {server.env()['AWS_ACCESS_KEY_ID']}:{server.env()['AWS_SECRET_ACCESS_KEY']} "
                "-o /dev/null -o /dev/null -o /dev/null -o /dev/null "
                "-o /dev/null -o /dev/null -o /dev/null -o /dev/null "
                f"< {data_dir / 'urls.txt'} && echo {total_bytes}"]
        (data_dir / "urls.txt").write_text(url_list)
        # The slices' ranges, 4 curl processes (one connection each) at once.
        auth = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                f"{server.env()['AWS_ACCESS_KEY_ID']}:{server.env()['AWS_SECRET_ACCESS_KEY']}"]
        ranged = [[] for _ in range(4)]
        per_object = max(1, args.slices // args.objects)
        n = 0
        for key, path in zip(keys, paths):
            for r in slice_ranges(path.stat().st_size, per_object):
                part = ranged[n % 4]
                if part:
                    part.append("--next")
                part += ["-sf", *auth, "-r", r, "-o", "/dev/null",
                         f"{server.endpoint}/{bucket}/{key}"]
                n += 1
        ranged_cmd = ["sh", "-c", " ".join(
            "curl " + " ".join(f"'{a}'" for a in part) + ' & pids="$pids $!";' for part in ranged)
            + f" for p in $pids; do wait $p || exit 1; done; echo {total_bytes}"]
        object_read = str(REPO / "build" / "bin" / "object_read")
        contenders = [
            ("plain parallel GET loop (curl, 4 at once)", curl),
            (f"curl, the {per_object * args.objects} slices' ranges (+ look-ahead), 4 at once",
             ranged_cmd),
            ("shardq reader from C++, s3://, 1 worker",
             [object_read, "--workers", "1", "--slices", str(args.slices), *s3_works]),
            ("shardq reader from C++, s3://, 4 workers",
             [object_read, "--workers", "4", "--slices", str(args.slices), *s3_works]),
            # The same objects as whole items (no num_slices): a GET per
            # object, as the plain loop makes, and no sniff at planning.
            ("shardq reader from C++, s3://, whole objects, 1 worker",
             [object_read, "--workers", "1", "--slices", "0", *s3_works]),
            ("shardq reader from C++, s3://, whole objects, 4 workers",
             [object_read, "--workers", "4", "--slices", "0", *s3_works]),
            ("shardq reader, s3://, 1 worker", me + ["--mode", "shardq", "--workers", "1",
                                                     "--slices", str(args.slices), "--works", *s3_works]),
            ("shardq reader, s3://, 4 workers", me + ["--mode", "shardq", "--workers", "4",
                                                      "--slices", str(args.slices), "--works", *s3_works]),
            ("shardq reader, s3://, whole objects, 1 worker",
             me + ["--mode", "shardq", "--workers", "1", "--slices", "0", "--works", *s3_works]),
            ("shardq reader, s3://, whole objects, 4 workers",
             me + ["--mode", "shardq", "--workers", "4", "--slices", "0", "--works", *s3_works]),
            ("shardq.data.from_queue, s3://, 1 worker", me + ["--mode", "pipeline",
                                                              "--slices", str(args.slices),
                                                              "--works", *s3_works]),
            # The same two with the next slice's GET started only when its
            # reading starts.
            ("shardq reader, s3://, 1 worker, SHARDQ_S3_OPEN_AHEAD=0",
             ["env", "SHARDQ_S3_OPEN_AHEAD=0"] + me + ["--mode", "shardq", "--workers", "1",
                                                      "--slices", str(args.slices),
                                                      "--works", *s3_works]),
            ("shardq.data.from_queue, s3://, 1 worker, SHARDQ_S3_OPEN_AHEAD=0",
             ["env", "SHARDQ_S3_OPEN_AHEAD=0"] + me + ["--mode", "pipeline",
                                                      "--slices", str(args.slices),
                                                      "--works", *s3_works]),
            ("boto3 get_object, 1 thread", me + ["--mode", "boto3", "--workers", "1",
                                                 "--bucket", bucket, "--keys", *keys]),
            ("boto3 get_object, 4 threads", me + ["--mode", "boto3", "--workers", "4",
                                                  "--bucket", bucket, "--keys", *keys]),
            ("shardq reader, local files, 1 worker", me + ["--mode", "shardq", "--workers", "1",
                                                           "--slices", str(args.slices), "--works",
                                                           *map(str, paths)]),
            ("shardq reader, local files, 4 workers", me + ["--mode", "shardq", "--workers", "4",
                                                            "--slices", str(args.slices), "--works",
                                                            *map(str, paths)]),
        ]
        contenders += [
            ("shardq reader from C++, local files, 1 worker",
             [object_read, "--workers", "1", "--slices", str(args.slices), *map(str, paths)]),
            ("shardq reader from C++, local files, 4 workers",
             [object_read, "--workers", "4", "--slices", str(args.slices), *map(str, paths)]),
        ]
        best = {}
        for _ in range(args.repeats):
            for label, cmd in contenders:
                wall, cpu, server_cpu, out = timed(cmd, env, server.proc.pid)
                # object_read prints "records bytes plan_seconds"; the
                # others print the bytes last.
                fields = out.split()
                got = int(fields[1] if len(fields) == 3 else fields[-1])
                if label not in best or wall < best[label][0]:
                    best[label] = (wall, cpu, server_cpu, got)
        raw_rate = total_bytes / best[contenders[0][0]][0] / 1e9
        lines = [f"{args.objects} objects, {total_bytes / 2**30:.2f} GiB of TFRecords "
                 f"({args.record_bytes} B records), {args.slices} slices; "
                 f"best of {args.repeats}; {os.cpu_count()} CPUs shared by client and MinIO",
                 "",
                 "| reader | GB/s | x raw GET | client CPU s/GB | MinIO CPU s/GB | bytes read |",
                 "|---|---|---|---|---|---|"]
        for label, _ in contenders:
            wall, cpu, server_cpu, got = best[label]
            gb = total_bytes / 1e9
            rate = total_bytes / wall / 1e9
            lines.append(f"| {label} | {rate:.2f} | {rate / raw_rate:.2f} | {cpu / gb:.2f} | "
                         f"{server_cpu / gb:.2f} | {got} |")
        table = "\n".join(lines)
        print(table)
        if args.out:
            pathlib.Path(args.out).write_text(table + "\n")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
