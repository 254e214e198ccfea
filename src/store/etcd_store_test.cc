#include "src/store/etcd_store.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/etcd_testing.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

#define START_OR_SKIP(cluster)                                                             \
  do {                                                                                     \
    if (EtcdTestCluster::FindBinary().empty()) GTEST_SKIP() << EtcdTestCluster::kMissing; \
    absl::Status started = (cluster).Start();                                              \
    ASSERT_TRUE(started.ok()) << started;                                                  \
  } while (false)

std::shared_ptr<EtcdClient> Connect(const EtcdTestCluster& cluster) {
  EtcdClientOptions options;
  options.endpoints = cluster.endpoint_list();
  options.call_timeout = absl::Seconds(2);
  return std::shared_ptr<EtcdClient>(*EtcdClient::Create(options));
}

journal::Update FailUpdate(uint64_t lease, const std::string& reason) {
  journal::Update u;
  u.mutable_fail()->set_lease_id(lease);
  u.mutable_fail()->set_reason(reason);
  return u;
}

std::unique_ptr<EtcdStore> OpenStore(std::shared_ptr<EtcdClient> client, RecoveredState* out,
                                     const std::string& guard_key = "", int64_t guard_rev = 0) {
  EtcdStoreOptions options;
  options.client = std::move(client);
  options.job = "job1";
  options.guard_key = guard_key;
  options.guard_create_revision = guard_rev;
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(options, out);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

int64_t CountKeys(EtcdClient& client, const std::string& prefix) {
  etcdserverpb::RangeRequest range;
  range.set_key(prefix);
  range.set_range_end(EtcdPrefixEnd(prefix));
  range.set_count_only(true);
  return client.Range(range)->count();
}

TEST(EtcdStore, RefusesABadJobName) {
  EtcdStoreOptions options;
  EtcdClientOptions client_options;
  client_options.endpoints = {"127.0.0.1:1"};
  options.client = *EtcdClient::Create(client_options);
  options.job = "a/b";
  RecoveredState recovered;
  absl::Status s = EtcdStore::Open(options, &recovered).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'a/b'"));
}

TEST(EtcdStore, UpdatesOfSeveralQueuesSurviveAReopenInOrder) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
    ASSERT_NE(store, nullptr);
    EXPECT_TRUE(recovered.queues.empty());
    EXPECT_EQ(recovered.last_seq, 0u);
    for (int i = 1; i <= 30; ++i) {
      store->Append(i % 3 == 0 ? "b/queue" : "a", FailUpdate(i, "r"));
    }
    absl::Notification called;
    store->OnDurable(30, [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      called.Notify();
    });
    ASSERT_TRUE(store->Flush().ok());
    called.WaitForNotification();
    EXPECT_EQ(store->durable_seq(), 30u);
    EXPECT_GE(store->totals().entries, 30);
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(recovered.last_seq, 30u);
  ASSERT_EQ(recovered.queues.size(), 2u);
  EXPECT_EQ(recovered.queues[0].name, "a");
  EXPECT_EQ(recovered.queues[1].name, "b/queue");
  ASSERT_EQ(recovered.queues[0].updates.size(), 20u);
  ASSERT_EQ(recovered.queues[1].updates.size(), 10u);
  EXPECT_EQ(recovered.queues[0].updates[0].fail().lease_id(), 1u);
  EXPECT_EQ(recovered.queues[0].updates[19].fail().lease_id(), 29u);
  EXPECT_EQ(recovered.queues[1].updates[9].fail().lease_id(), 30u);
  // Sequence numbers continue after the recovered ones.
  EXPECT_EQ(store->Append("a", FailUpdate(31, "r")), 31u);
}

TEST(EtcdStore, ManyQueuesAndLargeUpdatesStayWithinEtcdLimits) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  const std::string large(3 * EtcdStore::kChunkBytes + 17, 'x');  // over etcd's 1.5 MiB
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
    ASSERT_NE(store, nullptr);
    for (int q = 0; q < 3 * EtcdStore::kMaxCommitOps; ++q) {
      store->Append(absl::StrCat("q", q), FailUpdate(q + 1, "r"));
    }
    store->Append("q0", FailUpdate(1000, large));
    store->Append("q0", FailUpdate(1001, "after"));
    absl::Status s = store->Flush();
    ASSERT_TRUE(s.ok()) << s;
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), static_cast<size_t>(3 * EtcdStore::kMaxCommitOps));
  ASSERT_EQ(recovered.queues[0].name, "q0");
  ASSERT_EQ(recovered.queues[0].updates.size(), 3u);
  EXPECT_EQ(recovered.queues[0].updates[1].fail().reason(), large);
  EXPECT_EQ(recovered.queues[0].updates[2].fail().reason(), "after");
}

TEST(EtcdStore, ASnapshotInChunksReplacesTheJournalItCovers) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  const std::string prefix = EtcdStore::JobPrefix("job1");
  journal::QueueSnapshot snapshot;
  snapshot.add_completed_bits(std::string(2 * EtcdStore::kChunkBytes + 5, '\x5a'));
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
    ASSERT_NE(store, nullptr);
    for (int i = 1; i <= 10; ++i) store->Append("a", FailUpdate(i, "r"));
    ASSERT_TRUE(store->Flush().ok());
    store->Append("b", FailUpdate(11, "r"));
    EXPECT_EQ(store->WriteSnapshot("a", 10, snapshot), snapshot.ByteSizeLong());
    // The snapshot's own entry took sequence 12.
    EXPECT_EQ(store->Append("a", FailUpdate(12, "r")), 13u);
    ASSERT_TRUE(store->Flush().ok());
    EXPECT_EQ(CountKeys(*client, prefix + "c/"), 3);  // the chunks
    // Queue a's journal keys up to the snapshot are gone; b's stays.
    EXPECT_EQ(CountKeys(*client, prefix + "j/" + absl::BytesToHexString("a") + "/"), 1);
    EXPECT_EQ(CountKeys(*client, prefix + "j/" + absl::BytesToHexString("b") + "/"), 1);
    EXPECT_EQ(store->totals().snapshots, 1);
    // A second snapshot (small, written inline) drops the first's chunks.
    journal::QueueSnapshot small;
    small.set_next_epoch(7);
    store->AppendSnapshot("a", 13, small);
    ASSERT_TRUE(store->Flush().ok());
    EXPECT_EQ(CountKeys(*client, prefix + "c/"), 1);
    EXPECT_EQ(CountKeys(*client, prefix + "j/" + absl::BytesToHexString("a") + "/"), 0);
  }
  // The history before the last snapshot was compacted away.
  etcdserverpb::RangeRequest old;
  old.set_key(prefix + "s/");
  old.set_range_end(EtcdPrefixEnd(prefix + "s/"));
  old.set_revision(2);
  EXPECT_EQ(client->Range(old).status().code(), absl::StatusCode::kOutOfRange);

  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  // Queues come in order of their first sequence number still stored.
  ASSERT_EQ(recovered.queues.size(), 2u);
  EXPECT_EQ(recovered.queues[0].name, "b");
  EXPECT_EQ(recovered.queues[0].updates.size(), 1u);
  EXPECT_EQ(recovered.queues[1].name, "a");
  ASSERT_NE(recovered.queues[1].snapshot, nullptr);
  EXPECT_EQ(recovered.queues[1].snapshot->next_epoch(), 7);
  EXPECT_EQ(recovered.queues[1].snapshot_seq, 13u);
  EXPECT_TRUE(recovered.queues[1].updates.empty());
  EXPECT_EQ(recovered.last_seq, 13u);
}

TEST(EtcdStore, ASnapshotCommittedWithUpdatesItCoversStoresThemOnce) {
  // The coordinator's snapshot thread can hand the writer a snapshot while
  // the updates it covers still wait for their commit: both then go in one
  // transaction (etcd refuses a put inside the same transaction's delete
  // range as a duplicate key). Pausing etcd makes the updates wait.
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  const std::string journal_a = EtcdStore::JobPrefix("job1") + "j/" + absl::BytesToHexString("a");
  EtcdStoreOptions options;
  options.client = client;
  options.job = "job1";
  options.retry_for = absl::Seconds(60);
  journal::QueueSnapshot snapshot;
  snapshot.set_next_epoch(3);
  {
    RecoveredState recovered;
    absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(options, &recovered);
    ASSERT_TRUE(store.ok()) << store.status();
    cluster.Pause(0);
    (*store)->Append("a", FailUpdate(1, "r"));  // the writer takes it and waits for etcd
    absl::SleepFor(absl::Milliseconds(200));
    (*store)->Append("a", FailUpdate(2, "r"));
    (*store)->Append("a", FailUpdate(3, "r"));
    (*store)->AppendSnapshot("a", 3, snapshot);  // covers 1..3; takes seq 4
    EXPECT_EQ((*store)->Append("a", FailUpdate(5, "r")), 5u);
    cluster.Resume(0);
    absl::Status flushed = (*store)->Flush();
    ASSERT_TRUE(flushed.ok()) << flushed;
    // Only the update after the snapshot is left in the journal.
    EXPECT_EQ(CountKeys(*client, journal_a + "/"), 1);
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  ASSERT_NE(recovered.queues[0].snapshot, nullptr);
  EXPECT_EQ(recovered.queues[0].snapshot->next_epoch(), 3);
  EXPECT_EQ(recovered.queues[0].snapshot_seq, 3u);
  ASSERT_EQ(recovered.queues[0].updates.size(), 1u);
  EXPECT_EQ(recovered.last_seq, 5u);
}

TEST(EtcdStore, ADeposedLeaderCommitsNothing) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  const std::string key = EtcdStore::JobPrefix("job1") + "leader";
  etcdserverpb::PutRequest put;
  put.set_key(key);
  put.set_value("me");
  ASSERT_TRUE(client->Put(put).ok());
  const int64_t rev = client->Get(key)->create_revision();
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered, key, rev);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->WaitDurable(store->Append("a", FailUpdate(1, "kept"))).ok());
    EXPECT_FALSE(store->lost_leadership());
    // Another coordinator wins: the key is re-created.
    etcdserverpb::DeleteRangeRequest del;
    del.set_key(key);
    ASSERT_TRUE(client->DeleteRange(del).ok());
    put.set_value("other");
    ASSERT_TRUE(client->Put(put).ok());
    const uint64_t seq = store->Append("a", FailUpdate(2, "lost"));
    absl::Status s = store->WaitDurable(seq);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("not leader"));
    EXPECT_THAT(s.message(), HasSubstr(key));
    EXPECT_TRUE(store->lost_leadership());
    EXPECT_EQ(store->status().code(), absl::StatusCode::kFailedPrecondition);
    absl::Notification called;
    store->OnDurable(store->Append("a", FailUpdate(3, "dropped")), [&](absl::Status later) {
      EXPECT_FALSE(later.ok());
      called.Notify();
    });
    called.WaitForNotification();
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  ASSERT_EQ(recovered.queues[0].updates.size(), 1u);
  EXPECT_EQ(recovered.queues[0].updates[0].fail().reason(), "kept");
}

TEST(EtcdStore, LostEtcdFailsTheStoreWithUnavailableNamingEtcd) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->WaitDurable(store->Append("a", FailUpdate(1, "r"))).ok());
  cluster.Kill(0);
  absl::Status s = store->WaitDurable(store->Append("a", FailUpdate(2, "r")));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("etcd"));
  EXPECT_THAT(s.message(), HasSubstr(cluster.endpoint_list()[0]));
  EXPECT_FALSE(store->lost_leadership());
}

}  // namespace
}  // namespace shardq
