#include "src/server/coordinator_impl.h"

#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

QueueConfig Config(const std::string& name, int64_t items, int64_t epochs = 1) {
  QueueConfig c;
  c.name = name;
  for (int64_t i = 0; i < items; ++i) c.items.push_back("item-" + std::to_string(i));
  c.num_epochs = epochs;
  c.lease_timeout = absl::Seconds(30);
  return c;
}

TEST(CoordinatorImpl, UnsetSeedIsDrawnOnceAndReported) {
  CoordinatorImpl c;
  absl::StatusOr<QueueInfo> a = c.CreateQueue(Config("q", 4));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->created);
  absl::StatusOr<QueueInfo> b = c.CreateQueue(Config("q", 4));
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->created);
  EXPECT_EQ(a->seed, b->seed);
  EXPECT_EQ(c.Stats("q")->seed, a->seed);
}

TEST(CoordinatorImpl, AttachWithDifferentConfigListsTheFields) {
  CoordinatorImpl c;
  ASSERT_TRUE(c.CreateQueue(Config("q", 4, 2)).ok());
  absl::Status s = c.CreateQueue(Config("q", 4, 3)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("num_epochs (existing 2, requested 3)"), std::string::npos);
  ASSERT_TRUE(c.CreateQueue(Config("other", 1)).ok());  // many queues
  EXPECT_EQ(c.AllStats().size(), 2u);
}

TEST(CoordinatorImpl, ALeaseTimeoutOverADayOrInfiniteIsRefusedAtCreation) {
  // An item whose worker died would wait that long (forever) for another.
  CoordinatorImpl c;
  for (absl::Duration lease :
       {absl::Hours(25), absl::InfiniteDuration(), absl::Seconds(std::nan(""))}) {
    QueueConfig config = Config("q", 2);
    config.lease_timeout = lease;
    absl::Status s = c.CreateQueue(config).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << absl::FormatDuration(lease);
    EXPECT_NE(s.message().find("lease_timeout"), std::string::npos) << s;
    EXPECT_NE(s.message().find("limit of 24h"), std::string::npos) << s;
  }
  QueueConfig day = Config("q", 2);
  day.lease_timeout = absl::Hours(24);
  EXPECT_TRUE(c.CreateQueue(day).ok());
}

TEST(CoordinatorImpl, UnknownQueueIsNotFound) {
  CoordinatorImpl c;
  EXPECT_EQ(c.Take("nope", "w", 1, absl::Now()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(c.Stats("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(CoordinatorImpl, TakeCanReturnSeveralItems) {
  CoordinatorImpl c;
  QueueConfig config = Config("q", 10);
  config.num_clients = 4;
  ASSERT_TRUE(c.CreateQueue(config).ok());
  absl::StatusOr<std::vector<WorkItem>> items = c.Take("q", "w", 8, absl::Now());
  ASSERT_TRUE(items.ok());
  EXPECT_EQ(items->size(), 4u);  // capped by num_clients
}

TEST(CoordinatorImpl, BlockedTakeWakesWhenAnotherWorkerReleases) {
  CoordinatorImpl c;
  ASSERT_TRUE(c.CreateQueue(Config("q", 1)).ok());
  absl::StatusOr<std::vector<WorkItem>> held = c.Take("q", "a", 1, absl::Now());
  ASSERT_EQ(held->size(), 1u);
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE(c.Release("q", "a", (*held)[0].lease_id).ok());
  });
  absl::StatusOr<std::vector<WorkItem>> got =
      c.Take("q", "b", 1, absl::Now() + absl::Seconds(30));
  releaser.join();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].index, (*held)[0].index);
}

// The last failed attempt sets the last item aside: a take blocked on it
// learns at once that the queue finished (with failures).
TEST(CoordinatorImpl, BlockedTakeEndsWhenTheLastItemIsSetAsideAsFailed) {
  CoordinatorImpl c;
  QueueConfig config = Config("q", 1);
  config.max_attempts = 1;
  ASSERT_TRUE(c.CreateQueue(config).ok());
  absl::StatusOr<std::vector<WorkItem>> held = c.Take("q", "a", 1, absl::Now());
  ASSERT_EQ(held->size(), 1u);
  std::thread failer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    absl::StatusOr<bool> set_aside = c.Fail("q", "a", (*held)[0].lease_id, "exit 1");
    ASSERT_TRUE(set_aside.ok()) << set_aside.status();
    EXPECT_TRUE(*set_aside);
  });
  absl::StatusOr<std::vector<WorkItem>> got =
      c.Take("q", "b", 1, absl::Now() + absl::Seconds(30));
  failer.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kOutOfRange) << got.status();
  absl::StatusOr<QueueStats> stats = c.Stats("q");
  EXPECT_TRUE(stats->finished);
  EXPECT_EQ(stats->failed, 1);
  ASSERT_EQ(stats->failed_items.size(), 1u);
  EXPECT_EQ(stats->failed_items[0].reason, "exit 1");
  EXPECT_EQ(c.Fail("q", "b", (*held)[0].lease_id, "").status().code(),
            absl::StatusCode::kNotFound);
}

// Tail rebalancing: a holder's heartbeat held by the coordinator returns
// as soon as a waiting take proposes a split of its item.
TEST(CoordinatorImpl, HeldHeartbeatReturnsWithTheProposalATakeMakes) {
  FakeClock clock;  // rates: slow reads 10 units in 10 s
  CoordinatorImpl c(&clock);
  QueueConfig config = Config("q", 2);
  config.items = {"f?start=0&end=1000", "g?start=0&end=1000"};
  config.shuffle = false;
  ASSERT_TRUE(c.CreateQueue(config).ok());
  std::vector<WorkItem> slow = *c.Take("q", "slow", 1, absl::InfinitePast());
  std::vector<WorkItem> fast = *c.Take("q", "fast", 1, absl::InfinitePast());
  clock.Advance(absl::Seconds(10));
  ASSERT_TRUE(c.ReportProgress("q", "slow", {{slow[0].lease_id, 10}}).ok());
  ASSERT_TRUE(c.Complete("q", "fast", fast[0].lease_id).ok());
  // Nothing is pending now, but no proposal exists yet: the heartbeat waits.
  absl::StatusOr<HeartbeatReply> reply;
  std::thread holder([&] {
    reply = c.Heartbeat("q", "slow", {slow[0].lease_id}, absl::Seconds(30));
  });
  absl::SleepFor(absl::Milliseconds(100));
  // The idle worker's take proposes a split (and waits: nothing to hand out).
  EXPECT_TRUE(c.Take("q", "fast", 1, absl::InfinitePast())->empty());
  holder.join();
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_EQ(reply->splits.size(), 1u);
  EXPECT_EQ(reply->splits[0].lease_id, slow[0].lease_id);
  EXPECT_GT(reply->splits[0].split_point, 10);
  EXPECT_LT(reply->splits[0].split_point, 1000);
}

TEST(CoordinatorImpl, TakeAtDeadlineReturnsNothingWhileItemsAreHeld) {
  CoordinatorImpl c;
  ASSERT_TRUE(c.CreateQueue(Config("q", 1)).ok());
  ASSERT_EQ(c.Take("q", "a", 1, absl::Now())->size(), 1u);
  absl::StatusOr<std::vector<WorkItem>> got =
      c.Take("q", "b", 1, absl::Now() + absl::Milliseconds(20));
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->empty());
}

TEST(CoordinatorImpl, ExpiryUsesTheInjectedClock) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  QueueConfig config = Config("q", 1);
  config.lease_timeout = absl::Seconds(5);
  ASSERT_TRUE(c.CreateQueue(config).ok());
  ASSERT_EQ(c.Take("q", "dead", 1, absl::InfinitePast())->size(), 1u);
  EXPECT_TRUE(c.Take("q", "b", 1, absl::InfinitePast())->empty());
  clock.Advance(absl::Seconds(6));
  absl::StatusOr<std::vector<WorkItem>> got = c.Take("q", "b", 1, absl::InfinitePast());
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(c.Stats("q")->expired, 1);
}

TEST(CoordinatorImpl, EightThreadsCompleteEveryItemOfThreeEpochsExactlyOnce) {
  CoordinatorImpl c;
  QueueConfig config = Config("q", 200, 3);
  ASSERT_TRUE(c.CreateQueue(config).ok());
  std::mutex mu;
  std::map<std::pair<int64_t, int64_t>, int> completions;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      const std::string worker = "w" + std::to_string(t);
      while (true) {
        absl::StatusOr<std::vector<WorkItem>> items =
            c.Take("q", worker, 1, absl::Now() + absl::Seconds(30));
        if (absl::IsOutOfRange(items.status())) return;
        ASSERT_TRUE(items.ok()) << items.status();
        for (const WorkItem& item : *items) {
          absl::StatusOr<CompleteOutcome> o = c.Complete("q", worker, item.lease_id);
          ASSERT_TRUE(o.ok());
          ASSERT_EQ(*o, CompleteOutcome::kCompleted);
          std::lock_guard<std::mutex> lock(mu);
          ++completions[{item.epoch, item.index}];
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(completions.size(), 600u);
  for (const auto& [key, n] : completions) EXPECT_EQ(n, 1);
  absl::StatusOr<QueueStats> stats = c.Stats("q");
  EXPECT_EQ(stats->completed, 600);
  EXPECT_EQ(stats->duplicates, 0);
  EXPECT_TRUE(stats->finished);
}

}  // namespace
}  // namespace shardq
