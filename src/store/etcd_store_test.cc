// EtcdStore: the journal and snapshots of a job in etcd, recovered in
// order; a deposed leader and a lost etcd. The tests of several commits
// in flight are in etcd_store_pipeline_test.cc.
#include "src/store/etcd_store.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/etcd_store_test_util.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

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

TEST_F(EtcdStoreTest, UpdatesOfSeveralQueuesSurviveAReopenInOrder) {
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
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
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
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

TEST_F(EtcdStoreTest, ManyQueuesAndLargeUpdatesStayWithinEtcdLimits) {
  const std::string large(3 * EtcdStore::kChunkBytes + 17, 'x');  // over etcd's 1.5 MiB
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
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
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), static_cast<size_t>(3 * EtcdStore::kMaxCommitOps));
  ASSERT_EQ(recovered.queues[0].name, "q0");
  ASSERT_EQ(recovered.queues[0].updates.size(), 3u);
  EXPECT_EQ(recovered.queues[0].updates[1].fail().reason(), large);
  EXPECT_EQ(recovered.queues[0].updates[2].fail().reason(), "after");
}

TEST_F(EtcdStoreTest, ASnapshotInChunksReplacesTheJournalItCovers) {
  journal::QueueSnapshot snapshot;
  snapshot.add_completed_bits(std::string(2 * EtcdStore::kChunkBytes + 5, '\x5a'));
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
    ASSERT_NE(store, nullptr);
    for (int i = 1; i <= 10; ++i) store->Append("a", FailUpdate(i, "r"));
    ASSERT_TRUE(store->Flush().ok());
    store->Append("b", FailUpdate(11, "r"));
    EXPECT_EQ(store->WriteSnapshot("a", 10, snapshot), snapshot.ByteSizeLong());
    // The snapshot's own entry took sequence 12.
    EXPECT_EQ(store->Append("a", FailUpdate(12, "r")), 13u);
    ASSERT_TRUE(store->Flush().ok());
    EXPECT_EQ(Keys("c/"), 3);  // the chunks
    // Queue a's journal keys up to the snapshot are gone; b's stays.
    EXPECT_EQ(Keys(JournalOf("a")), 1);
    EXPECT_EQ(Keys(JournalOf("b")), 1);
    EXPECT_EQ(store->totals().snapshots, 1);
    // A second snapshot (small, written inline) drops the first's chunks.
    journal::QueueSnapshot small;
    small.set_next_epoch(7);
    store->AppendSnapshot("a", 13, small);
    ASSERT_TRUE(store->Flush().ok());
    EXPECT_EQ(Keys("c/"), 1);
    EXPECT_EQ(Keys(JournalOf("a")), 0);
  }
  // The history before the last snapshot was compacted away.
  etcdserverpb::RangeRequest old;
  old.set_key(prefix_ + "s/");
  old.set_range_end(EtcdPrefixEnd(prefix_ + "s/"));
  old.set_revision(2);
  EXPECT_EQ(client_->Range(old).status().code(), absl::StatusCode::kOutOfRange);

  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
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

TEST_F(EtcdStoreTest, ASnapshotCommittedWithUpdatesItCoversStoresThemOnce) {
  // The coordinator's snapshot thread can hand the writer a snapshot while
  // the updates it covers still wait for their commit: both then go in one
  // transaction (etcd refuses a put inside the same transaction's delete
  // range as a duplicate key). Pausing etcd makes the updates wait.
  EtcdStoreOptions options = JobOptions(client_);
  options.retry_for = absl::Seconds(60);
  // One writer, so that the updates wait in the same batch as the
  // snapshot. With more, each would go in a commit of its own here; the
  // case still arises when every writer is busy.
  options.commits_in_flight = 1;
  journal::QueueSnapshot snapshot;
  snapshot.set_next_epoch(3);
  {
    RecoveredState recovered;
    absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(options, &recovered);
    ASSERT_TRUE(store.ok()) << store.status();
    cluster_.Pause(0);
    (*store)->Append("a", FailUpdate(1, "r"));  // the writer takes it and waits for etcd
    absl::SleepFor(absl::Milliseconds(200));
    (*store)->Append("a", FailUpdate(2, "r"));
    (*store)->Append("a", FailUpdate(3, "r"));
    (*store)->AppendSnapshot("a", 3, snapshot);  // covers 1..3; takes seq 4
    EXPECT_EQ((*store)->Append("a", FailUpdate(5, "r")), 5u);
    cluster_.Resume(0);
    absl::Status flushed = (*store)->Flush();
    ASSERT_TRUE(flushed.ok()) << flushed;
    // Only the update after the snapshot is left in the journal.
    EXPECT_EQ(Keys(JournalOf("a")), 1);
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  ASSERT_NE(recovered.queues[0].snapshot, nullptr);
  EXPECT_EQ(recovered.queues[0].snapshot->next_epoch(), 3);
  EXPECT_EQ(recovered.queues[0].snapshot_seq, 3u);
  ASSERT_EQ(recovered.queues[0].updates.size(), 1u);
  EXPECT_EQ(recovered.last_seq, 5u);
}

TEST_F(EtcdStoreTest, ADeposedLeaderCommitsNothing) {
  const std::string& key = leader_key_;
  int64_t rev = 0;
  ASSERT_NO_FATAL_FAILURE(BecomeLeader(&rev));
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(&recovered, key, rev);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->WaitDurable(store->Append("a", FailUpdate(1, "kept"))).ok());
    EXPECT_FALSE(store->lost_leadership());
    ASSERT_NO_FATAL_FAILURE(AnotherLeaderWins());
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
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  ASSERT_EQ(recovered.queues[0].updates.size(), 1u);
  EXPECT_EQ(recovered.queues[0].updates[0].fail().reason(), "kept");
}

TEST_F(EtcdStoreTest, LostEtcdFailsTheStoreWithUnavailableNamingEtcd) {
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->WaitDurable(store->Append("a", FailUpdate(1, "r"))).ok());
  cluster_.Kill(0);
  absl::Status s = store->WaitDurable(store->Append("a", FailUpdate(2, "r")));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("etcd"));
  EXPECT_THAT(s.message(), HasSubstr(cluster_.endpoint_list()[0]));
  EXPECT_FALSE(store->lost_leadership());
}

}  // namespace
}  // namespace shardq
