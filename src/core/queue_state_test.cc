#include "src/core/queue_state.h"

#include <set>

#include "google/protobuf/util/message_differencer.h"

#include "gtest/gtest.h"

namespace shardq {
namespace {

const absl::Time kT0 = absl::UnixEpoch();

QueueConfig Config(int64_t items, int64_t epochs = 1, int64_t num_clients = 1) {
  QueueConfig c;
  c.name = "q";
  for (int64_t i = 0; i < items; ++i) c.items.push_back("item-" + std::to_string(i));
  c.num_epochs = epochs;
  c.seed = 7;
  c.num_clients = num_clients;
  c.lease_timeout = absl::Seconds(10);
  return c;
}

std::unique_ptr<QueueState> MakeState(QueueConfig c) {
  absl::StatusOr<std::unique_ptr<QueueState>> s = QueueState::Create(std::move(c));
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

WorkItem MustTake(QueueState& s, const std::string& worker, absl::Time now) {
  absl::StatusOr<TakeResult> r = s.Take(worker, now);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, TakeOutcome::kItem);
  return r->item;
}

TEST(QueueState, HandsOutEveryItemOncePerEpochThenEnds) {
  auto s = MakeState(Config(5, 2));
  std::multiset<std::pair<int64_t, int64_t>> seen;
  for (int i = 0; i < 10; ++i) {
    WorkItem item = MustTake(*s, "w", kT0);
    seen.insert({item.epoch, item.index});
    ASSERT_EQ(*s->Complete("w", item.lease_id, kT0), CompleteOutcome::kCompleted);
  }
  for (int e = 0; e < 2; ++e)
    for (int i = 0; i < 5; ++i) EXPECT_EQ(seen.count({e, i}), 1u);
  EXPECT_EQ(s->Take("w", kT0)->outcome, TakeOutcome::kEndOfInput);
  EXPECT_TRUE(s->Finished());
}

TEST(QueueState, EpochOrderFollowsTheSeed) {
  auto a = MakeState(Config(20));
  auto b = MakeState(Config(20));
  for (int i = 0; i < 20; ++i) {
    WorkItem x = MustTake(*a, "w", kT0);
    WorkItem y = MustTake(*b, "w", kT0);
    EXPECT_EQ(x.index, y.index);
    a->Complete("w", x.lease_id, kT0).IgnoreError();
    b->Complete("w", y.lease_id, kT0).IgnoreError();
  }
}

TEST(QueueState, ExpiredLeaseReturnsItemToFront) {
  auto s = MakeState(Config(3, 1, 2));
  WorkItem first = MustTake(*s, "dead", kT0);
  // Not yet expired at the deadline minus a bit.
  WorkItem second = MustTake(*s, "live", kT0 + absl::Seconds(9));
  EXPECT_NE(first.index, second.index);
  s->Complete("live", second.lease_id, kT0 + absl::Seconds(9)).IgnoreError();
  // After the lease timeout the dead worker's item is next, before the
  // never-taken third item.
  WorkItem again = MustTake(*s, "live", kT0 + absl::Seconds(10));
  EXPECT_EQ(again.index, first.index);
  EXPECT_EQ(again.epoch, first.epoch);
  EXPECT_NE(again.lease_id, first.lease_id);
  QueueStats stats = s->Stats(kT0 + absl::Seconds(10));
  EXPECT_EQ(stats.expired, 1);
  EXPECT_EQ(stats.workers["dead"].held, 0);
}

TEST(QueueState, HeartbeatKeepsLeaseAlive) {
  auto s = MakeState(Config(2));
  WorkItem item = MustTake(*s, "w", kT0);
  for (int i = 1; i <= 5; ++i) {
    EXPECT_TRUE(s->Heartbeat("w", {item.lease_id}, kT0 + absl::Seconds(8 * i)).lost.empty());
  }
  EXPECT_EQ(s->ExpireLeases(kT0 + absl::Seconds(45)), 0);
  EXPECT_EQ(s->ExpireLeases(kT0 + absl::Seconds(50)), 1);
  EXPECT_EQ(s->Heartbeat("w", {item.lease_id}, kT0 + absl::Seconds(51)).lost,
            std::vector<uint64_t>{item.lease_id});
}

TEST(QueueState, LateCompletionAfterReCompletionIsADuplicate) {
  auto s = MakeState(Config(1));
  WorkItem slow = MustTake(*s, "slow", kT0);
  WorkItem redo = MustTake(*s, "fast", kT0 + absl::Seconds(11));  // after expiry
  EXPECT_EQ(redo.index, slow.index);
  EXPECT_EQ(*s->Complete("fast", redo.lease_id, kT0 + absl::Seconds(12)),
            CompleteOutcome::kCompleted);
  EXPECT_EQ(*s->Complete("slow", slow.lease_id, kT0 + absl::Seconds(13)),
            CompleteOutcome::kDuplicate);
  QueueStats stats = s->Stats(kT0 + absl::Seconds(13));
  EXPECT_EQ(stats.completed, 1);
  EXPECT_EQ(stats.duplicates, 1);
  EXPECT_EQ(stats.workers["slow"].completed, 0);
  EXPECT_TRUE(s->Finished());
}

TEST(QueueState, LateFirstCompletionCountsAndTheRedoBecomesDuplicate) {
  auto s = MakeState(Config(1));
  WorkItem slow = MustTake(*s, "slow", kT0);
  WorkItem redo = MustTake(*s, "fast", kT0 + absl::Seconds(11));
  EXPECT_EQ(*s->Complete("slow", slow.lease_id, kT0 + absl::Seconds(12)),
            CompleteOutcome::kCompleted);
  EXPECT_EQ(*s->Complete("fast", redo.lease_id, kT0 + absl::Seconds(13)),
            CompleteOutcome::kDuplicate);
  QueueStats stats = s->Stats(kT0 + absl::Seconds(13));
  EXPECT_EQ(stats.completed, 1);
  EXPECT_EQ(stats.duplicates, 1);
  EXPECT_EQ(stats.leased, 0);
}

TEST(QueueState, LateCompletionOfAPendingItemRemovesItFromTheQueue) {
  auto s = MakeState(Config(1));
  WorkItem slow = MustTake(*s, "slow", kT0);
  EXPECT_EQ(s->ExpireLeases(kT0 + absl::Seconds(11)), 1);
  EXPECT_EQ(*s->Complete("slow", slow.lease_id, kT0 + absl::Seconds(12)),
            CompleteOutcome::kCompleted);
  EXPECT_EQ(s->Take("other", kT0 + absl::Seconds(12))->outcome,
            TakeOutcome::kEndOfInput);
}

TEST(QueueState, EndOfInputWaitsForOutstandingLeases) {
  auto s = MakeState(Config(2, 1, 2));
  WorkItem a = MustTake(*s, "w1", kT0);
  WorkItem b = MustTake(*s, "w2", kT0);
  s->Complete("w1", a.lease_id, kT0).IgnoreError();
  // Everything is handed out but b is not completed: wait, not end.
  EXPECT_EQ(s->Take("w1", kT0)->outcome, TakeOutcome::kWait);
  EXPECT_EQ(s->NextDeadline(), kT0 + absl::Seconds(10));
  // w2 dies: after expiry the item comes back and w1 redoes it.
  WorkItem redo = MustTake(*s, "w1", kT0 + absl::Seconds(10));
  EXPECT_EQ(redo.index, b.index);
  EXPECT_EQ(s->Take("w1", kT0 + absl::Seconds(10))->outcome, TakeOutcome::kWait);
  s->Complete("w1", redo.lease_id, kT0 + absl::Seconds(11)).IgnoreError();
  EXPECT_EQ(s->Take("w1", kT0 + absl::Seconds(11))->outcome, TakeOutcome::kEndOfInput);
}

TEST(QueueState, NextEpochFlowsWhileStragglersFinishTheLast) {
  auto s = MakeState(Config(2, 2, 2));
  WorkItem a = MustTake(*s, "slow", kT0);
  WorkItem b = MustTake(*s, "fast", kT0);
  s->Complete("fast", b.lease_id, kT0).IgnoreError();
  WorkItem c = MustTake(*s, "fast", kT0);
  EXPECT_EQ(c.epoch, 1);
  QueueStats stats = s->Stats(kT0);
  EXPECT_EQ(stats.epochs[0].leased, 1);
  EXPECT_EQ(stats.epochs[1].leased, 1);
  EXPECT_EQ(stats.epochs[1].pending, 1);
  (void)a;
}

TEST(QueueState, WorkerLimitIsNumClients) {
  auto s = MakeState(Config(5, 1, 2));
  MustTake(*s, "w", kT0);
  MustTake(*s, "w", kT0);
  absl::StatusOr<TakeResult> third = s->Take("w", kT0);
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(third.status().message().find("num_clients=2"), std::string::npos);
  MustTake(*s, "other", kT0);
}

TEST(QueueState, ItemsKeptReadyAreHeldBeyondNumClients) {
  auto s = MakeState(Config(200, 1, 2));
  // A worker that keeps 3 ready may hold 2 + 3.
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<TakeResult> r = s->Take("w", kT0, /*ahead=*/3);
    ASSERT_TRUE(r.ok() && r->outcome == TakeOutcome::kItem) << i;
  }
  absl::StatusOr<TakeResult> sixth = s->Take("w", kT0, 3);
  EXPECT_EQ(sixth.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(sixth.status().message().find("num_clients=2 + 3 kept ready"), std::string::npos)
      << sixth.status();
  // Without an allowance the limit is num_clients again.
  EXPECT_FALSE(s->Take("w", kT0).ok());
  // A huge allowance counts as kMaxTakeAhead, a negative one as none.
  for (int64_t i = 0; i < 2 + kMaxTakeAhead; ++i) {
    ASSERT_TRUE(s->Take("greedy", kT0, int64_t{1} << 40).ok()) << i;
  }
  EXPECT_FALSE(s->Take("greedy", kT0, int64_t{1} << 40).ok());
  MustTake(*s, "n", kT0);
  MustTake(*s, "n", kT0);
  EXPECT_FALSE(s->Take("n", kT0, -5).ok());
}

TEST(QueueState, ReleasePutsItemBackAtTheFront) {
  auto s = MakeState(Config(4));
  WorkItem a = MustTake(*s, "w", kT0);
  ASSERT_TRUE(s->Release("w", a.lease_id, kT0).ok());
  WorkItem again = MustTake(*s, "w", kT0);
  EXPECT_EQ(again.index, a.index);
  EXPECT_EQ(s->Stats(kT0).released, 1);
}

TEST(QueueState, BogusRequestsGetSpecificErrorsAndChangeNothing) {
  auto s = MakeState(Config(3));
  WorkItem a = MustTake(*s, "w", kT0);
  QueueStats before = s->Stats(kT0);
  EXPECT_EQ(s->Complete("w", 12345, kT0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->Complete("w", 0, kT0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->Complete("intruder", a.lease_id, kT0).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s->Release("intruder", a.lease_id, kT0).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s->Release("w", 999999999, kT0).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->Take("", kT0).status().code(), absl::StatusCode::kInvalidArgument);
  QueueStats after = s->Stats(kT0);
  EXPECT_EQ(after.leased, before.leased);
  EXPECT_EQ(after.completed, 0);
  // The holder completing twice (a lost answer, retried): "already
  // completed", but no duplicate counted (nothing ran twice).
  EXPECT_EQ(*s->Complete("w", a.lease_id, kT0), CompleteOutcome::kCompleted);
  EXPECT_EQ(*s->Complete("w", a.lease_id, kT0), CompleteOutcome::kDuplicate);
  after = s->Stats(kT0);
  EXPECT_EQ(after.completed, 1);
  EXPECT_EQ(after.duplicates, 0);
}

TEST(QueueState, ReplayFollowsTheLeaseIdsSkippedAtRecovery) {
  // A state recovered once skipped lease ids; a replay of the journal it
  // wrote since must land on the same sequence, not count grants from zero.
  const QueueConfig config = Config(6);
  const journal::Update creation = QueueState::CreationUpdate(config, kT0);
  std::vector<journal::Update> journaled;
  auto live = *QueueState::FromCreation(creation);
  live->set_update_sink([&](const journal::Update& u) { journaled.push_back(u); });
  const WorkItem first = MustTake(*live, "w", kT0);
  live->SkipLeaseIdsAfterRecovery();
  const WorkItem second = MustTake(*live, "w2", kT0);
  constexpr uint64_t kSequenceMask = (uint64_t{1} << 20) - 1;
  EXPECT_EQ(second.lease_id & kSequenceMask,
            (first.lease_id & kSequenceMask) + QueueState::kLeaseIdsSkippedAtRecovery + 1);

  auto replayed = *QueueState::FromCreation(creation);
  for (const journal::Update& u : journaled) ASSERT_TRUE(replayed->Apply(u).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(live->ToSnapshot(),
                                                                 replayed->ToSnapshot()));
  EXPECT_EQ(MustTake(*live, "w3", kT0).lease_id, MustTake(*replayed, "w3", kT0).lease_id);
}

TEST(QueueState, BadConfigNamesTheField) {
  QueueConfig c = Config(3);
  c.num_epochs = 0;
  absl::Status s = QueueState::Create(c).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_epochs"), std::string::npos);
  c = Config(0);
  EXPECT_NE(QueueState::Create(c).status().message().find("no items"), std::string::npos);
  c = Config(3);
  c.num_clients = 0;
  EXPECT_NE(QueueState::Create(c).status().message().find("num_clients"), std::string::npos);
  c = Config(3);
  c.name = std::string(1000, 'x');
  EXPECT_NE(QueueState::Create(c).status().message().find("name"), std::string::npos);
}

TEST(ConfigDifferences, ListsEveryDifferingField) {
  QueueConfig a = Config(3, 2);
  QueueConfig b = Config(4, 3);
  b.seed = 8;
  b.shuffle = false;
  std::vector<std::string> d = ConfigDifferences(a, b);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_NE(d[0].find("items"), std::string::npos);
  EXPECT_NE(d[1].find("num_epochs"), std::string::npos);
  EXPECT_NE(d[2].find("shuffle"), std::string::npos);
  EXPECT_NE(d[3].find("seed"), std::string::npos);
  b = Config(3, 2);
  b.seed.reset();  // an attaching client without a seed accepts any
  EXPECT_TRUE(ConfigDifferences(a, b).empty());
}

}  // namespace
}  // namespace shardq
