// Worker sessions in QueueState (liveness without heartbeats) and take-ahead
// items given back whole.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);
constexpr absl::Duration kTimeout = absl::Seconds(30);

// `n` ranged items of 1000 bytes, one epoch, in plan order.
QueueConfig Config(int64_t n, int64_t num_clients = 1) {
  QueueConfig c;
  c.name = "q";
  for (int64_t i = 0; i < n; ++i) c.items.push_back(absl::StrCat("f", i, ".txt?start=0&end=1000"));
  c.shuffle = false;
  c.seed = 1;
  c.num_clients = num_clients;
  c.lease_timeout = kTimeout;
  c.split_min_residual = 10;
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

TEST(QueueStateSessions, LeasesOfAWorkerWithASessionOpenNeverExpire) {
  auto s = Make(Config(1));
  s->OpenSession("w");
  WorkItem item = Take(*s, "w", kT0);
  EXPECT_EQ(s->ExpireLeases(kT0 + 100 * kTimeout), 0);
  EXPECT_EQ(s->Take("other", kT0 + 100 * kTimeout)->outcome, TakeOutcome::kWait);
  EXPECT_EQ(*s->Complete("w", item.lease_id, kT0 + 100 * kTimeout), CompleteOutcome::kCompleted);
  EXPECT_EQ(s->Stats(kT0 + 100 * kTimeout).expired, 0);
}

TEST(QueueStateSessions, LeasesExpireOneLeaseTimeoutAfterTheLastSessionCloses) {
  auto s = Make(Config(1));
  s->OpenSession("w");
  s->OpenSession("w");  // two streams of one worker
  Take(*s, "w", kT0);
  const absl::Time closed = kT0 + 10 * kTimeout;
  s->CloseSession("w", closed);
  EXPECT_EQ(s->SessionsOpen("w"), 1);
  EXPECT_EQ(s->ExpireLeases(closed + 2 * kTimeout), 0);  // one stream is still open
  const absl::Time last_closed = closed + 2 * kTimeout;
  s->CloseSession("w", last_closed);
  EXPECT_EQ(s->SessionsOpen("w"), 0);
  EXPECT_EQ(s->ExpireLeases(last_closed + kTimeout - absl::Seconds(1)), 0);
  EXPECT_EQ(s->ExpireLeases(last_closed + kTimeout), 1);
  WorkItem again = Take(*s, "other", last_closed + kTimeout);
  EXPECT_EQ(again.index, 0);
}

TEST(QueueStateSessions, ReopenWithinTheTimeoutKeepsTheLeases) {
  auto s = Make(Config(2, 2));
  s->OpenSession("w");
  WorkItem a = Take(*s, "w", kT0);
  WorkItem b = Take(*s, "w", kT0);
  s->CloseSession("w", kT0 + kTimeout);
  // The stream is re-opened within the timeout: both leases are kept; a
  // lease id the worker never held is reported lost.
  s->OpenSession("w");
  HeartbeatReply reply = s->Heartbeat("w", {a.lease_id, b.lease_id, 12345}, kT0 + kTimeout);
  EXPECT_EQ(reply.lost, std::vector<uint64_t>{12345});
  EXPECT_EQ(s->ExpireLeases(kT0 + 50 * kTimeout), 0);
  EXPECT_EQ(*s->Complete("w", a.lease_id, kT0 + 50 * kTimeout), CompleteOutcome::kCompleted);
}

TEST(QueueStateSessions, HeartbeatsStillRenewLeasesOfWorkersWithoutSessions) {
  auto s = Make(Config(1));
  WorkItem item = Take(*s, "unary", kT0);
  s->Heartbeat("unary", {item.lease_id}, kT0 + kTimeout - absl::Seconds(1));
  EXPECT_EQ(s->ExpireLeases(kT0 + kTimeout), 0);
  EXPECT_EQ(s->ExpireLeases(kT0 + 2 * kTimeout), 1);
}

// A worker holding an item it reads and one taken ahead; an idle worker asks.
struct TakeAhead {
  std::unique_ptr<QueueState> s;
  WorkItem reading;
  WorkItem ahead;
  absl::Time now;
};

TakeAhead BusyWorkerWithAnItemAhead() {
  TakeAhead t;
  t.s = Make(Config(2, 2));
  t.reading = Take(*t.s, "busy", kT0);
  t.ahead = Take(*t.s, "busy", kT0 + absl::Seconds(1));
  t.now = kT0 + absl::Seconds(10);
  EXPECT_TRUE(t.s->ReportProgress("busy", t.reading.lease_id, 100, t.now).ok());
  return t;
}

TEST(QueueStateTakeAhead, AnUnstartedItemOfABusyWorkerIsProposedAtItsStart) {
  TakeAhead t = BusyWorkerWithAnItemAhead();
  absl::StatusOr<TakeResult> r = t.s->Take("idle", t.now);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outcome, TakeOutcome::kWait);
  EXPECT_EQ(r->proposed_lease, t.ahead.lease_id);
  std::optional<SplitProposal> p = t.s->ProposalFor(t.ahead.lease_id);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->split_point, 0);  // the item's start: all of it
  EXPECT_FALSE(t.s->ProposalFor(t.reading.lease_id).has_value());
  EXPECT_EQ(*t.s->HolderOf(t.ahead.lease_id), "busy");
}

TEST(QueueStateTakeAhead, AnsweringTheStartGivesTheItemBackWholeAsARelease) {
  TakeAhead t = BusyWorkerWithAnItemAhead();
  ASSERT_EQ(t.s->Take("idle", t.now)->proposed_lease, t.ahead.lease_id);
  absl::StatusOr<bool> accepted = t.s->AcceptSplit("busy", t.ahead.lease_id, 0, t.now);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_TRUE(*accepted);
  QueueStats stats = t.s->Stats(t.now);
  // Counted as given back, not as a release (nothing was left unfinished).
  EXPECT_EQ(stats.released, 0);
  EXPECT_EQ(stats.given_back, 1);
  EXPECT_EQ(stats.splits, 0);  // nothing was cut
  EXPECT_EQ(stats.failed, 0);
  // The whole item, unchanged, goes to the idle worker next.
  WorkItem taken = Take(*t.s, "idle", t.now);
  EXPECT_EQ(taken.index, t.ahead.index);
  EXPECT_EQ(taken.item, t.ahead.item);
  // The holder's lease is over; its completion counts nothing.
  EXPECT_FALSE(t.s->ReportProgress("busy", t.ahead.lease_id, 10, t.now).ok());
  EXPECT_EQ(*t.s->Complete("idle", taken.lease_id, t.now), CompleteOutcome::kCompleted);
  EXPECT_EQ(*t.s->Complete("busy", t.reading.lease_id, t.now), CompleteOutcome::kCompleted);
  EXPECT_TRUE(t.s->Finished());
  EXPECT_EQ(t.s->Stats(t.now).completed, 2);
}

TEST(QueueStateTakeAhead, AStartedItemCannotBeGivenBackWhole) {
  TakeAhead t = BusyWorkerWithAnItemAhead();
  ASSERT_TRUE(t.s->ReportProgress("busy", t.ahead.lease_id, 50, t.now).ok());
  absl::StatusOr<bool> accepted = t.s->AcceptSplit("busy", t.ahead.lease_id, 0, t.now);
  EXPECT_EQ(accepted.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(accepted.status().message().find("reading it up to 50"), std::string::npos)
      << accepted.status();
}

TEST(QueueStateTakeAhead, AHolderThatStartedMeanwhileSplitsAtItsReader) {
  TakeAhead t = BusyWorkerWithAnItemAhead();
  ASSERT_EQ(t.s->Take("idle", t.now)->proposed_lease, t.ahead.lease_id);
  absl::StatusOr<bool> accepted = t.s->AcceptSplit("busy", t.ahead.lease_id, 200, t.now);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_TRUE(*accepted);
  EXPECT_EQ(t.s->Stats(t.now).splits, 1);
  EXPECT_EQ(Take(*t.s, "idle", t.now).item, "f1.txt?start=200&end=1000");
}

TEST(QueueStateTakeAhead, AWorkerHoldingOneItemIsSplitAsBefore) {
  auto s = Make(Config(1));
  WorkItem only = Take(*s, "holder", kT0);
  ASSERT_EQ(s->Take("idle", kT0 + absl::Seconds(1))->proposed_lease, only.lease_id);
  std::optional<SplitProposal> p = s->ProposalFor(only.lease_id);
  ASSERT_TRUE(p.has_value());
  EXPECT_GT(p->split_point, 0);  // cut in two, not given back
}

TEST(QueueStateTakeAhead, AGiveBackReplaysFromTheJournal) {
  auto s = Make(Config(2, 2));
  std::vector<journal::Update> updates;
  s->set_update_sink([&](const journal::Update& u) { updates.push_back(u); });
  WorkItem reading = Take(*s, "busy", kT0);
  WorkItem ahead = Take(*s, "busy", kT0);
  ASSERT_TRUE(*s->AcceptSplit("busy", ahead.lease_id, 0, kT0 + absl::Seconds(1)));
  // A second state fed the same updates ends up the same.
  auto replica = Make(Config(2, 2));
  for (const journal::Update& u : updates) ASSERT_TRUE(replica->Apply(u).ok());
  EXPECT_EQ(replica->Stats(kT0).released, 0);
  EXPECT_EQ(replica->Stats(kT0).given_back, 1);
  // And a snapshot keeps the count.
  auto restored = QueueState::FromSnapshot(replica->ToSnapshot(), kT0);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ((*restored)->Stats(kT0).given_back, 1);
  EXPECT_EQ(replica->Stats(kT0).pending, 1);
  EXPECT_EQ(replica->Stats(kT0).leased, 1);
  EXPECT_EQ(*replica->Complete("busy", reading.lease_id, kT0), CompleteOutcome::kCompleted);
}

}  // namespace
}  // namespace shardq
