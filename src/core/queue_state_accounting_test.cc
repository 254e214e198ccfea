// Accounting rules of QueueState that must hold through journal replay and
// snapshots: who may complete a lease (issue 15 item 7), failed attempts
// and failed items (item 13), and state bounded in num_epochs (item 11).
#include <memory>
#include <string>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace {

const absl::Time kT0 = absl::UnixEpoch();
constexpr uint64_t kSequenceMask = (uint64_t{1} << 20) - 1;

QueueConfig Config(int64_t items, int64_t epochs = 1, int64_t num_clients = 1) {
  QueueConfig c;
  c.name = "acct";
  for (int64_t i = 0; i < items; ++i) c.items.push_back("item-" + std::to_string(i));
  c.num_epochs = epochs;
  c.seed = 11;
  c.shuffle = false;
  c.num_clients = num_clients;
  c.lease_timeout = absl::Seconds(10);
  return c;
}

// A live state whose every update is recorded, so a test can replay it.
struct Journaled {
  explicit Journaled(const QueueConfig& config)
      : creation(QueueState::CreationUpdate(config, kT0)),
        live(*QueueState::FromCreation(creation)) {
    live->set_update_sink([this](const journal::Update& u) { updates.push_back(u); });
  }
  // The live state's snapshot equals that of a replay of its journal, and
  // that of a state rebuilt from its own snapshot.
  void ExpectReplayAndSnapshotAgree() {
    auto replayed = *QueueState::FromCreation(creation);
    for (const journal::Update& u : updates) ASSERT_TRUE(replayed->Apply(u).ok());
    const journal::QueueSnapshot snapshot = live->ToSnapshot();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(snapshot,
                                                                   replayed->ToSnapshot()));
    absl::StatusOr<std::unique_ptr<QueueState>> rebuilt = QueueState::FromSnapshot(snapshot, kT0);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(snapshot,
                                                                   (*rebuilt)->ToSnapshot()));
  }
  journal::Update creation;
  std::unique_ptr<QueueState> live;
  std::vector<journal::Update> updates;
};

WorkItem MustTake(QueueState& s, const std::string& worker, absl::Time now) {
  absl::StatusOr<TakeResult> r = s.Take(worker, now);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, TakeOutcome::kItem);
  return r->item;
}

// ---- Issue 20: records reported with completions -------------------------------

TEST(Accounting, RecordsOfJournaledCompletionsAreSummedPerQueueAndWorkerAndSurviveReplay) {
  Journaled j(Config(3));
  QueueState& s = *j.live;
  const WorkItem a = MustTake(s, "w1", kT0);
  ASSERT_EQ(*s.Complete("w1", a.lease_id, kT0, 40), CompleteOutcome::kCompleted);
  // The holder repeating its completion changes nothing, records included.
  ASSERT_EQ(*s.Complete("w1", a.lease_id, kT0, 40), CompleteOutcome::kDuplicate);
  const WorkItem b = MustTake(s, "w2", kT0);
  ASSERT_EQ(*s.Complete("w2", b.lease_id, kT0, 2), CompleteOutcome::kCompleted);
  const WorkItem c = MustTake(s, "w2", kT0);
  ASSERT_EQ(*s.Complete("w2", c.lease_id, kT0), CompleteOutcome::kCompleted);  // not counted
  QueueStats stats = s.Stats(kT0);
  EXPECT_EQ(stats.records, 42);
  EXPECT_EQ(stats.workers.at("w1").records, 40);
  EXPECT_EQ(stats.workers.at("w2").records, 2);
  j.ExpectReplayAndSnapshotAgree();
  absl::StatusOr<std::unique_ptr<QueueState>> rebuilt =
      QueueState::FromSnapshot(s.ToSnapshot(), kT0);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_EQ((*rebuilt)->Stats(kT0).records, 42);
  EXPECT_EQ((*rebuilt)->Stats(kT0).workers.at("w1").records, 40);
}

TEST(Accounting, ARecordCountOutOfRangeIsInvalidArgumentAndCompletesNothing) {
  Journaled j(Config(1));
  QueueState& s = *j.live;
  const WorkItem a = MustTake(s, "w", kT0);
  for (int64_t bad : {int64_t{-1}, QueueState::kMaxRecordsPerItem + 1}) {
    absl::StatusOr<CompleteOutcome> r = s.Complete("w", a.lease_id, kT0, bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("records"), absl::string_view::npos) << r.status();
  }
  EXPECT_EQ(s.Stats(kT0).completed, 0);
  EXPECT_EQ(*s.Complete("w", a.lease_id, kT0, QueueState::kMaxRecordsPerItem),
            CompleteOutcome::kCompleted);
}

// ---- Item 7: only real re-runs are duplicates --------------------------------

TEST(Accounting, ACompletionOfALeaseNeverHandedOutIsNotFoundNotADuplicate) {
  Journaled j(Config(2));
  QueueState& s = *j.live;
  const WorkItem a = MustTake(s, "w", kT0);
  ASSERT_EQ(*s.Complete("w", a.lease_id, kT0), CompleteOutcome::kCompleted);
  // Same item (slot), another sequence: a lease id this queue never issued.
  const uint64_t forged = (a.lease_id & ~kSequenceMask) | ((a.lease_id + 77) & kSequenceMask);
  absl::StatusOr<CompleteOutcome> bogus = s.Complete("w", forged, kT0);
  ASSERT_EQ(bogus.status().code(), absl::StatusCode::kNotFound) << bogus.status();
  EXPECT_NE(bogus.status().message().find("acct"), std::string::npos);
  EXPECT_NE(bogus.status().message().find(std::to_string(forged)), std::string::npos);
  EXPECT_NE(bogus.status().message().find("'w'"), std::string::npos);
  const QueueStats stats = s.Stats(kT0);
  EXPECT_EQ(stats.duplicates, 0);
  EXPECT_EQ(stats.completed, 1);
  j.ExpectReplayAndSnapshotAgree();
}

TEST(Accounting, AnotherWorkersCompletedLeaseIsPermissionDenied) {
  Journaled j(Config(2));
  QueueState& s = *j.live;
  const WorkItem a = MustTake(s, "w1", kT0);
  ASSERT_EQ(*s.Complete("w1", a.lease_id, kT0), CompleteOutcome::kCompleted);
  absl::StatusOr<CompleteOutcome> other = s.Complete("w2", a.lease_id, kT0);
  ASSERT_EQ(other.status().code(), absl::StatusCode::kPermissionDenied) << other.status();
  for (const std::string& word : {std::string("acct"), std::to_string(a.lease_id),
                                  std::string("'w1'"), std::string("'w2'")}) {
    EXPECT_NE(other.status().message().find(word), std::string::npos) << word;
  }
  EXPECT_EQ(s.Stats(kT0).duplicates, 0);
  j.ExpectReplayAndSnapshotAgree();
}

TEST(Accounting, TheHolderRetryingItsCompletionIsAnsweredAndNothingIsJournaledOrCounted) {
  Journaled j(Config(1));
  QueueState& s = *j.live;
  const WorkItem a = MustTake(s, "w", kT0);
  ASSERT_EQ(*s.Complete("w", a.lease_id, kT0), CompleteOutcome::kCompleted);
  const size_t journaled = j.updates.size();
  // "Already completed, nothing changed": not refused, not counted.
  EXPECT_EQ(*s.Complete("w", a.lease_id, kT0 + absl::Seconds(1)), CompleteOutcome::kDuplicate);
  EXPECT_EQ(j.updates.size(), journaled);
  EXPECT_EQ(s.Stats(kT0).duplicates, 0);
  // Still so after a recovery from the snapshot.
  auto rebuilt = *QueueState::FromSnapshot(s.ToSnapshot(), kT0);
  EXPECT_EQ(*rebuilt->Complete("w", a.lease_id, kT0), CompleteOutcome::kDuplicate);
  EXPECT_EQ(rebuilt->Stats(kT0).duplicates, 0);
  EXPECT_EQ(rebuilt->Complete("x", a.lease_id, kT0).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(Accounting, LateCompletionsOfExpiredAndReleasedLeasesAreRealDuplicates) {
  Journaled j(Config(2, 1, 2));
  QueueState& s = *j.live;
  const WorkItem slow = MustTake(s, "slow", kT0);
  const WorkItem quitter = MustTake(s, "quitter", kT0);
  ASSERT_TRUE(s.Release("quitter", quitter.lease_id, kT0).ok());
  const WorkItem redo1 = MustTake(s, "fast", kT0 + absl::Seconds(11));  // slow expired
  const WorkItem redo2 = MustTake(s, "fast", kT0 + absl::Seconds(11));
  ASSERT_EQ(*s.Complete("fast", redo1.lease_id, kT0 + absl::Seconds(12)),
            CompleteOutcome::kCompleted);
  ASSERT_EQ(*s.Complete("fast", redo2.lease_id, kT0 + absl::Seconds(12)),
            CompleteOutcome::kCompleted);
  EXPECT_EQ(*s.Complete("slow", slow.lease_id, kT0 + absl::Seconds(13)),
            CompleteOutcome::kDuplicate);
  EXPECT_EQ(*s.Complete("quitter", quitter.lease_id, kT0 + absl::Seconds(13)),
            CompleteOutcome::kDuplicate);
  // Their retries are answered alike, and not counted again.
  EXPECT_EQ(*s.Complete("slow", slow.lease_id, kT0 + absl::Seconds(14)),
            CompleteOutcome::kDuplicate);
  const QueueStats stats = s.Stats(kT0 + absl::Seconds(14));
  EXPECT_EQ(stats.duplicates, 2);
  EXPECT_EQ(stats.taken, 4);
  EXPECT_EQ(stats.completed, 2);
  j.ExpectReplayAndSnapshotAgree();
}

TEST(Accounting, AnItemCompletedLateWhileAnotherHoldsItCountsCompletedNotLeased) {
  // Found by fuzz/queue_snapshot_fuzzer.cc: the epoch counted the second
  // holder's lease as leased and the item as completed, so pending went
  // to -1 once every other item was done.
  Journaled j(Config(3, 1, 2));
  QueueState& s = *j.live;
  const WorkItem slow = MustTake(s, "slow", kT0);
  const WorkItem redo = MustTake(s, "fast", kT0 + absl::Seconds(11));  // slow's, expired
  ASSERT_EQ(redo.item, slow.item);
  ASSERT_EQ(*s.Complete("slow", slow.lease_id, kT0 + absl::Seconds(12)),
            CompleteOutcome::kCompleted);  // late, but first
  auto expect = [&](int64_t pending, int64_t leased, int64_t completed) {
    const QueueStats st = s.Stats(kT0 + absl::Seconds(12));
    EXPECT_EQ(st.pending, pending);
    EXPECT_EQ(st.leased, leased);
    EXPECT_EQ(st.completed, completed);
    ASSERT_EQ(st.epochs.size(), 1u);
    EXPECT_EQ(st.epochs[0].pending, pending);
    EXPECT_EQ(st.epochs[0].leased, leased);
    EXPECT_EQ(st.epochs[0].completed, completed);
  };
  expect(2, 0, 1);  // fast still holds the completed item
  for (int i = 0; i < 2; ++i) {
    const WorkItem next = MustTake(s, "other", kT0 + absl::Seconds(12));
    ASSERT_EQ(*s.Complete("other", next.lease_id, kT0 + absl::Seconds(12)),
              CompleteOutcome::kCompleted);
  }
  expect(0, 0, 3);  // was pending -1, leased 1
  EXPECT_TRUE(s.Stats(kT0 + absl::Seconds(12)).finished);
  // Recovered from a snapshot while fast still holds it: the same.
  auto rebuilt = *QueueState::FromSnapshot(s.ToSnapshot(), kT0 + absl::Seconds(12));
  EXPECT_EQ(rebuilt->Stats(kT0 + absl::Seconds(12)).pending, 0);
  EXPECT_EQ(rebuilt->Stats(kT0 + absl::Seconds(12)).leased, 0);
  EXPECT_EQ(*s.Complete("fast", redo.lease_id, kT0 + absl::Seconds(13)),
            CompleteOutcome::kDuplicate);
  expect(0, 0, 3);
  j.ExpectReplayAndSnapshotAgree();
}

TEST(Accounting, ASnapshotWithItemsOfAnEpochNotBegunOrARepeatedLeaseIsDataLoss) {
  // Each would hand an item out twice: once from the snapshot, once when
  // its epoch begins (or from both lease records).
  auto s = *QueueState::Create(Config(3, 2, 2));
  const WorkItem held = MustTake(*s, "w", kT0);
  const journal::QueueSnapshot good = s->ToSnapshot();
  ASSERT_EQ(good.next_epoch(), 1);
  ASSERT_TRUE(QueueState::FromSnapshot(good, kT0).ok());

  journal::QueueSnapshot pending = good;
  pending.add_pending_slots(4);  // epoch 1, item 1
  journal::QueueSnapshot leased = good;
  leased.mutable_leases(0)->mutable_ref()->set_epoch(1);
  for (const journal::QueueSnapshot* bad : {&pending, &leased}) {
    absl::Status st = QueueState::FromSnapshot(*bad, kT0).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_NE(st.message().find("epoch not begun"), std::string::npos) << st;
  }
  journal::QueueSnapshot repeated = good;
  *repeated.add_leases() = good.leases(0);
  absl::Status st = QueueState::FromSnapshot(repeated, kT0).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find(absl::StrCat("lease ", held.lease_id, " is repeated")),
            std::string::npos)
      << st;
}

TEST(Accounting, AWorkerHoldsWhatItsLeasesSayWhateverItsSnapshotRecordSays) {
  auto s = *QueueState::Create(Config(6, 1, 2));
  MustTake(*s, "w", kT0);
  journal::QueueSnapshot snapshot = s->ToSnapshot();
  ASSERT_EQ(snapshot.workers_size(), 1);
  snapshot.mutable_workers(0)->set_held(40);  // would refuse every take
  auto rebuilt = *QueueState::FromSnapshot(snapshot, kT0);
  EXPECT_EQ(rebuilt->Stats(kT0).workers.at("w").held, 1);
  MustTake(*rebuilt, "w", kT0);  // its second of num_clients = 2
  EXPECT_EQ(rebuilt->Take("w", kT0).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Accounting, RecordsOfIdleWorkersAreBoundedAndHoldersAreKept) {
  // Workers under new names, one item each (as shardq.torch names its
  // DataLoader workers per pass), while one worker holds an item all along.
  const int64_t n = static_cast<int64_t>(QueueState::kWorkersKept) + 1000;
  Journaled j(Config(n + 1, 1, 1));
  QueueState& s = *j.live;
  MustTake(s, "holder", kT0);
  for (int64_t i = 0; i < n; ++i) {
    const std::string worker = "pass" + std::to_string(i);
    const absl::Time now = kT0 + absl::Microseconds(i + 1);
    const WorkItem item = MustTake(s, worker, now);
    ASSERT_TRUE(s.Complete(worker, item.lease_id, now).ok());
  }
  const QueueStats stats = s.Stats(kT0 + absl::Seconds(1));
  EXPECT_LE(stats.workers.size(), QueueState::kWorkersKept);
  EXPECT_EQ(stats.workers.count("pass0"), 0u);  // the longest idle went first
  EXPECT_EQ(stats.workers.at("pass" + std::to_string(n - 1)).completed, 1);
  EXPECT_EQ(stats.workers.at("holder").held, 1);  // never dropped while it holds
  EXPECT_EQ(stats.completed, n);
  EXPECT_EQ(stats.taken, n + 1);
  EXPECT_EQ(s.ToSnapshot().workers_size(), static_cast<int>(stats.workers.size()));
  j.ExpectReplayAndSnapshotAgree();
}

TEST(Accounting, WorkersHoldingItemsKeepTheirRecordsPastTheBound) {
  const int64_t n = static_cast<int64_t>(QueueState::kWorkersKept) + 10;
  auto s = *QueueState::Create(Config(n, 1, 1));
  for (int64_t i = 0; i < n; ++i) MustTake(*s, "holder" + std::to_string(i), kT0);
  const QueueStats stats = s->Stats(kT0);
  EXPECT_EQ(static_cast<int64_t>(stats.workers.size()), n);
  EXPECT_EQ(stats.workers.at("holder0").held, 1);
  EXPECT_EQ(stats.leased, n);
}

TEST(Accounting, EndedLeasesAreRememberedUpToTheBound) {
  QueueConfig c = Config(1, 1);
  auto s = *QueueState::Create(c);
  const WorkItem first = MustTake(*s, "w", kT0);
  ASSERT_TRUE(s->Release("w", first.lease_id, kT0).ok());
  for (size_t i = 0; i < QueueState::kEndedLeasesKept; ++i) {
    const WorkItem again = MustTake(*s, "w", kT0);
    ASSERT_TRUE(s->Release("w", again.lease_id, kT0).ok());
  }
  // The oldest record is gone: refused, not guessed.
  EXPECT_EQ(s->Complete("w", first.lease_id, kT0).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_LE(s->ToSnapshot().expired_size(), static_cast<int>(QueueState::kEndedLeasesKept));
}

// ---- Item 13: failed attempts and failed items -------------------------------

TEST(Accounting, AFailedAttemptGoesToTheBackAndTheLastOneSetsTheItemAside) {
  QueueConfig c = Config(3);
  c.max_attempts = 2;
  Journaled j(c);
  QueueState& s = *j.live;
  const WorkItem poison = MustTake(s, "w", kT0);
  ASSERT_EQ(poison.index, 0);
  ASSERT_EQ(*s.Fail("w", poison.lease_id, "exit 1", kT0), false);
  // Not the front: the others come first.
  const WorkItem b = MustTake(s, "w", kT0);
  EXPECT_EQ(b.index, 1);
  ASSERT_TRUE(s.Complete("w", b.lease_id, kT0).ok());
  const WorkItem c2 = MustTake(s, "w", kT0);
  EXPECT_EQ(c2.index, 2);
  ASSERT_TRUE(s.Complete("w", c2.lease_id, kT0).ok());
  const WorkItem retry = MustTake(s, "w", kT0);
  EXPECT_EQ(retry.index, 0);
  EXPECT_EQ(*s.Fail("w", retry.lease_id, "exit 2", kT0), true);
  // Set aside: not handed out again; the queue finishes with it failed.
  EXPECT_EQ(s.Take("w", kT0)->outcome, TakeOutcome::kEndOfInput);
  const QueueStats stats = s.Stats(kT0);
  EXPECT_TRUE(stats.finished);
  EXPECT_EQ(stats.failed, 1);
  EXPECT_EQ(stats.completed, 2);
  EXPECT_EQ(stats.pending, 0);
  ASSERT_EQ(stats.failed_items.size(), 1u);
  EXPECT_EQ(stats.failed_items[0].item, "item-0");
  EXPECT_EQ(stats.failed_items[0].epoch, 0);
  EXPECT_EQ(stats.failed_items[0].attempts, 2);
  EXPECT_EQ(stats.failed_items[0].reason, "exit 2");
  ASSERT_EQ(stats.epochs.size(), 1u);
  EXPECT_EQ(stats.epochs[0].failed, 1);
  j.ExpectReplayAndSnapshotAgree();
}

TEST(Accounting, FailIsRefusedForLeasesTheWorkerDoesNotHold) {
  auto s = *QueueState::Create(Config(2));
  const WorkItem a = MustTake(*s, "w", kT0);
  EXPECT_EQ(s->Fail("x", a.lease_id, "", kT0).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s->Fail("w", a.lease_id + 1, "", kT0).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(s->Fail("w", a.lease_id, std::string(5000, 'r'), kT0).ok());
  EXPECT_EQ(s->Fail("w", a.lease_id, "", kT0).status().code(), absl::StatusCode::kNotFound);
}

TEST(Accounting, FailuresSurviveSnapshotAndReplayMidway) {
  QueueConfig c = Config(4, 2, 2);
  c.max_attempts = 3;
  Journaled j(c);
  QueueState& s = *j.live;
  WorkItem x = MustTake(s, "w", kT0);
  ASSERT_FALSE(*s.Fail("w", x.lease_id, "once", kT0));
  j.ExpectReplayAndSnapshotAgree();  // one attempt recorded, item pending again
  // Fail item 0 until it is set aside, completing everything else.
  int64_t set_aside = 0;
  while (true) {
    absl::StatusOr<TakeResult> r = s.Take("w", kT0);
    ASSERT_TRUE(r.ok());
    if (r->outcome == TakeOutcome::kEndOfInput) break;
    ASSERT_EQ(r->outcome, TakeOutcome::kItem);
    if (r->item.index == 0) {
      set_aside += *s.Fail("w", r->item.lease_id, "again", kT0) ? 1 : 0;
    } else {
      ASSERT_TRUE(s.Complete("w", r->item.lease_id, kT0).ok());
    }
  }
  EXPECT_EQ(set_aside, 2);  // item 0 of both epochs
  const QueueStats stats = s.Stats(kT0);
  EXPECT_EQ(stats.failed, 2);
  EXPECT_EQ(stats.completed, 6);
  EXPECT_EQ(stats.epochs_done, 2);
  j.ExpectReplayAndSnapshotAgree();
  auto rebuilt = *QueueState::FromSnapshot(s.ToSnapshot(), kT0);
  EXPECT_TRUE(rebuilt->Finished());
  EXPECT_EQ(rebuilt->Stats(kT0).failed, 2);
  EXPECT_EQ(rebuilt->Stats(kT0).completed, 6);
}

// ---- Item 11: nothing grows with num_epochs ----------------------------------

TEST(Accounting, AHundredMillionEpochsKeepOnlyTheEpochsInProgress) {
  Journaled j(Config(3, 100'000'000, 2));
  QueueState& s = *j.live;
  // Read through five epochs with a straggler holding one item at a time.
  WorkItem held = MustTake(s, "slow", kT0);
  for (int i = 0; i < 15; ++i) {
    const WorkItem w = MustTake(s, "fast", kT0);
    ASSERT_TRUE(s.Complete("fast", w.lease_id, kT0).ok());
    EXPECT_LE(s.epoch_records(), 3) << "after " << i << " completions";
    if (i % 4 == 3) {
      ASSERT_TRUE(s.Complete("slow", held.lease_id, kT0).ok());
      held = MustTake(s, "slow", kT0);
    }
  }
  const QueueStats stats = s.Stats(kT0);
  EXPECT_EQ(stats.num_epochs, 100'000'000);
  EXPECT_LE(stats.epochs.size(), 3u);
  EXPECT_GE(stats.epochs_done, 4);
  EXPECT_EQ(stats.completed + stats.leased + stats.pending, 300'000'000);
  for (const EpochStats& e : stats.epochs) {
    EXPECT_TRUE(e.completed < 3 || e.leased > 0) << "epoch " << e.epoch << " is done";
  }
  EXPECT_LT(s.ToSnapshot().ByteSizeLong(), 4096u);
  EXPECT_LT(s.ToCheckpoint().ByteSizeLong(), 4096u);
  j.ExpectReplayAndSnapshotAgree();
  // A restored checkpoint continues where this one is.
  absl::StatusOr<journal::Update> restore = QueueState::RestoreUpdate(s.ToCheckpoint(), "r", kT0);
  ASSERT_TRUE(restore.ok()) << restore.status();
  auto restored = *QueueState::FromCreation(*restore);
  EXPECT_EQ(restored->Stats(kT0).completed, stats.completed);
  EXPECT_LE(restored->epoch_records(), 3);
}

TEST(Accounting, LimitsAreInvalidArgumentNamingFieldAndLimit) {
  QueueConfig c = Config(3, 1'000'000'000);
  absl::Status s = ValidateConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_epochs"), std::string::npos) << s;
  EXPECT_NE(s.message().find("100000000"), std::string::npos) << s;
  c = Config(3);
  c.items[1] = std::string(kMaxItemBytes + 1, 'x');
  s = ValidateConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("item 1"), std::string::npos) << s;
  EXPECT_NE(s.message().find(std::to_string(kMaxItemBytes)), std::string::npos) << s;
  c = Config(kMaxItemsPerQueue + 1);
  s = ValidateConfig(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find(std::to_string(kMaxItemsPerQueue)), std::string::npos) << s;
  c = Config(3);
  c.max_attempts = 0;
  EXPECT_NE(ValidateConfig(c).message().find("max_attempts"), std::string::npos);
}

TEST(Accounting, ADamagedCompletionBitsetIsDataLoss) {
  auto s = *QueueState::Create(Config(20, 2));
  for (int i = 0; i < 5; ++i) {
    const WorkItem w = MustTake(*s, "w", kT0);
    ASSERT_TRUE(s->Complete("w", w.lease_id, kT0).ok());
  }
  journal::QueueSnapshot snapshot = s->ToSnapshot();
  ASSERT_EQ(snapshot.epoch_records_size(), 1);
  std::string* bits = snapshot.mutable_epoch_records(0)->mutable_completed_bits();
  (*bits)[1] = static_cast<char>((*bits)[1] ^ 0x10);  // item 12, not completed
  EXPECT_EQ(QueueState::FromSnapshot(snapshot, kT0).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(Accounting, ASnapshotOfTheOlderPerEpochFormatLoads) {
  // Epoch 0 completed, epoch 1 materialised with item 1 completed.
  journal::QueueSnapshot old;
  ConfigToProto(Config(3, 3), old.mutable_config());
  old.set_next_epoch(2);
  old.add_completed_bits("");
  old.add_completed_per_epoch(3);
  old.add_completed_bits(std::string(1, '\x02'));
  old.add_completed_per_epoch(1);
  old.add_completed_bits("");
  old.add_completed_per_epoch(0);
  for (int index : {0, 2}) {
    journal::Ref* r = old.add_pending();
    r->set_epoch(1);
    r->set_index(index);
  }
  absl::StatusOr<std::unique_ptr<QueueState>> s = QueueState::FromSnapshot(old, kT0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->Stats(kT0).completed, 4);
  EXPECT_EQ((*s)->Stats(kT0).epochs_done, 1);
  int taken = 0;
  while (true) {
    absl::StatusOr<TakeResult> r = (*s)->Take("w", kT0);
    ASSERT_TRUE(r.ok());
    if (r->outcome != TakeOutcome::kItem) break;
    ASSERT_TRUE((*s)->Complete("w", r->item.lease_id, kT0).ok());
    ++taken;
  }
  EXPECT_EQ(taken, 5);
  EXPECT_TRUE((*s)->Finished());
}

}  // namespace
}  // namespace shardq
