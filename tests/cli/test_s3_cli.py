"""Issue 21 from the command line: `count`, `cat`, `create` and `worker`'s
{} with s3:// works, against MinIO on 127.0.0.1 (tests/minio_server.py)."""
import collections
import os
import pathlib
import sys
import uuid

from cli_helpers import run, shardq_bin

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from minio_server import minio  # noqa: E402,F401  (the fixture)


def env_of(minio, **extra):
    env = dict(os.environ, **minio.env())
    env.update(extra)
    return env


def bucket_with_text(minio, files=3, lines=2000):
    bucket = f"c-{uuid.uuid4().hex[:12]}"
    minio.admin.make_bucket(bucket)
    expected = []
    for i in range(files):
        body = "".join(f"file {i} line {j}\n" for j in range(lines))
        expected += body.splitlines()
        minio.admin.put(bucket, f"d/part-{i}.txt", body)
    return bucket, expected


def test_count_and_cat_read_objects_globs_and_ranges(minio):
    bucket, expected = bucket_with_text(minio)
    env = env_of(minio)
    out = run("count", f"s3://{bucket}/d/*.txt", env=env).stdout.splitlines()
    assert out[-1] == f"{len(expected)}\ttotal"
    assert out[0] == f"2000\ts3://{bucket}/d/part-0.txt"
    whole = run("cat", f"s3://{bucket}/d/part-1.txt", env=env).stdout.splitlines()
    assert whole == expected[2000:4000]
    size = len("".join(f"file 1 line {j}\n" for j in range(2000)))
    halves = [run("cat", f"s3://{bucket}/d/part-1.txt?start={a}&end={b}", env=env).stdout
              for a, b in ((0, size // 2), (size // 2, size))]
    assert "".join(halves).splitlines() == whole


def test_errors_name_the_object_and_the_http_status(minio):
    bucket, _ = bucket_with_text(minio, files=1, lines=1)
    missing = run("count", f"s3://{bucket}/d/none.txt", check=False, env=env_of(minio))
    assert missing.returncode != 0
    assert f"s3://{bucket}/d/none.txt" in missing.stderr and "404" in missing.stderr
    denied = run("cat", f"s3://{bucket}/d/part-0.txt", check=False,
                 env=env_of(minio, AWS_SECRET_ACCESS_KEY="wrong"))
    assert denied.returncode != 0
    assert "PERMISSION_DENIED" in denied.stderr and f"bucket '{bucket}'" in denied.stderr
    # A bucket that does not exist, named as a directory: the listing's 404.
    no_bucket = run("count", "s3://no-such-bucket-here/x/", check=False, env=env_of(minio))
    assert no_bucket.returncode != 0
    assert "404" in no_bucket.stderr and "no bucket 'no-such-bucket-here'" in no_bucket.stderr, \
        no_bucket.stderr
    # An empty directory of a bucket that exists says so.
    empty = run("count", f"s3://{bucket}/nothing-here/", check=False, env=env_of(minio))
    assert empty.returncode != 0
    assert "holds no objects" in empty.stderr, empty.stderr


def test_workers_run_a_command_on_every_s3_slice(minio, coordinator, tmp_path):
    bucket, expected = bucket_with_text(minio)
    env = env_of(minio)
    created = run("create", "--address", coordinator.address, "--name", "s3q",
                  "--slices", "9", f"s3://{bucket}/d/", env=env).stdout
    assert "items=9" in created
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    script = (f'{shardq_bin()} cat "$1" > '
              f'"{out_dir}/$(echo "$1" | md5sum | cut -c1-12)"')
    worker = run("worker", "--address", coordinator.address, "--name", "s3q", "--",
                 "sh", "-c", script, "sh", "{}", env=env, timeout=120)
    assert worker.returncode == 0
    lines = []
    for path in out_dir.iterdir():
        lines += path.read_text().splitlines()
    assert len(list(out_dir.iterdir())) == 9
    assert collections.Counter(lines) == collections.Counter(expected)
