// EtcdStore with several commits in flight (etcd_store.h, "Pipelining"):
// acknowledgements in order, a failed or unanswered commit, a deposed
// leader, a paused etcd, snapshots between commits, old journals.
#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/etcd_store.h"
#include "src/store/etcd_store_test_util.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

class EtcdStorePipeline : public EtcdStoreTest {};

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
    EtcdStoreOptions options = JobOptions(std::move(client));
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

std::vector<std::string> Reasons(const RecoveredState::Queue& q) {
  std::vector<std::string> reasons;
  for (const journal::Update& u : q.updates) reasons.push_back(u.fail().reason());
  return reasons;
}

TEST_F(EtcdStorePipeline, ACommitAnsweredBeforeAnEarlierOneWaitsForIt) {
  HoldOneCommit hold(1);
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(hold.Options(client_), &recovered);
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
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("one", "two"));
}

TEST_F(EtcdStorePipeline, AFailedCommitFailsTheStoreAndTheOnesAfterItAreNeverAcknowledged) {
  const std::string large(2 * EtcdStore::kChunkBytes + 3, 'y');  // written in parts
  {
    // Commit 1 is stored; commit 2 fails while commit 3 is in flight.
    HoldOneCommit hold(2);
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(hold.Options(client_), &recovered);
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
    EXPECT_EQ(Keys(JournalOf("b")), 4);
  }
  {
    // Recovery stops at the gap (commit 2) and deletes commit 3, its parts
    // and its mark; sequence numbers continue after the prefix.
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
    ASSERT_NE(store, nullptr);
    ASSERT_EQ(recovered.queues.size(), 1u);
    EXPECT_EQ(recovered.queues[0].name, "a");
    EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("kept"));
    EXPECT_EQ(recovered.last_seq, 1u);
    EXPECT_EQ(Keys(JournalOf("b")), 0);
    EXPECT_EQ(Keys("m/"), 1);
    EXPECT_EQ(store->Append("a", FailUpdate(2, "again")), 2u);
    EXPECT_EQ(store->Append("c", FailUpdate(3, "new")), 3u);
    ASSERT_TRUE(store->Flush().ok());
  }
  // What the second run stored under the same sequence numbers is read
  // back, and nothing of the failed run's commit 3.
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 2u);
  EXPECT_EQ(recovered.queues[0].name, "a");
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("kept", "again"));
  EXPECT_EQ(recovered.queues[1].name, "c");
  EXPECT_EQ(recovered.last_seq, 3u);
}

TEST_F(EtcdStorePipeline, ACommitStoredButUnansweredIsRecoveredWithTheOnesAfterIt) {
  {
    HoldOneCommit hold(1);
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenWith(hold.Options(client_), &recovered);
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
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("one", "two"));
  EXPECT_EQ(store->Append("a", FailUpdate(3, "three")), 3u);
}

TEST_F(EtcdStorePipeline, ADeposedLeaderAcknowledgesNoneOfItsCommitsInFlight) {
  const std::string& key = leader_key_;
  int64_t rev = 0;
  ASSERT_NO_FATAL_FAILURE(BecomeLeader(&rev));
  {
    HoldOneCommit hold(2);
    EtcdStoreOptions options = hold.Options(client_);
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
    ASSERT_NO_FATAL_FAILURE(AnotherLeaderWins());
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
    EtcdStoreOptions options = JobOptions(client_);
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
      OpenStore(&recovered, key, client_->Get(key)->create_revision());
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("kept"));
}

TEST_F(EtcdStorePipeline, CommitsHeldByAPausedEtcdAllLandInOrder) {
  EtcdClientOptions patient;  // waits for the paused member rather than retrying
  patient.endpoints = cluster_.endpoint_list();
  patient.call_timeout = absl::Seconds(120);
  std::shared_ptr<EtcdClient> waiting = *EtcdClient::Create(patient);
  absl::Mutex mu;
  std::vector<uint64_t> sent;  // commits by their first entry, as sent
  int sending = 0;
  int most_sending = 0;
  {
    EtcdStoreOptions options = JobOptions(waiting);
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
    cluster_.Pause(0);
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
    cluster_.Resume(0);
    absl::Status flushed = store->Flush();
    ASSERT_TRUE(flushed.ok()) << flushed;
    EXPECT_EQ(store->durable_seq(), 3u);
    absl::MutexLock lock(&order_mu);
    auto all = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(order_mu) { return order.size() == 3; };
    order_mu.Await(absl::Condition(&all));
    EXPECT_THAT(order, ::testing::UnorderedElementsAre(1, 2, 3));
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("u1", "u2", "u3"));
}

TEST_F(EtcdStorePipeline, ASnapshotWaitsForTheCommitsBeforeItAndHoldsUpTheOnesAfter) {
  absl::Mutex mu;
  std::vector<std::string> events;  // "send <first>" / "done <first>", "S" for the snapshot
  absl::Notification held;
  absl::Notification release;
  journal::QueueSnapshot snapshot;
  snapshot.set_next_epoch(5);
  {
    EtcdStoreOptions options = JobOptions(client_);
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
    EXPECT_LE(Keys("m/"), 1);
    EXPECT_EQ(Keys("b/"), 1);
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
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  ASSERT_NE(recovered.queues[0].snapshot, nullptr);
  EXPECT_EQ(recovered.queues[0].snapshot->next_epoch(), 5);
  EXPECT_EQ(recovered.queues[0].snapshot_seq, 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("after"));
  EXPECT_EQ(store->Append("a", FailUpdate(4, "next")), 4u);
}

TEST_F(EtcdStorePipeline, BesideACommitInFlightAnotherGoesWhenMoreThanOneCommitsWorthWaits) {
  HoldOneCommit hold(1);
  EtcdStoreOptions options = hold.Options(client_);
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
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(recovered.queues.size(), static_cast<size_t>(2 * EtcdStore::kMaxCommitOps + 1));
}

TEST_F(EtcdStorePipeline, AJournalWithoutCommitMarksIsKeptWholeAndGivenABase) {
  // A job stored before commit marks existed: journal keys only.
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
    ASSERT_NE(store, nullptr);
    for (int i = 1; i <= 4; ++i) store->Append("a", FailUpdate(i, absl::StrCat("u", i)));
    ASSERT_TRUE(store->Flush().ok());
  }
  etcdserverpb::DeleteRangeRequest marks;
  marks.set_key(prefix_ + "m/");
  marks.set_range_end(EtcdPrefixEnd(prefix_ + "m/"));
  ASSERT_TRUE(client_->DeleteRange(marks).ok());
  {
    RecoveredState recovered;
    std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
    ASSERT_NE(store, nullptr);
    ASSERT_EQ(recovered.queues.size(), 1u);
    EXPECT_EQ(recovered.queues[0].updates.size(), 4u);
    EXPECT_EQ(Keys("b/"), 1);
    EXPECT_EQ(store->Append("a", FailUpdate(5, "u5")), 5u);
    ASSERT_TRUE(store->Flush().ok());
  }
  RecoveredState recovered;
  std::unique_ptr<EtcdStore> store = OpenStore(&recovered);
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_THAT(Reasons(recovered.queues[0]), ::testing::ElementsAre("u1", "u2", "u3", "u4", "u5"));
}

}  // namespace
}  // namespace shardq
