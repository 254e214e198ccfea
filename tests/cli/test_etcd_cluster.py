"""The etcd test cluster itself: members start on free loopback ports, keep
quorum with one member down, and a killed member rejoins."""


def test_single_member_stores_and_reads(etcd_single):
    etcd_single.etcdctl("put", "/shardq-test/k", "v")
    assert etcd_single.etcdctl("get", "--print-value-only", "/shardq-test/k").strip() == "v"


def test_three_members_keep_quorum_with_one_down_and_it_rejoins(etcd_cluster):
    etcd_cluster.etcdctl("put", "/shardq-test/a", "1")
    etcd_cluster.kill(1)
    etcd_cluster.wait_healthy()  # the two left still have quorum
    etcd_cluster.etcdctl("put", "/shardq-test/b", "2")
    etcd_cluster.restart(1)
    out = etcd_cluster.etcdctl("get", "--prefix", "--print-value-only", "/shardq-test/")
    assert out.split() == ["1", "2"]
