"""The wire API stands alone: a Python client built only from
proto/shardq/coordinator.proto (stubs generated here with grpc_tools) and
Debian's python3-grpcio drives the coordinator, and bogus requests get their
specific status and change nothing."""
import importlib
import sys

import grpc
import pytest
from grpc_tools import protoc

from cli_helpers import REPO


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    out = tmp_path_factory.mktemp("stubs")
    rc = protoc.main(["protoc", f"-I{REPO}", f"--python_out={out}", f"--grpc_python_out={out}",
                      str(REPO / "proto" / "shardq" / "coordinator.proto")])
    assert rc == 0
    sys.path.insert(0, str(out))
    try:
        messages = importlib.import_module("proto.shardq.coordinator_pb2")
        services = importlib.import_module("proto.shardq.coordinator_pb2_grpc")
    finally:
        sys.path.remove(str(out))
    return messages, services


@pytest.fixture
def stub(pb, coordinator):
    channel = grpc.insecure_channel(coordinator.address)
    yield pb[1].CoordinatorStub(channel)
    channel.close()


def create(pb, stub, name, items, **config):
    cfg = pb[0].QueueConfig(name=name, items=items, num_epochs=config.get("epochs", 1),
                            shuffle=True, seed=config.get("seed", 3), seed_set=True,
                            num_clients=config.get("num_clients", 1), lease_timeout_ms=30000)
    return stub.CreateQueue(pb[0].CreateQueueRequest(config=cfg))


def status(pb, stub, name):
    return stub.Status(pb[0].StatusRequest(queue=name)).queues[0]


def test_python_client_creates_takes_and_completes(pb, stub):
    messages = pb[0]
    info = create(pb, stub, "py", [f"item-{i}" for i in range(5)], epochs=2)
    assert info.created and info.num_items == 5 and info.seed == 3
    seen = []
    while True:
        resp = stub.Take(messages.TakeRequest(queue="py", worker="py-w", max_items=1, wait_ms=1000))
        if resp.end_of_input:
            break
        for item in resp.items:
            seen.append((item.epoch, item.item))
            done = stub.Complete(messages.CompleteRequest(queue="py", worker="py-w",
                                                          lease_id=item.lease_id))
            assert not done.duplicate
    assert sorted(seen) == sorted((e, f"item-{i}") for e in range(2) for i in range(5))
    s = status(pb, stub, "py")
    assert s.completed == 10 and s.finished


def test_take_can_return_several_items(pb, stub):
    create(pb, stub, "batch", [f"i{i}" for i in range(10)], num_clients=4)
    resp = stub.Take(pb[0].TakeRequest(queue="batch", worker="w", max_items=8, wait_ms=0))
    assert len(resp.items) == 4  # bounded by num_clients


def test_bogus_requests_get_specific_status_and_change_nothing(pb, stub):
    m = pb[0]
    create(pb, stub, "bogus", ["a", "b", "c"])
    item = stub.Take(m.TakeRequest(queue="bogus", worker="owner", max_items=1, wait_ms=0)).items[0]
    before = status(pb, stub, "bogus")

    def code_of(call, request):
        with pytest.raises(grpc.RpcError) as err:
            call(request)
        return err.value.code()

    assert code_of(stub.Complete, m.CompleteRequest(queue="bogus", worker="owner",
                                                    lease_id=987654321)) == grpc.StatusCode.NOT_FOUND
    assert code_of(stub.Complete, m.CompleteRequest(queue="bogus", worker="thief",
                                                    lease_id=item.lease_id)) == grpc.StatusCode.PERMISSION_DENIED
    assert code_of(stub.Release, m.ReleaseRequest(queue="bogus", worker="thief",
                                                  lease_id=item.lease_id)) == grpc.StatusCode.PERMISSION_DENIED
    assert code_of(stub.Take, m.TakeRequest(queue="bogus", worker="x" * 10000,
                                            max_items=1)) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(stub.Take, m.TakeRequest(queue="bogus", worker="w",
                                            max_items=0)) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(stub.Take, m.TakeRequest(queue="nope", worker="w",
                                            max_items=1)) == grpc.StatusCode.NOT_FOUND
    assert code_of(stub.CreateQueue, m.CreateQueueRequest(
        config=m.QueueConfig(name="n" * 5000, items=["a"], num_epochs=1, num_clients=1,
                             lease_timeout_ms=1000))) == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(stub.CreateQueue, m.CreateQueueRequest(
        config=m.QueueConfig(name="e", items=["a"], num_epochs=0, num_clients=1,
                             lease_timeout_ms=1000))) == grpc.StatusCode.INVALID_ARGUMENT
    after = status(pb, stub, "bogus")
    assert (after.pending, after.leased, after.completed, after.duplicates) == \
        (before.pending, before.leased, before.completed, before.duplicates)

    # The holder completing twice (a retry after a lost answer): the second is
    # answered as a duplicate but is no re-run, so `duplicates` does not count
    # it; another worker completing the same lease is refused.
    first = stub.Complete(m.CompleteRequest(queue="bogus", worker="owner", lease_id=item.lease_id))
    second = stub.Complete(m.CompleteRequest(queue="bogus", worker="owner", lease_id=item.lease_id))
    assert not first.duplicate and second.duplicate
    assert code_of(stub.Complete, m.CompleteRequest(
        queue="bogus", worker="intruder", lease_id=item.lease_id)) == \
        grpc.StatusCode.PERMISSION_DENIED
    final = status(pb, stub, "bogus")
    assert final.completed == 1 and final.duplicates == 0 and final.leased == 0
