"""A real S3-compatible server for tests: MinIO (built by scripts/install-minio
into a cache outside the repository), started on a free 127.0.0.1 port with a
temporary data directory and stopped by its PID; plus a small S3 client
(stdlib only: http.client and AWS Signature V4) to create buckets and put,
replace and delete objects.

Tests that need MinIO fail when it is missing, since scripts/install-deps
provides it; they skip only when SHARDQ_ALLOW_NO_MINIO=1 says so.
"""
import datetime
import hashlib
import hmac
import http.client
import os
import pathlib
import re
import signal
import socket
import subprocess
import time
import urllib.parse

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
ACCESS_KEY = "shardq-test"
SECRET_KEY = "shardq-test-secret"
REGION = "us-east-1"


def minio_binary():
    """The MinIO binary: SHARDQ_MINIO_BIN, else where scripts/install-minio
    puts the pinned version. Fails (or skips, under SHARDQ_ALLOW_NO_MINIO=1)
    when it is not there."""
    explicit = os.environ.get("SHARDQ_MINIO_BIN")
    if explicit:
        path = pathlib.Path(explicit)
    else:
        script = (REPO / "scripts" / "install-minio").read_text()
        version = re.search(r'SHARDQ_MINIO_VERSION:-([^}]+)\}', script).group(1)
        version = os.environ.get("SHARDQ_MINIO_VERSION", version)
        cache = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache")
        path = cache / "shardq" / f"minio-{version}" / "minio"
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    message = (f"MinIO is not installed at {path}: run scripts/install-deps "
               f"(or scripts/install-minio)")
    if os.environ.get("SHARDQ_ALLOW_NO_MINIO") == "1":
        pytest.skip(message + "; skipped because SHARDQ_ALLOW_NO_MINIO=1")
    pytest.fail(message)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _hmac(key, text):
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


class S3Admin:
    """Bucket and object operations against one endpoint, signed with SigV4."""

    def __init__(self, host, port, access_key=ACCESS_KEY, secret_key=SECRET_KEY):
        self.host, self.port = host, port
        self.access_key, self.secret_key = access_key, secret_key

    def request(self, method, bucket, key="", body=b"", query=""):
        path = "/" + bucket + ("/" + urllib.parse.quote(key, safe="/-_.~") if key else "")
        if bucket and not key:
            path += "/"
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = now.strftime("%Y%m%d")
        payload = _sha256(body)
        headers = {"host": f"{self.host}:{self.port}", "x-amz-date": amz_date,
                   "x-amz-content-sha256": payload}
        signed = ";".join(sorted(headers))
        canonical = "\n".join([method, path, query,
                               "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
                               signed, payload])
        scope = f"{day}/{REGION}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             _sha256(canonical.encode())])
        key_bytes = _hmac(("AWS4" + self.secret_key).encode(), day)
        for part in (REGION, "s3", "aws4_request"):
            key_bytes = _hmac(key_bytes, part)
        signature = hmac.new(key_bytes, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access_key}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={signature}")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path + ("?" + query if query else ""), body=body,
                         headers=headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        if response.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {response.status}: {data[:300]!r}")
        return data

    def make_bucket(self, bucket):
        self.request("PUT", bucket)

    def put(self, bucket, key, data):
        if isinstance(data, str):
            data = data.encode()
        self.request("PUT", bucket, key, body=data)

    def delete(self, bucket, key):
        self.request("DELETE", bucket, key)


class MinioServer:
    """One MinIO process with a temporary data directory."""

    def __init__(self, data_dir):
        binary = minio_binary()
        self.data_dir = pathlib.Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, MINIO_ROOT_USER=ACCESS_KEY, MINIO_ROOT_PASSWORD=SECRET_KEY,
                   MINIO_BROWSER="off", MINIO_UPDATE="off")
        last_error = None
        for _ in range(5):  # another process may take the free port first
            self.port = _free_port()
            console = _free_port()
            self.log_path = self.data_dir.parent / f"minio-{self.port}.log"
            self.log = open(self.log_path, "ab")
            self.proc = subprocess.Popen(
                [binary, "server", "--quiet", "--address", f"127.0.0.1:{self.port}",
                 "--console-address", f"127.0.0.1:{console}", str(self.data_dir / "data")],
                stdout=self.log, stderr=subprocess.STDOUT, env=env)
            try:
                self._wait_ready()
                break
            except RuntimeError as e:
                last_error = e
                self.stop()
        else:
            raise last_error
        self.admin = S3Admin("127.0.0.1", self.port)
        self._wait_initialized()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.port}"

    def env(self, **overrides):
        """The AWS environment of a client of this server."""
        env = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
               "AWS_REGION": REGION, "AWS_ENDPOINT_URL": self.endpoint}
        env.update(overrides)
        return env

    def _wait_ready(self):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"minio exited {self.proc.returncode}: "
                                   f"{self.log_path.read_text()[-2000:]}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                conn.request("GET", "/minio/health/ready")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.1)
        raise RuntimeError("minio did not become ready within 60 s")

    def _wait_initialized(self):
        # "ready" can come before the object layer answers requests (503
        # XMinioServerNotInitialized): wait until a listing of buckets works.
        deadline = time.monotonic() + 60
        while True:
            try:
                self.admin.request("GET", "")
                return
            except (RuntimeError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def minio(tmp_path_factory):
    """A MinIO server for the tests of one module."""
    server = MinioServer(tmp_path_factory.mktemp("minio"))
    yield server
    server.stop()
