#include "src/store/etcd_client.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/etcd_testing.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<EtcdClient> Connect(const std::vector<std::string>& endpoints,
                                    absl::Duration timeout = absl::Seconds(2)) {
  EtcdClientOptions options;
  options.endpoints = endpoints;
  options.call_timeout = timeout;
  return *EtcdClient::Create(options);
}

etcdserverpb::PutRequest PutOf(const std::string& key, const std::string& value) {
  etcdserverpb::PutRequest put;
  put.set_key(key);
  put.set_value(value);
  return put;
}

#define START_OR_SKIP(cluster)                                              \
  do {                                                                      \
    if (EtcdTestCluster::FindBinary().empty()) GTEST_SKIP() << EtcdTestCluster::kMissing; \
    absl::Status started = (cluster).Start();                               \
    ASSERT_TRUE(started.ok()) << started;                                   \
  } while (false)

TEST(EtcdEndpoints, ParsesListsAndNamesABadEntry) {
  absl::StatusOr<std::vector<std::string>> ok = ParseEtcdEndpoints("a:1, b:2 ,127.0.0.1:2379");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(*ok, ::testing::ElementsAre("a:1", "b:2", "127.0.0.1:2379"));
  absl::Status bad = ParseEtcdEndpoints("a:1,nohost").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("'nohost'"));
  EXPECT_EQ(ParseEtcdEndpoints("a:1,").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseEtcdEndpoints("a:99999").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EtcdClient::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(EtcdEndpoints, PrefixEndIsTheNextKey) {
  EXPECT_EQ(EtcdPrefixEnd("/a/"), "/a0");
  EXPECT_EQ(EtcdPrefixEnd(std::string("a\xff", 2)), "b");
  EXPECT_EQ(EtcdPrefixEnd(""), std::string(1, '\0'));
}

TEST(EtcdClient, UnreachableEndpointIsUnavailableNamingEtcdAndTheEndpoint) {
  // Nothing listens on port 1 of loopback.
  std::unique_ptr<EtcdClient> client = Connect({"127.0.0.1:1"}, absl::Milliseconds(500));
  absl::Status s = client->Get("/k").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("etcd"));
  EXPECT_THAT(s.message(), HasSubstr("127.0.0.1:1"));
}

TEST(EtcdClient, PutGetDeleteAndTxnCompare) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::unique_ptr<EtcdClient> client = Connect(cluster.endpoint_list());
  ASSERT_TRUE(client->Put(PutOf("/t/a", "1")).ok());
  absl::StatusOr<etcdserverpb::KeyValue> kv = client->Get("/t/a");
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->value(), "1");
  EXPECT_GT(kv->create_revision(), 0);
  EXPECT_EQ(client->Get("/t/none").status().code(), absl::StatusCode::kNotFound);

  // A transaction guarded by the key's create revision: applies while the
  // key is the same, not once it was re-created.
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* cmp = txn.add_compare();
  cmp->set_key("/t/a");
  cmp->set_target(etcdserverpb::Compare::CREATE);
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_create_revision(kv->create_revision());
  *txn.add_success()->mutable_request_put() = PutOf("/t/b", "2");
  absl::StatusOr<etcdserverpb::TxnResponse> r = client->Txn(txn);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->succeeded());
  etcdserverpb::DeleteRangeRequest del;
  del.set_key("/t/a");
  ASSERT_TRUE(client->DeleteRange(del).ok());
  ASSERT_TRUE(client->Put(PutOf("/t/a", "again")).ok());
  *txn.mutable_success(0)->mutable_request_put() = PutOf("/t/b", "3");
  r = client->Txn(txn);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->succeeded());
  EXPECT_EQ(client->Get("/t/b")->value(), "2");

  // Ranges over a prefix, in key order.
  etcdserverpb::RangeRequest range;
  range.set_key("/t/");
  range.set_range_end(EtcdPrefixEnd("/t/"));
  absl::StatusOr<etcdserverpb::RangeResponse> all = client->Range(range);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->kvs_size(), 2);
  EXPECT_EQ(all->kvs(0).key(), "/t/a");
  EXPECT_EQ(all->kvs(1).key(), "/t/b");

  // Compaction up to the current revision; again is OUT_OF_RANGE.
  const int64_t rev = all->header().revision();
  EXPECT_TRUE(client->Compact(rev).ok());
  EXPECT_EQ(client->Compact(rev - 1).code(), absl::StatusCode::kOutOfRange);
}

TEST(EtcdClient, LeaseKeepsItsKeysUntilRevokedAndThenIsNotFound) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::unique_ptr<EtcdClient> client = Connect(cluster.endpoint_list());
  absl::StatusOr<int64_t> lease = client->LeaseGrant(5);
  ASSERT_TRUE(lease.ok()) << lease.status();
  etcdserverpb::PutRequest put = PutOf("/t/leased", "x");
  put.set_lease(*lease);
  ASSERT_TRUE(client->Put(put).ok());
  absl::StatusOr<int64_t> ttl = client->LeaseKeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_GT(*ttl, 0);
  EXPECT_EQ(client->Get("/t/leased")->lease(), *lease);
  ASSERT_TRUE(client->LeaseRevoke(*lease).ok());
  EXPECT_EQ(client->Get("/t/leased").status().code(), absl::StatusCode::kNotFound);
  absl::Status gone = client->LeaseKeepAlive(*lease).status();
  EXPECT_EQ(gone.code(), absl::StatusCode::kNotFound) << gone;
  EXPECT_THAT(gone.message(), HasSubstr("expired"));
  EXPECT_TRUE(client->LeaseRevoke(*lease).ok());  // already gone: fine
}

TEST(EtcdClient, FailsOverToAnotherMemberAndReportsLostQuorum) {
  EtcdTestCluster cluster(3);
  START_OR_SKIP(cluster);
  // The first endpoint listed is the one killed: calls fail over.
  std::unique_ptr<EtcdClient> client = Connect(cluster.endpoint_list(), absl::Seconds(1));
  ASSERT_TRUE(client->Put(PutOf("/t/k", "1")).ok());
  cluster.Kill(0);
  absl::Status s = client->Put(PutOf("/t/k", "2")).status();
  for (int i = 0; i < 20 && !s.ok(); ++i) {  // a raft election may be running
    s = client->Put(PutOf("/t/k", "2")).status();
  }
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(client->Get("/t/k")->value(), "2");

  cluster.Kill(1);  // one of three left: no quorum
  s = client->Put(PutOf("/t/k", "3")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("etcd"));
  // A read held by the member without quorum until the deadline: etcd
  // answers UNKNOWN "context deadline exceeded", which is no answer too (a
  // worker following the leader through etcd retries it).
  absl::Status read = client->Get("/t/k").status();
  EXPECT_EQ(read.code(), absl::StatusCode::kUnavailable) << read;

  ASSERT_TRUE(cluster.Restart(1).ok());
  s = client->Put(PutOf("/t/k", "4")).status();
  for (int i = 0; i < 20 && !s.ok(); ++i) s = client->Put(PutOf("/t/k", "4")).status();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(client->Get("/t/k")->value(), "4");
}

}  // namespace
}  // namespace shardq
