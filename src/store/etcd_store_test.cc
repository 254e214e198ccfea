#include "src/store/etcd_store.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
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

// --- Several commits in flight (etcd_store.h, "Pipelining") ---------------

// The first sequence number of the commit that `request` stores (from its
// commit mark), or 0 for a transaction without one (a part, a chunk, a
// snapshot's commit).
uint64_t MarkedFirst(const etcdserverpb::TxnRequest& request) {
  for (const etcdserverpb::RequestOp& op : request.success()) {
    if (!op.has_request_put()) continue;
    const std::string& key = op.request_put().key();
    const size_t at = key.rfind("/m/");
    if (at != std::string::npos) return std::stoull(key.substr(at + 3));
  }
  return 0;
}

bool IsSnapshotCommit(const etcdserverpb::TxnRequest& request) {
  for (const etcdserverpb::RequestOp& op : request.success()) {
    if (op.has_request_put() && absl::StrContains(op.request_put().key(), "/s/")) return true;
  }
  return false;
}

// Holds the commit whose mark names `first` until release(), then sends
// it, or fails it without sending (fail_held), or sends it and loses the
// answer (lose_held_answer); says when it holds it and when each other
// commit was answered.
class HoldOneCommit {
 public:
  explicit HoldOneCommit(uint64_t first) : first_(first) {}

  EtcdStoreOptions Options(std::shared_ptr<EtcdClient> client) {
    EtcdStoreOptions options;
    options.client = std::move(client);
    options.job = "job1";
    options.max_gather = absl::ZeroDuration();  // a commit per append, at once
    options.txn_hook = [this](const etcdserverpb::TxnRequest& request,
                              const EtcdStoreOptions::SendTxn& send)
        -> absl::StatusOr<etcdserverpb::TxnResponse> {
      const uint64_t first = MarkedFirst(request);
      if (first != first_) {
        absl::StatusOr<etcdserverpb::TxnResponse> answer = send(request);
        absl::MutexLock lock(&mu_);
        answered_.push_back(first);
        return answer;
      }
      held_.Notify();
      release_.WaitForNotification();
      if (fail_) return absl::InternalError("injected: commit refused");
      absl::StatusOr<etcdserverpb::TxnResponse> answer = send(request);
      if (lose_answer_) return absl::InternalError("injected: answer lost");
      return answer;
    };
    return options;
  }
  void WaitHeld() { held_.WaitForNotification(); }
  // Waits until the commit whose mark names `first` was answered by etcd.
  void WaitAnswered(uint64_t first) {
    absl::MutexLock lock(&mu_);
    auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::find(answered_.begin(), answered_.end(), first) != answered_.end();
    };
    mu_.Await(absl::Condition(&answered));
  }
  void Release() { release_.Notify(); }
  void FailHeld() {
    fail_ = true;
    release_.Notify();
  }
  void LoseHeldAnswer() {
    lose_answer_ = true;
    release_.Notify();
  }

 private:
  const uint64_t first_;
  absl::Notification held_;
  absl::Notification release_;
  std::atomic<bool> fail_{false};
  std::atomic<bool> lose_answer_{false};
  absl::Mutex mu_;
  std::vector<uint64_t> answered_ ABSL_GUARDED_BY(mu_);
};

// Waits until the store counted `commits` successful commits (it counts
// one when etcd answered it, before it acknowledges anything).
void WaitForCommits(const EtcdStore& store, int64_t commits) {
  while (store.totals().commits < commits) absl::SleepFor(absl::Milliseconds(1));
}

std::unique_ptr<EtcdStore> OpenWith(const EtcdStoreOptions& options, RecoveredState* out) {
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(options, out);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::vector<std::string> Reasons(const RecoveredState::Queue& q) {
  std::vector<std::string> reasons;
  for (const journal::Update& u : q.updates) reasons.push_back(u.fail().reason());
  return reasons;
}

TEST(EtcdStorePipeline, ACommitAnsweredBeforeAnEarlierOneWaitsForIt) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  HoldOneCommit hold(1);
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(hold.Options(client), &recovered);
    ASSERT_NE(store, nullptr);
    store->Append("a", FailUpdate(1, "one"));
    hold.WaitHeld();
    store->Append("a", FailUpdate(2, "two"));
    hold.WaitAnswered(2);  // etcd stored commit 2 while commit 1 is in flight
    WaitForCommits(*store, 1);
    absl::Notification first;
    absl::Notification second;
    store->OnDurable(2, [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      second.Notify();
    });
    store->OnDurable(1, [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      first.Notify();
    });
    EXPECT_EQ(store->durable_seq(), 0u);
    EXPECT_FALSE(second.HasBeenNotified());
    hold.Release();
    first.WaitForNotification();
    second.WaitForNotification();
    EXPECT_EQ(store->durable_seq(), 2u);
    ASSERT_TRUE(store->Flush().ok());
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("one", "two"));
}

TEST(EtcdStorePipeline, AFailedCommitFailsTheStoreAndTheOnesAfterItAreNeverAcknowledged) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  const std::string prefix = EtcdStore::JobPrefix("job1");
  const std::string large(2 * EtcdStore::kChunkBytes + 3, 'y');  // written in parts
  {
    // Commit 1 is stored; commit 2 fails while commit 3 is in flight.
    HoldOneCommit hold(2);
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(hold.Options(client), &recovered);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->WaitDurable(store->Append("a", FailUpdate(1, "kept"))).ok());
    store->Append("a", FailUpdate(2, "refused"));
    hold.WaitHeld();
    std::atomic<bool> called{false};
    absl::Notification failed;
    store->OnDurable(store->Append("b", FailUpdate(3, large)), [&](absl::Status s) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
      called = true;
      failed.Notify();
    });
    hold.WaitAnswered(3);  // etcd stored commit 3
    WaitForCommits(*store, 2);
    EXPECT_EQ(store->durable_seq(), 1u);
    EXPECT_FALSE(called.load());
    hold.FailHeld();
    failed.WaitForNotification();
    absl::Status s = store->WaitDurable(3);
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_THAT(s.message(), HasSubstr("injected"));
    EXPECT_EQ(store->status().code(), absl::StatusCode::kInternal);
    EXPECT_EQ(store->durable_seq(), 1u);
    EXPECT_FALSE(store->lost_leadership());
    EXPECT_EQ(CountKeys(*client, prefix + "j/" + absl::BytesToHexString("b") + "/"), 4);
  }
  {
    // Recovery stops at the gap (commit 2) and deletes commit 3, its parts
    // and its mark; sequence numbers continue after the prefix.
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
    ASSERT_NE(store, nullptr);
    ASSERT_EQ(recovered.queues.size(), 1u);
    EXPECT_EQ(recovered.queues[0].name, "a");
    EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("kept"));
    EXPECT_EQ(recovered.last_seq, 1u);
    EXPECT_EQ(CountKeys(*client, prefix + "j/" + absl::BytesToHexString("b") + "/"), 0);
    EXPECT_EQ(CountKeys(*client, prefix + "m/"), 1);
    EXPECT_EQ(store->Append("a", FailUpdate(2, "again")), 2u);
    EXPECT_EQ(store->Append("c", FailUpdate(3, "new")), 3u);
    ASSERT_TRUE(store->Flush().ok());
  }
  // What the second run stored under the same sequence numbers is read
  // back, and nothing of the failed run's commit 3.
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 2u);
  EXPECT_EQ(recovered.queues[0].name, "a");
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("kept", "again"));
  EXPECT_EQ(recovered.queues[1].name, "c");
  EXPECT_EQ(recovered.last_seq, 3u);
}

TEST(EtcdStorePipeline, ACommitStoredButUnansweredIsRecoveredWithTheOnesAfterIt) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  {
    HoldOneCommit hold(1);
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(hold.Options(client), &recovered);
    ASSERT_NE(store, nullptr);
    store->Append("a", FailUpdate(1, "one"));
    hold.WaitHeld();
    store->Append("a", FailUpdate(2, "two"));
    hold.WaitAnswered(2);
    hold.LoseHeldAnswer();
    EXPECT_EQ(store->WaitDurable(2).code(), absl::StatusCode::kInternal);
    EXPECT_EQ(store->durable_seq(), 0u);
  }
  // Never acknowledged, but stored without a gap: recovery may keep both.
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("one", "two"));
  EXPECT_EQ(store->Append("a", FailUpdate(3, "three")), 3u);
}

TEST(EtcdStorePipeline, ADeposedLeaderAcknowledgesNoneOfItsCommitsInFlight) {
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
    HoldOneCommit hold(2);
    EtcdStoreOptions options = hold.Options(client);
    options.guard_key = key;
    options.guard_create_revision = rev;
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(options, &recovered);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->WaitDurable(store->Append("a", FailUpdate(1, "kept"))).ok());
    store->Append("a", FailUpdate(2, "held"));
    hold.WaitHeld();
    store->Append("a", FailUpdate(3, "stored, never acknowledged"));
    hold.WaitAnswered(3);
    WaitForCommits(*store, 2);
    EXPECT_EQ(store->durable_seq(), 1u);
    // Another coordinator wins before commit 2 reaches etcd.
    etcdserverpb::DeleteRangeRequest del;
    del.set_key(key);
    ASSERT_TRUE(client->DeleteRange(del).ok());
    put.set_value("other");
    ASSERT_TRUE(client->Put(put).ok());
    hold.Release();
    absl::Status s = store->WaitDurable(3);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr("not leader"));
    EXPECT_TRUE(store->lost_leadership());
    EXPECT_EQ(store->durable_seq(), 1u);
  }
  {
    // The old leader cannot clean up after its gap either (a lost term is
    // UNAVAILABLE here: whoever opens may stand by and try again).
    EtcdStoreOptions options;
    options.client = client;
    options.job = "job1";
    options.guard_key = key;
    options.guard_create_revision = rev;
    RecoveredState recovered;
    absl::Status s = EtcdStore::Open(options, &recovered).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(s.message(), HasSubstr("not leader"));
  }
  // The new leader recovers up to the gap.
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store =
      OpenStore(client, &recovered, key, client->Get(key)->create_revision());
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("kept"));
}

TEST(EtcdStorePipeline, CommitsHeldByAPausedEtcdAllLandInOrder) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  EtcdClientOptions patient;  // waits for the paused member rather than retrying
  patient.endpoints = cluster.endpoint_list();
  patient.call_timeout = absl::Seconds(120);
  std::shared_ptr<EtcdClient> waiting = *EtcdClient::Create(patient);
  absl::Mutex mu;
  std::vector<uint64_t> sent;  // commits by their first entry, as sent
  int sending = 0;
  int most_sending = 0;
  {
    EtcdStoreOptions options;
    options.client = waiting;
    options.job = "job1";
    options.retry_for = absl::Seconds(60);
    options.commits_in_flight = 3;
    options.max_gather = absl::ZeroDuration();  // a commit per append, at once
    options.txn_hook = [&](const etcdserverpb::TxnRequest& request,
                           const EtcdStoreOptions::SendTxn& send) {
      {
        absl::MutexLock lock(&mu);
        sent.push_back(MarkedFirst(request));
        most_sending = std::max(most_sending, ++sending);
      }
      absl::StatusOr<etcdserverpb::TxnResponse> answer = send(request);
      absl::MutexLock lock(&mu);
      --sending;
      return answer;
    };
    std::vector<int> order;  // durable callbacks, as called
    absl::Mutex order_mu;
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(options, &recovered);
    ASSERT_NE(store, nullptr);
    cluster.Pause(0);
    for (int i = 1; i <= 3; ++i) {
      const uint64_t seq = store->Append("a", FailUpdate(i, absl::StrCat("u", i)));
      store->OnDurable(seq, [&, i](absl::Status s) {
        EXPECT_TRUE(s.ok()) << s;
        absl::MutexLock lock(&order_mu);
        order.push_back(i);
      });
      // Each its own commit: the next append waits until this one is sent.
      absl::MutexLock lock(&mu);
      auto out = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
        return std::find(sent.begin(), sent.end(), seq) != sent.end();
      };
      mu.Await(absl::Condition(&out));
    }
    {
      absl::MutexLock lock(&mu);
      EXPECT_EQ(most_sending, 3);
    }
    EXPECT_EQ(store->durable_seq(), 0u);
    cluster.Resume(0);
    absl::Status flushed = store->Flush();
    ASSERT_TRUE(flushed.ok()) << flushed;
    EXPECT_EQ(store->durable_seq(), 3u);
    absl::MutexLock lock(&order_mu);
    auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(order_mu) { return order.size() == 3; };
    order_mu.Await(absl::Condition(&all));
    EXPECT_THAT(order, ::testing::UnorderedElementsAre(1, 2, 3));
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("u1", "u2", "u3"));
}

TEST(EtcdStorePipeline, ASnapshotWaitsForTheCommitsBeforeItAndHoldsUpTheOnesAfter) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  const std::string prefix = EtcdStore::JobPrefix("job1");
  absl::Mutex mu;
  std::vector<std::string> events;  // "send <first>" / "done <first>", "S" for the snapshot
  absl::Notification held;
  absl::Notification release;
  journal::QueueSnapshot snapshot;
  snapshot.set_next_epoch(5);
  {
    EtcdStoreOptions options;
    options.client = client;
    options.job = "job1";
    options.max_gather = absl::ZeroDuration();  // a commit per append, at once
    options.txn_hook = [&](const etcdserverpb::TxnRequest& request,
                           const EtcdStoreOptions::SendTxn& send) {
      const std::string name =
          IsSnapshotCommit(request) ? "S" : absl::StrCat(MarkedFirst(request));
      if (name == "0") return send(request);  // the snapshot's chunk
      {
        absl::MutexLock lock(&mu);
        events.push_back("send " + name);
      }
      if (name == "1") {
        held.Notify();
        release.WaitForNotification();
      }
      absl::StatusOr<etcdserverpb::TxnResponse> answer = send(request);
      absl::MutexLock lock(&mu);
      events.push_back("done " + name);
      return answer;
    };
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(options, &recovered);
    ASSERT_NE(store, nullptr);
    store->Append("a", FailUpdate(1, "covered"));
    held.WaitForNotification();
    EXPECT_EQ(store->AppendSnapshot("a", 1, snapshot), snapshot.ByteSizeLong());  // seq 2
    // Time for a writer to send the snapshot early, and then update 3, if
    // it would; the order checked below does not depend on it.
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_EQ(store->Append("a", FailUpdate(3, "after")), 3u);
    absl::SleepFor(absl::Milliseconds(300));
    release.Notify();
    absl::Status flushed = store->Flush();
    ASSERT_TRUE(flushed.ok()) << flushed;
    // Commit 1's mark went with the snapshot; update 3 has one when it
    // went in a commit of its own.
    EXPECT_LE(CountKeys(*client, prefix + "m/"), 1);
    EXPECT_EQ(CountKeys(*client, prefix + "b/"), 1);
  }
  {
    absl::MutexLock lock(&mu);
    auto at = [&](const std::string& event) {
      return std::find(events.begin(), events.end(), event) - events.begin();
    };
    ASSERT_LT(at("send S"), static_cast<ptrdiff_t>(events.size())) << absl::StrJoin(events, ", ");
    EXPECT_GT(at("send S"), at("done 1")) << absl::StrJoin(events, ", ");
    if (at("send 3") < static_cast<ptrdiff_t>(events.size())) {  // not in the snapshot's commit
      EXPECT_GT(at("send 3"), at("done S")) << absl::StrJoin(events, ", ");
    }
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  ASSERT_NE(recovered.queues[0].snapshot, nullptr);
  EXPECT_EQ(recovered.queues[0].snapshot->next_epoch(), 5);
  EXPECT_EQ(recovered.queues[0].snapshot_seq, 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("after"));
  EXPECT_EQ(store->Append("a", FailUpdate(4, "next")), 4u);
}

TEST(EtcdStorePipeline, BesideACommitInFlightAnotherGoesWhenMoreThanOneCommitsWorthWaits) {
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  HoldOneCommit hold(1);
  EtcdStoreOptions options = hold.Options(client);
  options.max_gather = EtcdStoreOptions().max_gather;  // the default group commit
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(options, &recovered);
    ASSERT_NE(store, nullptr);
    store->Append("q0", FailUpdate(1, "held"));
    hold.WaitHeld();
    // One put per queue: more queues than one transaction may hold.
    for (int q = 1; q <= 2 * EtcdStore::kMaxCommitOps; ++q) {
      store->Append(absl::StrCat("q", q), FailUpdate(q + 1, "r"));
    }
    hold.WaitAnswered(2);  // a second commit went while the first is held
    hold.Release();
    ASSERT_TRUE(store->Flush().ok());
    EXPECT_EQ(store->durable_seq(), static_cast<uint64_t>(2 * EtcdStore::kMaxCommitOps + 1));
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(recovered.queues.size(), static_cast<size_t>(2 * EtcdStore::kMaxCommitOps + 1));
}

TEST(EtcdStorePipeline, AJournalWithoutCommitMarksIsKeptWholeAndGivenABase) {
  // A job stored before commit marks existed: journal keys only.
  EtcdTestCluster cluster(1);
  START_OR_SKIP(cluster);
  std::shared_ptr<EtcdClient> client = Connect(cluster);
  const std::string prefix = EtcdStore::JobPrefix("job1");
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
    ASSERT_NE(store, nullptr);
    for (int i = 1; i <= 4; ++i) store->Append("a", FailUpdate(i, absl::StrCat("u", i)));
    ASSERT_TRUE(store->Flush().ok());
  }
  etcdserverpb::DeleteRangeRequest marks;
  marks.set_key(prefix + "m/");
  marks.set_range_end(EtcdPrefixEnd(prefix + "m/"));
  ASSERT_TRUE(client->DeleteRange(marks).ok());
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
    ASSERT_NE(store, nullptr);
    ASSERT_EQ(recovered.queues.size(), 1u);
    EXPECT_EQ(recovered.queues[0].updates.size(), 4u);
    EXPECT_EQ(CountKeys(*client, prefix + "b/"), 1);
    EXPECT_EQ(store->Append("a", FailUpdate(5, "u5")), 5u);
    ASSERT_TRUE(store->Flush().ok());
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(client, &recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("u1", "u2", "u3", "u4", "u5"));
}

}  // namespace
}  // namespace shardq
