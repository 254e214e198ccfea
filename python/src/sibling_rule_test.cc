// OnlySiblingsHoldTheRest: when a DataLoader worker ends its pass.
#include "python/src/sibling_rule.h"

#include "gtest/gtest.h"

namespace shardq::python {
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

TEST(SiblingRule, EndsWhenSiblingsHoldEveryOpenItem) {
  EXPECT_TRUE(OnlySiblingsHoldTheRest(Held({{"job/w1", 1}, {"job/w2", 2}, {"job/w0", 0}}),
                                      "job/w0", "job/"));
}

TEST(SiblingRule, WaitsWhileAnythingIsPendingOrTheQueueIsFinished) {
  QueueStats s = Held({{"job/w1", 1}});
  s.pending = 1;
  EXPECT_FALSE(OnlySiblingsHoldTheRest(s, "job/w0", "job/"));
  s = Held({{"job/w1", 1}});
  s.finished = true;
  EXPECT_FALSE(OnlySiblingsHoldTheRest(s, "job/w0", "job/"));
}

TEST(SiblingRule, WaitsWhenItHoldsAnItselfOrAnOutsiderHoldsOne) {
  EXPECT_FALSE(OnlySiblingsHoldTheRest(Held({{"job/w0", 1}, {"job/w1", 1}}), "job/w0", "job/"));
  EXPECT_FALSE(OnlySiblingsHoldTheRest(Held({{"other/w1", 1}, {"job/w1", 1}}), "job/w0",
                                       "job/"));
}

// Two ranks, each with a parked worker holding items and a starving one:
// each starving worker ends its pass, so that each rank's loop goes on to
// its parked worker (waiting for the other rank's items would close a
// cycle: that rank's loop waits for its own starving worker).
TEST(SiblingRule, EndsWhenALiveWorkerOfAnotherRankHoldsTheRest) {
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

TEST(SiblingRule, WaitsWhenNothingIsHeld) {
  EXPECT_FALSE(OnlySiblingsHoldTheRest(Held({}), "job/w0", "job/"));
}

// The end-of-pass fix: a range split off a sibling's item is counted in no
// epoch (neither pending nor leased). While nobody holds it, it is the
// asking worker's to take, so the worker must not end its pass: counting
// only the epochs' leases would end it and leave the range to no one.
TEST(SiblingRule, ASplitOffRangeNobodyHoldsKeepsTheWorkerWaiting) {
  QueueStats s = Held({{"job/w1", 1}});
  s.splits = 1;
  s.split_items_open = 1;  // split off w1's item, pending, held by nobody
  EXPECT_FALSE(OnlySiblingsHoldTheRest(s, "job/w0", "job/"));
  // Once a sibling holds the range too, the rest is theirs: end the pass.
  s.workers["job/w2"].held = 1;
  EXPECT_TRUE(OnlySiblingsHoldTheRest(s, "job/w0", "job/"));
}

}  // namespace
}  // namespace shardq::python
