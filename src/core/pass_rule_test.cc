// OnlySiblingsHoldTheRest: when a DataLoader worker ends its pass; and
// QueueState::PassOver, the coordinator's answer to the same question.
#include "src/core/pass_rule.h"

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace {

QueueStats Held(std::initializer_list<std::pair<const char*, int64_t>> holders) {
  QueueStats s;
  s.num_items = 8;
  s.num_epochs = 1;
  for (const auto& [worker, held] : holders) {
    s.workers[worker].held = held;
    s.leased += held;
  }
  return s;
}

TEST(PassRule, EndsWhenSiblingsHoldEveryOpenItem) {
  EXPECT_TRUE(OnlySiblingsHoldTheRest(Held({{"job/w1", 1}, {"job/w2", 2}, {"job/w0", 0}}),
                                      "job/w0", "job/"));
}

TEST(PassRule, WaitsWhileAnythingIsPendingOrTheQueueIsFinished) {
  QueueStats s = Held({{"job/w1", 1}});
  s.pending = 1;
  EXPECT_FALSE(OnlySiblingsHoldTheRest(s, "job/w0", "job/"));
  s = Held({{"job/w1", 1}});
  s.finished = true;
  EXPECT_FALSE(OnlySiblingsHoldTheRest(s, "job/w0", "job/"));
}

TEST(PassRule, WaitsWhenItHoldsAnItselfOrAnOutsiderHoldsOne) {
  EXPECT_FALSE(OnlySiblingsHoldTheRest(Held({{"job/w0", 1}, {"job/w1", 1}}), "job/w0", "job/"));
  EXPECT_FALSE(OnlySiblingsHoldTheRest(Held({{"other/w1", 1}, {"job/w1", 1}}), "job/w0",
                                       "job/"));
}

// Two ranks, each with a parked worker holding items and a starving one:
// each starving worker ends its pass, so that each rank's loop goes on to
// its parked worker (waiting for the other rank's items would close a
// cycle: that rank's loop waits for its own starving worker).
TEST(PassRule, EndsWhenALiveWorkerOfAnotherRankHoldsTheRest) {
  QueueStats s = Held({{"rank0/w0", 2}, {"rank1/w1", 3}});
  s.workers["rank0/w0"].sessions = 1;
  s.workers["rank1/w1"].sessions = 1;
  EXPECT_TRUE(OnlySiblingsHoldTheRest(s, "rank0/w1", "rank0/"));
  EXPECT_TRUE(OnlySiblingsHoldTheRest(s, "rank1/w0", "rank1/"));
  // An outsider whose client is gone (no session): its lease will expire
  // and the item come back, so the worker waits to read it.
  s.workers["rank1/w1"].sessions = 0;
  EXPECT_FALSE(OnlySiblingsHoldTheRest(s, "rank0/w1", "rank0/"));
}

TEST(PassRule, WaitsWhenNothingIsHeld) {
  EXPECT_FALSE(OnlySiblingsHoldTheRest(Held({}), "job/w0", "job/"));
}

// The end-of-pass fix: a range split off a sibling's item is counted in no
// epoch (neither pending nor leased). While nobody holds it, it is the
// asking worker's to take, so the worker must not end its pass: counting
// only the epochs' leases would end it and leave the range to no one.
TEST(PassRule, ASplitOffRangeNobodyHoldsKeepsTheWorkerWaiting) {
  QueueStats s = Held({{"job/w1", 1}});
  s.splits = 1;
  s.split_items_open = 1;  // split off w1's item, pending, held by nobody
  EXPECT_FALSE(OnlySiblingsHoldTheRest(s, "job/w0", "job/"));
  // Once a sibling holds the range too, the rest is theirs: end the pass.
  s.workers["job/w2"].held = 1;
  EXPECT_TRUE(OnlySiblingsHoldTheRest(s, "job/w0", "job/"));
}

// QueueState::PassOver keeps its own index of holders without a session;
// it must answer as the rule over Stats() does after every kind of change:
// grants, completions, releases, splits, expiries, sessions opening and
// closing, and a restore from a snapshot (sessions are soft state: none
// survives it). Random operations from a fixed seed, checked after each.
TEST(PassOver, AnswersAsTheRuleOverStatsAfterEveryChange) {
  const std::vector<std::string> workers = {"a/w0", "a/w1", "b/w0", "b/w1"};
  const std::vector<std::string> prefixes = {"a/", "b/", ""};
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const absl::Duration timeout = absl::Seconds(30);
  int64_t over = 0, waits = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    QueueConfig c;
    c.name = "q";
    for (int i = 0; i < 5; ++i) c.items.push_back(absl::StrCat("f", i, ".txt?start=0&end=1000"));
    c.seed = seed;
    c.num_epochs = 2;
    c.num_clients = 2;
    c.lease_timeout = timeout;
    c.split_min_residual = 10;
    absl::StatusOr<std::unique_ptr<QueueState>> made = QueueState::Create(c);
    ASSERT_TRUE(made.ok()) << made.status();
    std::unique_ptr<QueueState> s = *std::move(made);
    std::mt19937 rng(seed);
    std::map<std::string, int> sessions;  // open per worker, as the state has them
    absl::Time now = t0;
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    for (int step = 0; step < 300 && !s->Finished(); ++step) {
      const std::string& w = workers[pick(workers.size())];
      std::vector<uint64_t> held = s->LeasesHeldBy(w);
      const uint64_t lease = held.empty() ? 0 : held[pick(held.size())];
      switch (pick(9)) {
        case 0:
        case 1: {
          absl::StatusOr<TakeResult> r = s->Take(w, now);
          if (r.ok() && r->proposed_lease != 0) {
            std::optional<SplitProposal> p = s->ProposalFor(r->proposed_lease);
            const std::string* holder = s->HolderOf(r->proposed_lease);
            if (p.has_value() && holder != nullptr) {
              (void)s->AcceptSplit(*holder, r->proposed_lease, p->split_point, now);
            }
          }
          break;
        }
        case 2:
        case 3:
          if (lease != 0) (void)s->Complete(w, lease, now);
          break;
        case 4:
          if (lease != 0) (void)s->Release(w, lease, now);
          break;
        case 5:
          s->OpenSession(w);
          ++sessions[w];
          break;
        case 6:
          if (sessions[w] > 0) {
            s->CloseSession(w, now);
            --sessions[w];
          }
          break;
        case 7:
          now += timeout / 2 + absl::Seconds(pick(30));
          s->ExpireLeases(now);
          break;
        case 8:
          if (pick(4) == 0) {
            absl::StatusOr<std::unique_ptr<QueueState>> back =
                QueueState::FromSnapshot(s->ToSnapshot(), now);
            ASSERT_TRUE(back.ok()) << back.status();
            s = *std::move(back);
            sessions.clear();
          }
          break;
      }
      const QueueStats stats = s->Stats(now);
      for (const std::string& self : workers) {
        for (const std::string& prefix : prefixes) {
          const bool rule = OnlySiblingsHoldTheRest(stats, self, prefix);
          ASSERT_EQ(s->PassOver(self, prefix), rule)
              << "seed " << seed << " step " << step << " self " << self << " prefix '"
              << prefix << "'";
          (rule ? over : waits) += 1;
        }
      }
    }
  }
  // Both answers were met many times (the check above is not vacuous).
  EXPECT_GT(over, 100);
  EXPECT_GT(waits, 100);
}

}  // namespace
}  // namespace shardq
