// Compact queue state (issue 17): snapshots (format 3) and creation
// updates (format 2) round-trip and replay into the same state as the
// format 1 and 2 forms that earlier versions wrote, hand out byte-identical
// item strings, and a format newer than this version is refused naming it.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "shardq/slice.h"
#include "src/core/legacy_format_testing.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// Items of every shape a plan may hold.
QueueConfig Config() {
  QueueConfig c;
  c.name = "q";
  c.items = testing_legacy::ItemsOfEveryShape();
  c.num_epochs = 3;
  c.seed = 5;
  c.num_clients = 8;
  c.lease_timeout = absl::Seconds(30);
  return c;
}

bool Same(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

// Takes, completes, splits, fails and releases on `s`, recording updates.
std::vector<journal::Update> History(QueueState& s) {
  std::vector<journal::Update> updates;
  s.set_update_sink([&](const journal::Update& u) { updates.push_back(u); });
  std::vector<WorkItem> held;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<TakeResult> r = s.Take("w1", kT0);
    EXPECT_TRUE(r.ok() && r->outcome == TakeOutcome::kItem);
    held.push_back(r->item);
  }
  EXPECT_TRUE(s.Complete("w1", held[0].lease_id, kT0).ok());
  int splits = 0;
  for (int i = 1; i < 6; ++i) {
    absl::StatusOr<SliceSpec> spec = ParseItem(held[static_cast<size_t>(i)].item);
    if (!spec.ok() || !spec->start || !spec->end || *spec->end - *spec->start < 2) continue;
    const int64_t mid = *spec->start + (*spec->end - *spec->start) / 2;
    absl::StatusOr<bool> ok = s.AcceptSplit("w1", held[static_cast<size_t>(i)].lease_id, mid, kT0);
    EXPECT_TRUE(ok.ok() && *ok) << held[static_cast<size_t>(i)].item;
    ++splits;
  }
  EXPECT_GE(splits, 2);
  EXPECT_TRUE(s.Fail("w1", held[1].lease_id, "bad", kT0).ok());
  EXPECT_TRUE(s.Release("w1", held[2].lease_id, kT0).ok());
  EXPECT_TRUE(s.ReportProgress("w1", held[3].lease_id, 10, kT0).ok());
  s.set_update_sink(nullptr);
  return updates;
}

// Every item string `s` hands out from now to the end, completing each.
std::vector<std::string> Drain(QueueState& s) {
  std::vector<std::string> out;
  while (true) {
    absl::StatusOr<TakeResult> r = s.Take("drain", kT0);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->outcome != TakeOutcome::kItem) break;
    out.push_back(r->item.item);
    EXPECT_TRUE(s.Complete("drain", r->item.lease_id, kT0).ok());
  }
  return out;
}

TEST(CompactFormat, ASnapshotRoundTripsAndHandsOutTheSameItems) {
  auto live = *QueueState::Create(Config());
  History(*live);
  const journal::QueueSnapshot snapshot = live->ToSnapshot();
  EXPECT_EQ(snapshot.format(), QueueState::kSnapshotFormat);
  EXPECT_EQ(snapshot.config().items_size(), 0);  // the plan is in snapshot.items
  EXPECT_EQ(snapshot.pending_size(), 0);
  auto rebuilt = QueueState::FromSnapshot(snapshot, kT0);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
  EXPECT_TRUE(Same((*rebuilt)->ToSnapshot(), snapshot));
  EXPECT_EQ(Drain(**rebuilt), Drain(*live));
}

TEST(CompactFormat, JournalReplayFromACompactCreationRebuildsTheState) {
  auto live = *QueueState::Create(Config());
  const journal::Update creation = QueueState::CreationUpdate(Config(), kT0);
  EXPECT_EQ(creation.create().format(), QueueState::kCreationFormat);
  EXPECT_EQ(creation.create().config().items_size(), 0);
  const std::vector<journal::Update> updates = History(*live);
  auto replayed = *QueueState::FromCreation(creation);
  for (const journal::Update& u : updates) ASSERT_TRUE(replayed->Apply(u).ok());
  EXPECT_TRUE(Same(replayed->ToSnapshot(), live->ToSnapshot()));
  EXPECT_EQ(Drain(*replayed), Drain(*live));
}

TEST(CompactFormat, Format1CreationsAndSnapshotsAreReadIntoTheSameState) {
  auto live = *QueueState::Create(Config());
  const std::vector<journal::Update> updates = History(*live);
  // Replay from a format 1 creation (the plan as item strings).
  auto replayed = *QueueState::FromCreation(testing_legacy::CreationUpdate(Config(), kT0));
  for (const journal::Update& u : updates) ASSERT_TRUE(replayed->Apply(u).ok());
  EXPECT_TRUE(Same(replayed->ToSnapshot(), live->ToSnapshot()));
  // A format 1 snapshot (pending refs, overrides and extras as strings).
  const journal::QueueSnapshot old = testing_legacy::Snapshot(live->ToSnapshot());
  EXPECT_EQ(old.config().items_size(), 8);
  EXPECT_GT(old.extras_size(), 0);
  EXPECT_FALSE(old.extras(0).item().empty());
  auto upgraded = QueueState::FromSnapshot(old, kT0);
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  EXPECT_TRUE(Same((*upgraded)->ToSnapshot(), live->ToSnapshot()));
  EXPECT_EQ(Drain(**upgraded), Drain(*live));
}

TEST(CompactFormat, Format2SnapshotsAreReadWithTheirEndedLeases) {
  auto live = *QueueState::Create(Config());
  History(*live);
  // Leases of a second worker that ended: one released, one expired.
  absl::StatusOr<TakeResult> taken = live->Take("w2", kT0);
  ASSERT_TRUE(taken.ok() && taken->outcome == TakeOutcome::kItem);
  const WorkItem released = taken->item;
  ASSERT_TRUE(live->Release("w2", released.lease_id, kT0).ok());
  const journal::QueueSnapshot current = live->ToSnapshot();
  EXPECT_EQ(current.expired_size(), 0);
  EXPECT_EQ(current.ended_leases().workers_size(), 2);  // w1 and w2, once each
  EXPECT_GE(current.ended_leases().lease_id_size(), 4);

  // What the last version wrote: the ended leases as LeaseRecords.
  const journal::QueueSnapshot old = testing_legacy::SnapshotFormat2(current);
  ASSERT_EQ(old.format(), 2u);
  ASSERT_EQ(old.expired_size(), current.ended_leases().lease_id_size());
  auto upgraded = QueueState::FromSnapshot(old, kT0);
  ASSERT_TRUE(upgraded.ok()) << upgraded.status();
  EXPECT_TRUE(Same((*upgraded)->ToSnapshot(), current));
  // The ended leases still decide: the late completion of the released
  // lease counts for its worker, and is refused for another.
  EXPECT_EQ((*upgraded)->Complete("w1", released.lease_id, kT0).status().code(),
            absl::StatusCode::kPermissionDenied);
  const int64_t completed = (*upgraded)->Stats(kT0).completed;
  absl::StatusOr<CompleteOutcome> late = (*upgraded)->Complete("w2", released.lease_id, kT0);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(*late, CompleteOutcome::kCompleted);
  EXPECT_EQ((*upgraded)->Stats(kT0).completed, completed + 1);
  ASSERT_TRUE(live->Complete("w2", released.lease_id, kT0).ok());
  EXPECT_EQ(Drain(**upgraded), Drain(*live));
}

TEST(CompactFormat, ANewerFormatIsRefusedNamingIt) {
  auto live = *QueueState::Create(Config());
  journal::QueueSnapshot snapshot = live->ToSnapshot();
  snapshot.set_format(QueueState::kSnapshotFormat + 1);
  absl::Status s = QueueState::FromSnapshot(snapshot, kT0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(absl::StrCat("format ", QueueState::kSnapshotFormat + 1)),
            std::string::npos)
      << s;
  journal::Update creation = QueueState::CreationUpdate(Config(), kT0);
  creation.mutable_create()->set_format(QueueState::kCreationFormat + 1);
  s = QueueState::FromCreation(creation).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(absl::StrCat("format ", QueueState::kCreationFormat + 1)),
            std::string::npos)
      << s;
}

TEST(CompactFormat, CheckpointsKeepTheirFormatAndRestore) {
  auto live = *QueueState::Create(Config());
  History(*live);
  const journal::Checkpoint checkpoint = live->ToCheckpoint();
  ASSERT_EQ(checkpoint.config().items_size(), 8);
  EXPECT_EQ(checkpoint.config().items(4), "data/odd.txt?end=300&start=0");
  absl::StatusOr<journal::Update> restore = QueueState::RestoreUpdate(checkpoint, "", kT0);
  ASSERT_TRUE(restore.ok()) << restore.status();
  auto restored = *QueueState::FromCreation(*restore);
  EXPECT_EQ(restored->Stats(kT0).completed, live->Stats(kT0).completed);
  const journal::Checkpoint again = restored->ToCheckpoint();
  EXPECT_TRUE(Same(again.config(), checkpoint.config()));
  // (Held items without a narrowed range restore as plain pending items,
  // which a checkpoint does not list: fewer residuals, as before.)
  EXPECT_LE(again.residual_size(), checkpoint.residual_size());
}

}  // namespace
}  // namespace shardq
