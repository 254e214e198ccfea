"""`shardq serve` owns its ports or refuses to start: a second coordinator on
a port in use (gRPC or --http) exits non-zero naming the address instead of
sharing the clients; ports outside 0..65535 are refused, not wrapped; TLS
files that are not a key and its certificate are named as such; a
--port-file that cannot be written stops it before it starts; and a
request larger than --max-request-mb is refused while the server goes on."""
import re
import subprocess
import time

import grpc
import pytest

from cli_helpers import shardq_bin
from test_wire_api import create, pb  # noqa: F401  (pb is a fixture)


def serve(*args, timeout=30):
    """Runs `shardq serve ARGS` expecting it to give up on its own; one that
    is still running after `timeout` is stopped and reported (the bug this
    file guards against is a second serve that runs)."""
    proc = subprocess.Popen([shardq_bin(), "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"shardq serve {' '.join(args)} kept running:\n{out}{err}")
    return proc.returncode, out, err


def http_port(log_path):
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", log_path.read_text())
    assert m, log_path.read_text()
    return int(m.group(1))


def test_a_second_serve_on_a_grpc_port_in_use_exits_naming_the_address(coordinator):
    rc, out, err = serve("--listen", coordinator.address)
    assert rc != 0
    assert f"address {coordinator.address} already in use" in err
    assert "listening" not in out
    assert coordinator.proc.poll() is None  # the first one is untouched


def test_a_second_serve_on_an_http_port_in_use_exits_naming_the_address(start_coordinator,
                                                                         tmp_path):
    first = start_coordinator("--http", "127.0.0.1:0")
    port = http_port(tmp_path / "serve.log")
    rc, out, err = serve("--listen", "127.0.0.1:0", "--http", f"127.0.0.1:{port}")
    assert rc != 0
    assert f"address 127.0.0.1:{port} already in use" in err
    assert "listening" not in out
    assert first.proc.poll() is None


@pytest.mark.parametrize("flag", ["--listen", "--http"])
def test_a_port_above_65535_is_refused_not_wrapped(flag):
    args = ["--listen", "127.0.0.1:0", flag, "127.0.0.1:70000"]
    if flag == "--listen":
        args = ["--listen", "127.0.0.1:70000"]
    rc, out, err = serve(*args)
    assert rc == 2, err
    assert "INVALID_ARGUMENT" in err and f"{flag} '127.0.0.1:70000'" in err
    assert "65535" in err


def make_cert(directory, name):
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def test_a_bad_tls_key_is_named_and_never_called_an_address_in_use(tmp_path):
    cert, _ = make_cert(tmp_path, "a")
    _, other_key = make_cert(tmp_path, "b")
    garbage = tmp_path / "garbage.key"
    garbage.write_text("not a key\n")
    rc, out, err = serve("--listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key",
                         str(garbage))
    assert rc == 2, err
    assert f"--tls-key '{garbage}' holds no PEM private key" in err
    assert "in use" not in err and "listening" not in out
    rc, out, err = serve("--listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key",
                         str(other_key))
    assert rc == 2, err
    assert f"--tls-key '{other_key}' is not the key of the certificate in --tls-cert" in err
    assert "in use" not in err
    rc, out, err = serve("--listen", "127.0.0.1:0", "--tls-cert", str(garbage), "--tls-key",
                         str(other_key))
    assert rc == 2, err
    assert f"--tls-cert '{garbage}' holds no PEM certificate" in err
    rc, out, err = serve("--listen", "127.0.0.1:0", "--tls-cert", str(cert), "--tls-key",
                         str(tmp_path / "missing.key"))
    assert rc == 2, err
    assert f"cannot read --tls-key file '{tmp_path / 'missing.key'}'" in err


@pytest.mark.parametrize("extra, request_mib", [((), 65), (("--max-request-mb", "1"), 2)])
def test_a_request_over_the_limit_is_refused_and_the_server_stays_up(
        pb, start_coordinator, extra, request_mib):  # noqa: F811 (pb: the fixture)
    c = start_coordinator(*extra)
    channel = grpc.insecure_channel(c.address)
    stub = pb[1].CoordinatorStub(channel)
    try:
        big = ["x" * (1 << 20)] * request_mib  # request_mib MiB of item names
        with pytest.raises(grpc.RpcError) as refused:
            create(pb, stub, "huge", big)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert c.proc.poll() is None
        info = create(pb, stub, "small", ["a", "b"])
        assert info.created and info.num_items == 2
        with pytest.raises(grpc.RpcError) as missing:
            stub.GetQueue(pb[0].GetQueueRequest(queue="huge"))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        channel.close()


def test_a_second_serve_on_a_unix_socket_in_use_exits_instead_of_taking_it(tmp_path):
    sock, port_file = tmp_path / "c.sock", tmp_path / "port"
    first = subprocess.Popen([shardq_bin(), "serve", "--listen", f"unix:{sock}", "--port-file",
                              str(port_file)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        for _ in range(400):
            if port_file.exists() or first.poll() is not None:
                break
            time.sleep(0.05)
        assert port_file.exists(), "the first serve did not start"
        rc, out, err = serve("--listen", f"unix:{sock}")
        assert rc != 0
        assert f"address unix:{sock} already in use" in err
        assert first.poll() is None
    finally:
        first.kill()
        first.wait()


def test_a_port_file_that_cannot_be_written_stops_serve_before_it_starts(tmp_path):
    # A script waits for this file: serve must not run without it.
    target = tmp_path / "missing-dir" / "serve.port"
    rc, out, err = serve("--listen", "127.0.0.1:0", "--port-file", str(target))
    assert rc == 2, err
    assert "INVALID_ARGUMENT" in err and f"--port-file '{target}'" in err, err
    assert "No such file or directory" in err, err
    assert "listening" not in out
