// Tail rebalancing in QueueState: proposals, accepted and refused splits,
// the races around them, and splits in snapshots and checkpoints.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/slice.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// `n` items of 1000 bytes each, one epoch, in plan order.
QueueConfig Config(int64_t n, int64_t min_residual = 10) {
  QueueConfig c;
  c.name = "q";
  for (int64_t i = 0; i < n; ++i) {
    c.items.push_back(absl::StrCat("f", i, ".txt?start=0&end=1000"));
  }
  c.shuffle = false;
  c.seed = 1;
  c.num_clients = 1;
  c.lease_timeout = absl::Seconds(30);
  c.split_min_residual = min_residual;
  return c;
}

std::unique_ptr<QueueState> Make(QueueConfig c) {
  absl::StatusOr<std::unique_ptr<QueueState>> s = QueueState::Create(std::move(c));
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

WorkItem Take(QueueState& s, const std::string& worker, absl::Time now) {
  absl::StatusOr<TakeResult> r = s.Take(worker, now);
  EXPECT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outcome, TakeOutcome::kItem);
  return r->item;
}

SliceSpec Spec(const std::string& item) {
  absl::StatusOr<SliceSpec> spec = ParseItem(item);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// One item; "slow" has read 100 bytes in 10 s (10 B/s), "fast" reads 90 B/s
// (measured on an item of its own). Returns slow's lease.
struct Scene {
  std::unique_ptr<QueueState> s;
  WorkItem slow;
  absl::Time now;
};

Scene SlowAndFast() {
  Scene scene;
  scene.s = Make(Config(2));
  QueueState& s = *scene.s;
  scene.slow = Take(s, "slow", kT0);
  WorkItem fast = Take(s, "fast", kT0);
  EXPECT_TRUE(s.ReportProgress("fast", fast.lease_id, 900, kT0 + absl::Seconds(10)).ok());
  EXPECT_TRUE(s.ReportProgress("slow", scene.slow.lease_id, 100, kT0 + absl::Seconds(10)).ok());
  EXPECT_EQ(*s.Complete("fast", fast.lease_id, kT0 + absl::Seconds(11)),
            CompleteOutcome::kCompleted);
  scene.now = kT0 + absl::Seconds(11);
  return scene;
}

TEST(Split, AHolderMaySplitOffTheRestOfItsItemUnasked) {
  // A reader that stopped mid-item (WorkQueue::ReleaseRest): the holder
  // splits where its records ended, completes the part before, and the rest
  // is handed out as an item of its own.
  std::unique_ptr<QueueState> s = Make(Config(1));
  WorkItem held = Take(*s, "w", kT0);
  EXPECT_EQ(*s->AcceptSplit("w", held.lease_id, 300, kT0), true);
  EXPECT_EQ(*s->Complete("w", held.lease_id, kT0), CompleteOutcome::kCompleted);
  WorkItem rest = Take(*s, "other", kT0);
  EXPECT_EQ(*Spec(rest.item).start, 300);
  EXPECT_EQ(*Spec(rest.item).end, 1000);
  EXPECT_EQ(*s->Complete("other", rest.lease_id, kT0), CompleteOutcome::kCompleted);
  EXPECT_TRUE(s->Stats(kT0).finished);
}

TEST(Split, AQueueWithSplittingOffRefusesAHoldersSplit) {
  QueueConfig c = Config(1);
  c.split = false;
  std::unique_ptr<QueueState> s = Make(std::move(c));
  WorkItem held = Take(*s, "w", kT0);
  EXPECT_EQ(*s->AcceptSplit("w", held.lease_id, 300, kT0), false);
  // Still whole and held: a release gives all of it back.
  ASSERT_TRUE(s->Release("w", held.lease_id, kT0).ok());
  WorkItem again = Take(*s, "w", kT0);
  EXPECT_EQ(again.item, held.item);
}

TEST(Split, IdleWorkerGetsAProposalThatLetsBothFinishTogether) {
  Scene scene = SlowAndFast();
  QueueState& s = *scene.s;
  absl::StatusOr<TakeResult> r = s.Take("fast", scene.now);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, TakeOutcome::kWait);
  HeartbeatReply reply = s.Heartbeat("slow", {scene.slow.lease_id}, scene.now);
  ASSERT_EQ(reply.splits.size(), 1u);
  EXPECT_EQ(reply.splits[0].lease_id, scene.slow.lease_id);
  EXPECT_EQ(reply.splits[0].min_residual, 10);
  // slow is at ~110 (100 at t=10 s, 10 B/s), 890 bytes left; at 10 vs 90
  // B/s both finish together when slow keeps 10% of them: ~110 + 89.
  EXPECT_NEAR(static_cast<double>(reply.splits[0].split_point), 199, 2);
  // Asking again does not pile up proposals for the same asker.
  ASSERT_EQ(s.Take("fast", scene.now)->outcome, TakeOutcome::kWait);
  EXPECT_EQ(s.Heartbeat("slow", {scene.slow.lease_id}, scene.now).splits.size(), 1u);
}

TEST(Split, ALoneItemTakenAheadIsGivenBackWholeAndARefusalKeepsItSplittable) {
  auto s = Make(Config(2));
  // num_clients 1: the second item is taken ahead (kept ready).
  absl::StatusOr<TakeResult> first = s->Take("a", kT0, /*ahead=*/1);
  absl::StatusOr<TakeResult> ready = s->Take("a", kT0, /*ahead=*/1);
  ASSERT_TRUE(first.ok() && ready.ok());
  ASSERT_EQ(ready->outcome, TakeOutcome::kItem);
  ASSERT_TRUE(s->Complete("a", first->item.lease_id, kT0).ok());
  // a holds only the ready item; b finds nothing: a give-back of it whole.
  absl::StatusOr<TakeResult> asked = s->Take("b", kT0);
  ASSERT_TRUE(asked.ok());
  EXPECT_EQ(asked->outcome, TakeOutcome::kWait);
  EXPECT_EQ(asked->proposed_lease, ready->item.lease_id);
  std::vector<SplitProposal> proposals = s->Heartbeat("a", {ready->item.lease_id}, kT0).splits;
  ASSERT_EQ(proposals.size(), 1u);
  EXPECT_EQ(proposals[0].split_point, 0);  // its start: whole
  // a had started it meanwhile and refuses: no give-back again, yet the
  // item can still be split in the middle.
  ASSERT_FALSE(*s->AcceptSplit("a", ready->item.lease_id, -1, kT0));
  asked = s->Take("b", kT0 + absl::Seconds(1));
  ASSERT_TRUE(asked.ok());
  EXPECT_EQ(asked->proposed_lease, ready->item.lease_id);
  proposals = s->Heartbeat("a", {ready->item.lease_id}, kT0 + absl::Seconds(1)).splits;
  ASSERT_EQ(proposals.size(), 1u);
  EXPECT_GT(proposals[0].split_point, 0);
  EXPECT_LT(proposals[0].split_point, 1000);
}

TEST(Split, AnItemTakenAheadIsKnownAsSuchAfterAReplayAndAfterARestore) {
  // A coordinator that recovered, or took over a job, learns which items
  // were kept ready from the journal's leases and the snapshot's.
  auto live = Make(Config(2));
  std::vector<journal::Update> updates;
  live->set_update_sink([&](const journal::Update& u) { updates.push_back(u); });
  absl::StatusOr<TakeResult> first = live->Take("a", kT0, /*ahead=*/1);
  absl::StatusOr<TakeResult> ready = live->Take("a", kT0, /*ahead=*/1);
  ASSERT_TRUE(first.ok() && ready.ok());
  ASSERT_EQ(ready->outcome, TakeOutcome::kItem);
  ASSERT_TRUE(live->Complete("a", first->item.lease_id, kT0).ok());
  auto replayed = Make(Config(2));
  for (const journal::Update& u : updates) ASSERT_TRUE(replayed->Apply(u).ok());
  absl::StatusOr<std::unique_ptr<QueueState>> restored =
      QueueState::FromSnapshot(replayed->ToSnapshot(), kT0);
  ASSERT_TRUE(restored.ok()) << restored.status();
  for (QueueState* s : {live.get(), replayed.get(), restored->get()}) {
    // a holds only its ready item: b is offered all of it, not a cut.
    absl::StatusOr<TakeResult> asked = s->Take("b", kT0 + absl::Seconds(1));
    ASSERT_TRUE(asked.ok()) << asked.status();
    EXPECT_EQ(asked->outcome, TakeOutcome::kWait);
    EXPECT_EQ(asked->proposed_lease, ready->item.lease_id);
    std::optional<SplitProposal> p = s->ProposalFor(ready->item.lease_id);
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->split_point, 0);
  }
}

TEST(Split, WithSplittingOffAnItemKeptReadyIsStillGivenBackWhole) {
  QueueConfig c = Config(2);
  c.split = false;
  auto s = Make(c);
  absl::StatusOr<TakeResult> first = s->Take("a", kT0, /*ahead=*/1);
  absl::StatusOr<TakeResult> ready = s->Take("a", kT0, /*ahead=*/1);
  ASSERT_TRUE(first.ok() && ready.ok());
  ASSERT_EQ(ready->outcome, TakeOutcome::kItem);
  EXPECT_TRUE(s->SplitsPossible());
  absl::StatusOr<TakeResult> asked = s->Take("b", kT0);
  ASSERT_TRUE(asked.ok());
  EXPECT_EQ(asked->outcome, TakeOutcome::kWait);
  EXPECT_EQ(asked->proposed_lease, ready->item.lease_id);
  // Given back whole: b gets it; the item being read is never cut.
  ASSERT_TRUE(*s->AcceptSplit("a", ready->item.lease_id, 0, kT0));
  EXPECT_EQ(Take(*s, "b", kT0).index, ready->item.index);
  asked = s->Take("c", kT0);
  ASSERT_TRUE(asked.ok());
  EXPECT_EQ(asked->proposed_lease, 0u);
}

TEST(Split, AcceptedSplitBecomesAnItemAndBothHalvesComplete) {
  Scene scene = SlowAndFast();
  QueueState& s = *scene.s;
  ASSERT_EQ(s.Take("fast", scene.now)->outcome, TakeOutcome::kWait);
  const SplitProposal p = s.Heartbeat("slow", {scene.slow.lease_id}, scene.now).splits.at(0);
  // The holder was already past the proposed point: it accepts later.
  absl::StatusOr<bool> accepted =
      s.AcceptSplit("slow", scene.slow.lease_id, p.split_point + 5, scene.now);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_TRUE(*accepted);
  WorkItem rest = Take(s, "fast", scene.now);
  EXPECT_EQ(Spec(rest.item).start, p.split_point + 5);
  EXPECT_EQ(Spec(rest.item).end, 1000);
  EXPECT_EQ(rest.epoch, 0);
  // No proposal left for the holder; its item is now the head.
  EXPECT_TRUE(s.Heartbeat("slow", {scene.slow.lease_id}, scene.now).splits.empty());
  QueueStats stats = s.Stats(scene.now);
  EXPECT_EQ(stats.splits, 1);
  EXPECT_EQ(stats.split_items_open, 1);
  EXPECT_FALSE(s.Finished());
  EXPECT_EQ(*s.Complete("fast", rest.lease_id, scene.now), CompleteOutcome::kCompleted);
  EXPECT_FALSE(s.Finished());  // the head is still being read
  EXPECT_EQ(s.Take("fast", scene.now)->outcome, TakeOutcome::kWait);
  EXPECT_EQ(*s.Complete("slow", scene.slow.lease_id, scene.now),
            CompleteOutcome::kCompleted);
  EXPECT_TRUE(s.Finished());
  EXPECT_EQ(s.Take("fast", scene.now)->outcome, TakeOutcome::kEndOfInput);
  stats = s.Stats(scene.now);
  EXPECT_EQ(stats.completed, 2);
  EXPECT_EQ(stats.split_items_open, 0);
  EXPECT_EQ(stats.duplicates, 0);
}

TEST(Split, RefusalIsRememberedAndNothingChanges) {
  Scene scene = SlowAndFast();
  QueueState& s = *scene.s;
  ASSERT_EQ(s.Take("fast", scene.now)->outcome, TakeOutcome::kWait);
  ASSERT_EQ(s.Heartbeat("slow", {scene.slow.lease_id}, scene.now).splits.size(), 1u);
  absl::StatusOr<bool> accepted = s.AcceptSplit("slow", scene.slow.lease_id, -1, scene.now);
  ASSERT_TRUE(accepted.ok());
  EXPECT_FALSE(*accepted);
  ASSERT_EQ(s.Take("fast", scene.now)->outcome, TakeOutcome::kWait);
  EXPECT_TRUE(s.Heartbeat("slow", {scene.slow.lease_id}, scene.now).splits.empty());
  EXPECT_EQ(s.Stats(scene.now).splits, 0);
}

TEST(Split, HolderThatDiesBeforeAnsweringLosesTheLeaseAndNoSplitHappens) {
  Scene scene = SlowAndFast();
  QueueState& s = *scene.s;
  ASSERT_EQ(s.Take("fast", scene.now)->outcome, TakeOutcome::kWait);
  const absl::Time later = scene.now + absl::Seconds(31);
  EXPECT_EQ(s.ExpireLeases(later), 1);
  absl::StatusOr<bool> late = s.AcceptSplit("slow", scene.slow.lease_id, 500, later);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kNotFound);
  // The whole item goes to the next taker; nothing was split off.
  WorkItem again = Take(s, "fast", later);
  EXPECT_EQ(again.item, "f0.txt?start=0&end=1000");
  EXPECT_EQ(s.Stats(later).splits, 0);
}

TEST(Split, PointsOutsideTheItemOrBeforeTheProposalAreRejected) {
  Scene scene = SlowAndFast();
  QueueState& s = *scene.s;
  ASSERT_EQ(s.Take("fast", scene.now)->outcome, TakeOutcome::kWait);
  const SplitProposal p = s.Heartbeat("slow", {scene.slow.lease_id}, scene.now).splits.at(0);
  EXPECT_EQ(s.AcceptSplit("slow", scene.slow.lease_id, p.split_point - 1, scene.now)
                .status().code(),
            absl::StatusCode::kInvalidArgument);
  for (int64_t bad : {int64_t{0}, int64_t{1000}, int64_t{5000}}) {
    EXPECT_EQ(s.AcceptSplit("slow", scene.slow.lease_id, bad, scene.now).status().code(),
              absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(s.AcceptSplit("fast", scene.slow.lease_id, 500, scene.now).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.Stats(scene.now).splits, 0);
}

TEST(Split, DisabledQueueNeverProposes) {
  QueueConfig c = Config(1);
  c.split = false;
  auto s = Make(c);
  WorkItem held = Take(*s, "slow", kT0);
  ASSERT_TRUE(s->ReportProgress("slow", held.lease_id, 10, kT0 + absl::Seconds(1)).ok());
  EXPECT_EQ(s->Take("fast", kT0 + absl::Seconds(2))->outcome, TakeOutcome::kWait);
  EXPECT_TRUE(s->Heartbeat("slow", {held.lease_id}, kT0 + absl::Seconds(2)).splits.empty());
}

TEST(Split, ItemsTooShortForTwoMinimumResidualsAreNotProposed) {
  auto s = Make(Config(1, /*min_residual=*/400));
  WorkItem held = Take(*s, "slow", kT0);
  // 300 of 1000 read: 700 left < 2 * 400.
  ASSERT_TRUE(s->ReportProgress("slow", held.lease_id, 300, kT0 + absl::Seconds(1)).ok());
  EXPECT_EQ(s->Take("fast", kT0 + absl::Seconds(1))->outcome, TakeOutcome::kWait);
  EXPECT_TRUE(s->Heartbeat("slow", {held.lease_id}, kT0 + absl::Seconds(1)).splits.empty());
}

TEST(Split, TheItemExpectedToFinishLastIsSplitFirst) {
  auto s = Make(Config(3));
  WorkItem a = Take(*s, "a", kT0);
  WorkItem b = Take(*s, "b", kT0);
  WorkItem c = Take(*s, "c", kT0);
  const absl::Time t = kT0 + absl::Seconds(10);
  ASSERT_TRUE(s->ReportProgress("a", a.lease_id, 500, t).ok());  // 50 B/s: 10 s left
  ASSERT_TRUE(s->ReportProgress("b", b.lease_id, 100, t).ok());  // 10 B/s: 90 s left
  ASSERT_TRUE(s->Complete("c", c.lease_id, t).ok());
  ASSERT_EQ(s->Take("c", t)->outcome, TakeOutcome::kWait);
  EXPECT_TRUE(s->Heartbeat("a", {a.lease_id}, t).splits.empty());
  EXPECT_EQ(s->Heartbeat("b", {b.lease_id}, t).splits.size(), 1u);
}

// Replays `updates` into a state created from the same config.
std::unique_ptr<QueueState> Replay(const QueueConfig& config,
                                   const std::vector<journal::Update>& updates) {
  auto replayed = Make(config);
  for (const journal::Update& u : updates) {
    absl::Status st = replayed->Apply(u);
    EXPECT_TRUE(st.ok()) << st;
  }
  return replayed;
}

TEST(Split, SplitsAreJournaledSnapshottedAndReplayedExactly) {
  const QueueConfig config = Config(2);
  auto s = Make(config);
  std::vector<journal::Update> updates;
  s->set_update_sink([&](const journal::Update& u) { updates.push_back(u); });
  WorkItem slow = Take(*s, "slow", kT0);
  WorkItem fast = Take(*s, "fast", kT0);
  ASSERT_TRUE(s->ReportProgress("slow", slow.lease_id, 100, kT0 + absl::Seconds(10)).ok());
  ASSERT_TRUE(s->Complete("fast", fast.lease_id, kT0 + absl::Seconds(10)).ok());
  ASSERT_EQ(s->Take("fast", kT0 + absl::Seconds(10))->outcome, TakeOutcome::kWait);
  const int64_t p = s->Heartbeat("slow", {slow.lease_id}, kT0).splits.at(0).split_point;
  ASSERT_LT(p, 700);
  ASSERT_TRUE(*s->AcceptSplit("slow", slow.lease_id, p, kT0 + absl::Seconds(11)));
  WorkItem rest = Take(*s, "fast", kT0 + absl::Seconds(11));
  // And the residual is split again, recursively.
  ASSERT_TRUE(s->ReportProgress("fast", rest.lease_id, 600, kT0 + absl::Seconds(12)).ok());
  ASSERT_EQ(s->Take("third", kT0 + absl::Seconds(12))->outcome, TakeOutcome::kWait);
  ASSERT_TRUE(*s->AcceptSplit("fast", rest.lease_id, 800, kT0 + absl::Seconds(12)));
  WorkItem last = Take(*s, "third", kT0 + absl::Seconds(12));
  EXPECT_EQ(Spec(last.item).start, 800);
  EXPECT_EQ(Spec(last.item).end, 1000);

  auto replayed = Replay(config, updates);
  EXPECT_EQ(replayed->ToSnapshot().SerializeAsString(), s->ToSnapshot().SerializeAsString());
  absl::StatusOr<std::unique_ptr<QueueState>> restored =
      QueueState::FromSnapshot(s->ToSnapshot(), kT0);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->ToSnapshot().SerializeAsString(), s->ToSnapshot().SerializeAsString());
  // The restored state accepts the completions of all three parts.
  for (auto* st : {s.get(), restored->get()}) {
    EXPECT_EQ(*st->Complete("slow", slow.lease_id, kT0 + absl::Seconds(20)),
              CompleteOutcome::kCompleted);
    EXPECT_EQ(*st->Complete("fast", rest.lease_id, kT0 + absl::Seconds(20)),
              CompleteOutcome::kCompleted);
    EXPECT_FALSE(st->Finished());
    EXPECT_EQ(*st->Complete("third", last.lease_id, kT0 + absl::Seconds(20)),
              CompleteOutcome::kCompleted);
    EXPECT_TRUE(st->Finished());
    EXPECT_EQ(st->Stats(kT0).splits, 2);
  }
}

TEST(Split, CheckpointKeepsTheUnreadRangesOfASplitItem) {
  const QueueConfig config = Config(1);
  auto s = Make(config);
  WorkItem slow = Take(*s, "slow", kT0);
  ASSERT_TRUE(s->ReportProgress("slow", slow.lease_id, 100, kT0 + absl::Seconds(10)).ok());
  ASSERT_EQ(s->Take("fast", kT0 + absl::Seconds(10))->outcome, TakeOutcome::kWait);
  const int64_t p = s->Heartbeat("slow", {slow.lease_id}, kT0).splits.at(0).split_point;
  ASSERT_LT(p, 700);
  ASSERT_TRUE(*s->AcceptSplit("slow", slow.lease_id, p, kT0 + absl::Seconds(10)));
  WorkItem rest = Take(*s, "fast", kT0 + absl::Seconds(10));  // [p, 1000)
  ASSERT_TRUE(s->ReportProgress("fast", rest.lease_id, 700, kT0 + absl::Seconds(11)).ok());
  // The head [0, p) is completed; [700, 1000) is still to read.
  ASSERT_TRUE(s->Complete("slow", slow.lease_id, kT0 + absl::Seconds(12)).ok());
  journal::Checkpoint checkpoint = s->ToCheckpoint();
  absl::StatusOr<journal::Update> update = QueueState::RestoreUpdate(checkpoint, "", kT0);
  ASSERT_TRUE(update.ok()) << update.status();
  absl::StatusOr<std::unique_ptr<QueueState>> resumed = QueueState::FromCreation(*update);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  WorkItem next = Take(**resumed, "w", kT0);
  EXPECT_EQ(Spec(next.item).start, 700);
  EXPECT_EQ(Spec(next.item).end, 1000);
  ASSERT_TRUE((*resumed)->Complete("w", next.lease_id, kT0).ok());
  EXPECT_TRUE((*resumed)->Finished());

  // Both parts unread: the head pending again after its lease expired.
  auto t = Make(config);
  WorkItem h = Take(*t, "slow", kT0);
  ASSERT_TRUE(t->ReportProgress("slow", h.lease_id, 100, kT0 + absl::Seconds(10)).ok());
  ASSERT_EQ(t->Take("fast", kT0 + absl::Seconds(10))->outcome, TakeOutcome::kWait);
  const int64_t q = t->Heartbeat("slow", {h.lease_id}, kT0).splits.at(0).split_point;
  ASSERT_TRUE(*t->AcceptSplit("slow", h.lease_id, q, kT0 + absl::Seconds(10)));
  ASSERT_EQ(t->ExpireLeases(kT0 + absl::Minutes(5)), 1);
  update = QueueState::RestoreUpdate(t->ToCheckpoint(), "", kT0);
  ASSERT_TRUE(update.ok()) << update.status();
  resumed = QueueState::FromCreation(*update);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int i = 0; i < 2; ++i) {
    WorkItem item = Take(**resumed, absl::StrCat("w", i), kT0);
    ranges.push_back({*Spec(item.item).start, *Spec(item.item).end});
    ASSERT_TRUE((*resumed)->Complete(absl::StrCat("w", i), item.lease_id, kT0).ok());
  }
  std::sort(ranges.begin(), ranges.end());
  EXPECT_EQ(ranges, (std::vector<std::pair<int64_t, int64_t>>{{0, q}, {q, 1000}}));
  EXPECT_TRUE((*resumed)->Finished());
}

}  // namespace
}  // namespace shardq
