"""Issue 21: s3:// works against a real S3-compatible server (MinIO on
127.0.0.1, see tests/minio_server.py): exact records across slices, gzip
objects, 403/404, an object replaced after planning and while it is read, a
connection reset mid-range, a queue over more than one listing page of
objects, and download_dir."""
import collections
import gzip
import os
import pathlib
import socket
import sys
import threading
import time
import uuid

import pytest

import shardq

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from minio_server import minio  # noqa: E402,F401  (the fixture)
from serve_helpers import read_all as read_values  # noqa: E402


@pytest.fixture
def s3(minio, monkeypatch):
    """A fresh bucket on the module's MinIO, and the environment that points
    shardq at it."""
    for key, value in minio.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SHARDQ_S3_CHUNK_BYTES", str(64 << 10))  # several chunks per slice
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    minio.admin.make_bucket(bucket)
    return minio, bucket


def tfrecord_bytes(tmp_path, records):
    path = tmp_path / f"staging-{uuid.uuid4().hex[:6]}.tfrecord"
    with shardq.TFRecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    data = path.read_bytes()
    path.unlink()
    return data


def queue(works, **kw):
    kw.setdefault("name", f"s3-{uuid.uuid4().hex[:8]}")
    return shardq.WorkQueue(works, **kw)


def read_all(q, reader, n=97):
    return read_values(reader, q.input_producer(), n)


def test_text_objects_in_slices_give_every_line_once(s3):
    minio, bucket = s3
    lines = []
    for i in range(3):
        body = "".join(f"object {i} line {j} {'x' * (j % 50)}\n" for j in range(4000))
        lines += body.encode().splitlines()
        minio.admin.put(bucket, f"text/part-{i}.txt", body)
    q = queue([f"s3://{bucket}/text/*.txt"], num_slices=17)
    assert q.num_items == 17
    got = read_all(q, shardq.TextLineReader())
    assert collections.Counter(got) == collections.Counter(lines)
    assert q.stats()["finished"]


def test_tfrecord_objects_in_slices_give_every_record_once(s3, tmp_path):
    minio, bucket = s3
    records = []
    for i in range(4):
        batch = [b"rec %d %d " % (i, j) + b"y" * (j % 300) for j in range(3000)]
        records += batch
        minio.admin.put(bucket, f"tf/part-{i}.tfrecord", tfrecord_bytes(tmp_path, batch))
    q = queue([f"s3://{bucket}/tf/"], num_slices=23, num_epochs=2)
    got = read_all(q, shardq.TFRecordReader())
    assert collections.Counter(got) == collections.Counter(records * 2)


def test_items_name_the_object_its_range_and_the_planned_etag(s3):
    minio, bucket = s3
    minio.admin.put(bucket, "one.txt", "a\nb\nc\n")
    q = queue([f"s3://{bucket}/one.txt"], num_slices=2, shuffle=False, num_clients=2)
    items = [q.take() for _ in range(q.num_items)]
    assert [i.start for i in items] == [0, 3]
    for item in items:
        assert item.startswith(f"s3://{bucket}/one.txt?etag=")
        assert item.work == f"s3://{bucket}/one.txt"


def test_a_gzip_object_is_one_whole_item(s3, tmp_path):
    minio, bucket = s3
    gz_records = [b"gz %d" % i for i in range(2000)]
    plain_records = [b"plain %d" % i for i in range(2000)]
    minio.admin.put(bucket, "c.tfrecord.gz", gzip.compress(tfrecord_bytes(tmp_path, gz_records)))
    minio.admin.put(bucket, "p.tfrecord", tfrecord_bytes(tmp_path, plain_records))
    works = [f"s3://{bucket}/c.tfrecord.gz", f"s3://{bucket}/p.tfrecord"]
    q = queue(works, num_slices=6, shuffle=False, num_clients=6)
    items = [q.take() for _ in range(q.num_items)]
    gz_items = [i for i in items if i.work.endswith(".gz")]
    assert len(gz_items) == 1 and gz_items[0].start is None
    q.close()
    got = read_all(queue(works, num_slices=6), shardq.TFRecordReader())
    assert collections.Counter(got) == collections.Counter(gz_records + plain_records)


def test_missing_objects_and_buckets_are_not_found(s3):
    minio, bucket = s3
    with pytest.raises(shardq.NotFoundError, match=f"s3://{bucket}/nope.txt.*404"):
        queue([f"s3://{bucket}/nope.txt"])
    with pytest.raises(shardq.NotFoundError, match="matches no object"):
        queue([f"s3://{bucket}/none/*.txt"])
    with pytest.raises(shardq.NotFoundError, match="no-such-bucket-x"):
        queue(["s3://no-such-bucket-x/a.txt"])


def test_an_object_named_twice_is_refused(s3):
    # Listed on its own and matched by a pattern too: its records would be
    # handed out twice in every epoch.
    minio, bucket = s3
    minio.admin.put(bucket, "d/a.txt", b"1\n2\n")
    minio.admin.put(bucket, "d/b.txt", b"3\n")
    with pytest.raises(shardq.InvalidArgumentError, match=f"'s3://{bucket}/d/a.txt' is listed twice"):
        queue([f"s3://{bucket}/d/*.txt", f"s3://{bucket}/d/a.txt"], num_slices=4)
    assert sorted(read_all(queue([f"s3://{bucket}/d/*.txt"]), shardq.TextLineReader())) == \
        [b"1", b"2", b"3"]


def test_wrong_credentials_are_permission_denied_naming_the_bucket(s3, monkeypatch):
    minio, bucket = s3
    minio.admin.put(bucket, "a.txt", "x\n")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(shardq.PermissionDeniedError, match=f"HTTP 403.*bucket '{bucket}'"):
        queue([f"s3://{bucket}/a.txt"])
    with pytest.raises(shardq.PermissionDeniedError, match=f"bucket '{bucket}'"):
        queue([f"s3://{bucket}/*.txt"])


def test_an_object_replaced_after_planning_is_refused(s3):
    minio, bucket = s3
    body = "".join(f"line {j}\n" for j in range(5000))
    minio.admin.put(bucket, "r.txt", body)
    q = queue([f"s3://{bucket}/r.txt"], num_slices=4, shuffle=False)
    reader = shardq.TextLineReader()
    producer = q.input_producer()
    _, first = reader.read_up_to(producer, 10)
    assert first[0] == b"line 0"
    # Same size, other bytes: only the ETag tells.
    minio.admin.put(bucket, "r.txt", body.replace("line", "LINE"))
    with pytest.raises(shardq.FailedPreconditionError, match="changed"):
        while True:
            reader.read_up_to(producer, 1000)


def test_an_object_replaced_while_it_is_read_is_refused(s3, monkeypatch):
    minio, bucket = s3
    monkeypatch.setenv("SHARDQ_S3_CHUNK_BYTES", str(16 << 10))
    body = "".join(f"line {j:06d}\n" for j in range(100000))  # 1.2 MB, one item
    minio.admin.put(bucket, "w.txt", body)
    q = queue([f"s3://{bucket}/w.txt"])
    reader = shardq.TextLineReader()
    producer = q.input_producer()
    _, first = reader.read_up_to(producer, 10)
    assert len(first) == 10
    minio.admin.put(bucket, "w.txt", body.upper())
    with pytest.raises(shardq.FailedPreconditionError, match=f"s3://{bucket}/w.txt.*changed"):
        while True:
            reader.read_up_to(producer, 1000)


class Proxy:
    """A TCP proxy to MinIO. It writes down each request's method, path and
    Range header, and the connection that carried it (client to server),
    counts the bytes of answers (server to client), and notes the
    connections that the client closed. With `cut_after`, it resets one
    connection once that connection has passed `cut_after` bytes from the
    server to the client (mid-body of a GET)."""

    def __init__(self, port, cut_after=None):
        self.upstream = ("127.0.0.1", port)
        self.cut_after = cut_after
        self.cuts = 0
        self.connections = 0
        self.requests = []  # (method, path, range header or None)
        self.request_connections = []  # the connection of each request, from 0
        self.answer_bytes = 0
        self.closed_by_client = set()
        self._ended_here = set()  # connections cut, or closed by the server
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def wait_closed_by_client(self, connection, timeout=60):
        """Waits until the client has closed `connection`; False after
        `timeout` seconds."""
        with self.changed:
            return self.changed.wait_for(lambda: connection in self.closed_by_client,
                                         timeout)

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            with self.lock:
                connection = self.connections
                self.connections += 1
            threading.Thread(target=self._requests, args=(client, server, connection),
                             daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client, connection),
                             daemon=True).start()

    def _requests(self, client, server, connection):
        pending = b""
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                pending += data
                while b"\r\n\r\n" in pending:  # GET and HEAD have no body
                    head, pending = pending.split(b"\r\n\r\n", 1)
                    lines = head.decode("latin-1").split("\r\n")
                    method, path = lines[0].split(" ")[:2]
                    ranges = [l.split(":", 1)[1].strip() for l in lines[1:]
                              if l.lower().startswith("range:")]
                    with self.lock:
                        self.requests.append((method, path, ranges[0] if ranges else None))
                        self.request_connections.append(connection)
                server.sendall(data)
        except OSError:
            pass
        with self.changed:
            ended_here = connection in self._ended_here
            if not ended_here and not self.closed:
                self.closed_by_client.add(connection)
                self.changed.notify_all()
        if not ended_here:
            self._shutdown(client, server)

    def _answers(self, server, client, connection):
        passed = 0
        server_ended = False
        try:
            while True:
                try:
                    data = server.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    server_ended = True
                    break
                with self.lock:
                    cut = (self.cut_after is not None and self.cuts == 0
                           and passed + len(data) > self.cut_after)
                    if cut:
                        self.cuts += 1
                        self._ended_here.add(connection)
                    self.answer_bytes += len(data) if not cut else max(0, self.cut_after - passed)
                if cut:
                    client.sendall(data[: max(0, self.cut_after - passed)])
                    for s in (server, client):  # RST, not FIN: a reset connection
                        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                     b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    client.shutdown(socket.SHUT_RD)  # wakes _requests, sends nothing
                    for s in (server, client):
                        s.close()
                    return
                passed += len(data)
                client.sendall(data)
        except OSError:  # the client is gone: _requests sees it too
            pass
        if server_ended:
            with self.lock:
                if connection not in self.closed_by_client:
                    self._ended_here.add(connection)
        self._shutdown(server, client)

    @staticmethod
    def _shutdown(*sockets):
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.closed = True
        self.listener.close()


def test_a_connection_reset_mid_range_is_retried_without_duplicates(s3, monkeypatch, tmp_path, capfd):
    minio, bucket = s3
    records = [b"reset %d " % j + b"z" * (j % 400) for j in range(20000)]  # ~4.3 MB
    minio.admin.put(bucket, "big.tfrecord", tfrecord_bytes(tmp_path, records))
    proxy = Proxy(minio.port, cut_after=300 << 10)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("SHARDQ_S3_CHUNK_BYTES", str(1 << 20))
        q = queue([f"s3://{bucket}/big.tfrecord"], num_slices=3)
        got = read_all(q, shardq.TFRecordReader())
    finally:
        proxy.close()
    assert proxy.cuts == 1
    assert got == records or collections.Counter(got) == collections.Counter(records)
    assert len(got) == len(records)
    assert "retry 1 of" in capfd.readouterr().err


def test_a_slice_is_one_ranged_get_of_its_bytes_and_the_look_ahead(s3, monkeypatch, tmp_path):
    minio, bucket = s3
    records, sizes = [], {}
    for i in range(3):
        batch = [b"slice %d %d " % (i, j) + b"q" * (j % 900) for j in range(6000)]  # ~2.8 MB
        records += batch
        data = tfrecord_bytes(tmp_path, batch)
        sizes[f"/{bucket}/s/part-{i}.tfrecord"] = len(data)
        minio.admin.put(bucket, f"s/part-{i}.tfrecord", data)
    proxy = Proxy(minio.port)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("SHARDQ_S3_CHUNK_BYTES", str(64 << 20))
        q = queue([f"s3://{bucket}/s/*.tfrecord"], num_slices=12, shuffle=False)
        slices = q.num_items
        planned = len(proxy.requests)  # the planner's own (a listing, sniffs)
        producer = q.input_producer()
        reader = shardq.TFRecordReader()
        got = []
        while True:
            try:
                _, batch = reader.read_up_to(producer, 50)
            except shardq.OutOfRangeError:
                break
            got += batch
        q.close()
    finally:
        proxy.close()
    assert got == records
    gets = [(path, r) for method, path, r in proxy.requests[planned:] if method == "GET"]
    # One GET per slice for its bytes and the 256 KiB past its end, never the
    # whole object; the sniffs of the later slices of an object are answered
    # from the first slice's bytes.
    assert slices >= 9
    assert len(gets) == slices, gets
    look_ahead = 256 << 10
    for path, r in gets:
        assert r is not None, path
        first, last = map(int, r.split("=")[1].split("-"))
        assert last - first + 1 < sizes[path] // 2 + look_ahead, (path, r)
    assert proxy.answer_bytes < sum(sizes.values()) + slices * (look_ahead + 4096)


def test_planning_asks_for_first_bytes_only_when_objects_are_sliced(s3, monkeypatch, tmp_path):
    """Without num_slices every object is one whole item: planning is the
    listing alone, and a gzip object is still read whole. With num_slices,
    each object is sniffed once (one small ranged GET) for its compression.
    The two queues read copies under two prefixes, since the first bytes of
    an object once read are remembered by the process."""
    minio, bucket = s3
    plain = [[b"p%d %d" % (i, j) for j in range(500)] for i in range(3)]
    gz = [b"gz %d" % j for j in range(500)]
    for prefix in ("whole", "sliced"):
        for i, records in enumerate(plain):
            minio.admin.put(bucket, f"{prefix}/p{i}.tfrecord", tfrecord_bytes(tmp_path, records))
        minio.admin.put(bucket, f"{prefix}/z.tfrecord",
                        gzip.compress(tfrecord_bytes(tmp_path, gz)))
    expected = collections.Counter(gz + [r for records in plain for r in records])
    proxy = Proxy(minio.port)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        whole = queue([f"s3://{bucket}/whole/*.tfrecord"], shuffle=False)
        planned = list(proxy.requests)
        assert whole.num_items == 4
        assert [m for m, _, _ in planned] == ["GET"] and "list-type=2" in planned[0][1], planned

        before = len(proxy.requests)
        works = [f"s3://{bucket}/sliced/*.tfrecord"]
        sliced = queue(works, num_slices=8, shuffle=False, num_clients=8)
        planned = proxy.requests[before:]
        sniffs = [(p, r) for m, p, r in planned if m == "GET" and r is not None]
        assert len(planned) == 5 and len(sniffs) == 4, planned
        assert all(r.startswith("bytes=0-") for _, r in sniffs), sniffs
        items = [sliced.take() for _ in range(sliced.num_items)]
        gz_items = [i for i in items if i.work.endswith("z.tfrecord")]
        assert len(gz_items) == 1 and gz_items[0].start is None
        sliced.close()

        assert collections.Counter(read_all(whole, shardq.TFRecordReader())) == expected
        got = read_all(queue(works, num_slices=8), shardq.TFRecordReader())
        assert collections.Counter(got) == expected
    finally:
        proxy.close()


@pytest.mark.parametrize("how", ["TextLineReader", "from_queue"])
def test_the_next_slice_opened_ahead_is_the_get_its_reader_uses(s3, monkeypatch, how):
    """Each reader hints the slice after the one it reads (its GET starts
    early); the open that follows takes that GET, so a slice is still one
    GET: the text reader's (it opens a byte before its range) and the
    pipeline's alike, and the lines come out exactly once."""
    minio, bucket = s3
    lines = []
    for i in range(2):
        body = "".join(f"ahead {i} {j} {'z' * (j % 700)}\n" for j in range(5000))  # ~1.8 MB
        lines += body.encode().splitlines()
        minio.admin.put(bucket, f"a/part-{i}.txt", body)
    # The plan's slices (planning is deterministic): their starts.
    probe = queue([f"s3://{bucket}/a/*.txt"], num_slices=10, shuffle=False, num_clients=100)
    planned_starts = [probe.take().start or 0 for _ in range(probe.num_items)]
    probe.close()
    proxy = Proxy(minio.port)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("SHARDQ_S3_CHUNK_BYTES", str(64 << 20))
        q = queue([f"s3://{bucket}/a/*.txt"], num_slices=10, shuffle=False)
        slices = q.num_items
        planned = len(proxy.requests)
        if how == "TextLineReader":
            got = read_all(q, shardq.TextLineReader(), n=40)
        else:
            got = list(shardq.data.from_queue(q, reader="text"))
        q.close()
    finally:
        proxy.close()
    assert collections.Counter(got) == collections.Counter(lines)
    gets = [r for method, _, r in proxy.requests[planned:] if method == "GET"]
    assert len(gets) == slices, gets
    # Each slice's GET starts where the text reader opens it: at the byte
    # before its range (at 0 for an object's first slice).
    items_starts = sorted(max(0, s - 1) for s in planned_starts)
    assert sorted(int(r.split("=")[1].split("-")[0]) for r in gets) == items_starts


def test_a_reader_that_pauses_longer_than_the_park_time_gets_every_record(s3, monkeypatch,
                                                                        tmp_path):
    minio, bucket = s3
    records = [b"pause %d " % j + b"p" * 4000 for j in range(6000)]  # ~24 MB
    minio.admin.put(bucket, "pause.tfrecord", tfrecord_bytes(tmp_path, records))
    proxy = Proxy(minio.port)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("SHARDQ_S3_CHUNK_BYTES", str(64 << 20))  # one GET, 4 MiB buffered
        monkeypatch.setenv("SHARDQ_S3_PARK_AFTER_MS", "300")
        q = queue([f"s3://{bucket}/pause.tfrecord"], shuffle=False)
        planned = len(proxy.requests)
        reader = shardq.TFRecordReader()
        producer = q.input_producer()
        _, got = reader.read_up_to(producer, 10)
        # The reader pauses until its GET is parked: once the buffer and the
        # sockets are full and the reader has taken nothing for 300 ms, the
        # GET's connection is closed (and a new GET starts when it goes on).
        with proxy.lock:
            get = next(i for i in range(planned, len(proxy.requests))
                       if proxy.requests[i][0] == "GET")
            connection = proxy.request_connections[get]
        assert proxy.wait_closed_by_client(connection), "the paused reader's GET was not parked"
        # From here the reader keeps reading; each stop of its own as long as
        # the park time (a descheduled process on a loaded machine) may cost
        # one more GET, so those are counted rather than ruled out.
        stops = 0
        last = time.monotonic()
        while True:
            if time.monotonic() - last >= 0.3:
                stops += 1
            try:
                _, batch = reader.read_up_to(producer, 500)
            except shardq.OutOfRangeError:
                break
            last = time.monotonic()
            got += batch
    finally:
        proxy.close()
    assert got == records
    starts = [int(r.split("=")[1].split("-")[0])
              for method, _, r in proxy.requests[planned:] if method == "GET"]
    assert 2 <= len(starts) <= 2 + stops and starts[0] == 0 and starts[1] >= 4 << 20, starts
    assert starts == sorted(starts), starts  # each GET resumes after the bytes delivered


def test_a_queue_over_more_than_a_listing_page_of_objects(s3):
    minio, bucket = s3
    expected = []
    for i in range(1050):  # MinIO lists 1000 keys per page
        body = f"obj {i} a\nobj {i} b\n"
        expected += body.encode().splitlines()
        minio.admin.put(bucket, f"many/{i:05d}.txt", body)
    q = queue([f"s3://{bucket}/many/*.txt"], shuffle=False)
    assert q.num_items == 1050
    first = q.take()
    assert first.work == f"s3://{bucket}/many/00000.txt"
    q.release(first)
    got = read_all(q, shardq.TextLineReader(), n=500)
    assert collections.Counter(got) == collections.Counter(expected)


def test_download_dir_copies_each_item_and_removes_it_on_completion(s3, tmp_path):
    minio, bucket = s3
    records = [b"dl %d" % j for j in range(3000)]
    minio.admin.put(bucket, "d.tfrecord", tfrecord_bytes(tmp_path, records))
    minio.admin.put(bucket, "t.txt", "".join(f"t {j}\n" for j in range(3000)))
    staging = tmp_path / "copies"
    q = queue([f"s3://{bucket}/d.tfrecord", f"s3://{bucket}/t.txt"], num_slices=6,
              download_dir=staging)
    got_records, got_lines = [], []
    while True:
        try:
            item = q.take()
        except shardq.OutOfRangeError:
            break
        assert os.path.dirname(item.path) == str(staging)
        if item.work.endswith(".tfrecord"):
            sub = queue([item.path])  # a local TFRecord file of exactly its records
            got_records += read_all(sub, shardq.TFRecordReader())
        else:
            got_lines += pathlib.Path(item.path).read_bytes().splitlines()
        q.complete(item)
        assert not os.path.exists(item.path)
    assert got_records == records or sorted(got_records) == sorted(records)
    assert sorted(got_lines) == sorted(b"t %d" % j for j in range(3000))
    assert os.listdir(staging) == []
