#include "shardq/pipeline/queues.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline {
namespace {

using ::shardq::pipeline::testutil::Eventually;
using ::shardq::pipeline::testutil::kGenerous;
using ::shardq::pipeline::testutil::kShort;
using ::shardq::pipeline::testutil::MakeFifo;
using ::shardq::pipeline::testutil::MakeShuffle;
using ::shardq::pipeline::testutil::ValueOrDie;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::unique_ptr<PriorityQueue<std::string>> MakePriority(int64_t capacity) {
  QueueOptions options;
  options.name = "priority";
  options.capacity = capacity;
  return ValueOrDie(PriorityQueue<std::string>::Create(options));
}

// ---------------------------------------------------------------- FIFO

TEST(FifoQueue, DequeuesInEnqueueOrder) {
  auto queue = MakeFifo(10);
  ASSERT_TRUE(queue->Enqueue(1).ok());
  ASSERT_TRUE(queue->Enqueue(2).ok());
  ASSERT_TRUE(queue->EnqueueMany({3, 4, 5}).ok());
  EXPECT_EQ(queue->size(), 5);

  EXPECT_EQ(ValueOrDie(queue->Dequeue()), 1);
  EXPECT_THAT(ValueOrDie(queue->DequeueMany(2)), ElementsAre(2, 3));
  EXPECT_THAT(ValueOrDie(queue->DequeueUpTo(2)), ElementsAre(4, 5));
  EXPECT_EQ(queue->size(), 0);
  EXPECT_EQ(queue->capacity(), 10);
  EXPECT_EQ(queue->name(), "fifo");
  EXPECT_FALSE(queue->closed());
}

TEST(FifoQueue, CreateRejectsBadOptionsNamingTheField) {
  QueueOptions options;
  options.name = "records";
  options.capacity = 0;
  absl::Status status = FifoQueue<int>::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("records"));
  EXPECT_THAT(status.message(), HasSubstr("capacity"));

  options.capacity = 1;
  options.name = "";
  EXPECT_EQ(FifoQueue<int>::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FifoQueue, EnqueueOnFullQueueTimesOutWithDeadlineExceeded) {
  auto queue = MakeFifo(2, "records");
  ASSERT_TRUE(queue->EnqueueMany({1, 2}).ok());

  absl::Status status = queue->Enqueue(3, kShort);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("'records'"));
  EXPECT_EQ(queue->size(), 2);
  EXPECT_EQ(queue->num_waiting_producers(), 0);
  EXPECT_THAT(ValueOrDie(queue->DequeueMany(2)), ElementsAre(1, 2));
}

TEST(FifoQueue, DequeueOnEmptyQueueTimesOutWithDeadlineExceeded) {
  auto queue = MakeFifo(2, "records");
  absl::StatusOr<int> value = queue->Dequeue(kShort);
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(value.status().message(), HasSubstr("'records'"));
  EXPECT_EQ(queue->num_waiting_consumers(), 0);
}

TEST(FifoQueue, ZeroTimeoutPollsWithoutBlocking) {
  auto queue = MakeFifo(1);
  EXPECT_TRUE(queue->Enqueue(1, absl::ZeroDuration()).ok());
  EXPECT_EQ(queue->Enqueue(2, absl::ZeroDuration()).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ValueOrDie(queue->Dequeue(absl::ZeroDuration())), 1);
  EXPECT_EQ(queue->Dequeue(absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(FifoQueue, BlockedProducerCompletesWhenAConsumerMakesRoom) {
  auto queue = MakeFifo(1);
  ASSERT_TRUE(queue->Enqueue(1).ok());
  absl::Status produced;
  std::thread producer([&] { produced = queue->Enqueue(2); });
  ASSERT_TRUE(Eventually([&] { return queue->num_waiting_producers() == 1; }));

  EXPECT_EQ(ValueOrDie(queue->Dequeue()), 1);
  producer.join();
  EXPECT_TRUE(produced.ok()) << produced;
  EXPECT_EQ(ValueOrDie(queue->Dequeue()), 2);
}

TEST(FifoQueue, EnqueueAfterCloseFailsWithFailedPreconditionNamingQueue) {
  auto queue = MakeFifo(4, "records");
  queue->Close();
  EXPECT_TRUE(queue->closed());
  absl::Status status = queue->Enqueue(1);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("'records'"));
  EXPECT_THAT(status.message(), HasSubstr("closed"));
  EXPECT_EQ(queue->EnqueueMany({}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(FifoQueue, CloseLetsConsumersDrainThenReturnsOutOfRange) {
  auto queue = MakeFifo(4, "records");
  ASSERT_TRUE(queue->EnqueueMany({1, 2}).ok());
  queue->Close();

  EXPECT_EQ(ValueOrDie(queue->Dequeue()), 1);
  EXPECT_EQ(ValueOrDie(queue->Dequeue()), 2);
  absl::StatusOr<int> end = queue->Dequeue();
  EXPECT_EQ(end.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(end.status().message(), HasSubstr("'records'"));
  // End of input is sticky.
  EXPECT_EQ(queue->Dequeue().status().code(), absl::StatusCode::kOutOfRange);
}

TEST(FifoQueue, CloseWakesBlockedConsumerWithOutOfRange) {
  auto queue = MakeFifo(4);
  absl::StatusOr<int> consumed;
  std::thread consumer([&] { consumed = queue->Dequeue(); });
  ASSERT_TRUE(Eventually([&] { return queue->num_waiting_consumers() == 1; }));

  queue->Close();
  consumer.join();
  EXPECT_EQ(consumed.status().code(), absl::StatusCode::kOutOfRange);
}

TEST(FifoQueue, CloseWithCancelPendingWakesBlockedProducersWithCancelled) {
  auto queue = MakeFifo(1, "records");
  ASSERT_TRUE(queue->Enqueue(1).ok());
  absl::Status first, second;
  std::thread producer1([&] { first = queue->Enqueue(2); });
  std::thread producer2([&] { second = queue->EnqueueMany({3, 4}); });
  ASSERT_TRUE(Eventually([&] { return queue->num_waiting_producers() == 2; }));

  queue->Close(/*cancel_pending=*/true);
  producer1.join();
  producer2.join();
  EXPECT_EQ(first.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(second.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(second.message(), HasSubstr("'records'"));
  EXPECT_THAT(second.message(), HasSubstr("0 of 2"));
  // What was enqueued before the cancel is still delivered.
  EXPECT_EQ(ValueOrDie(queue->Dequeue()), 1);
  EXPECT_EQ(queue->Dequeue().status().code(), absl::StatusCode::kOutOfRange);
}

TEST(FifoQueue, CloseWithoutCancelLetsBlockedProducerFinish) {
  auto queue = MakeFifo(1);
  ASSERT_TRUE(queue->Enqueue(1).ok());
  absl::Status produced;
  std::thread producer([&] { produced = queue->Enqueue(2); });
  ASSERT_TRUE(Eventually([&] { return queue->num_waiting_producers() == 1; }));

  queue->Close();
  EXPECT_EQ(ValueOrDie(queue->Dequeue()), 1);
  // The queue is closed and momentarily empty, but the pending producer
  // still delivers its element.
  EXPECT_EQ(ValueOrDie(queue->Dequeue(kGenerous)), 2);
  producer.join();
  EXPECT_TRUE(produced.ok()) << produced;
  EXPECT_EQ(queue->Dequeue().status().code(), absl::StatusCode::kOutOfRange);
}

TEST(FifoQueue, LaterCloseWithCancelCancelsProducersStillBlocked) {
  auto queue = MakeFifo(1);
  ASSERT_TRUE(queue->Enqueue(1).ok());
  absl::Status produced;
  std::thread producer([&] { produced = queue->Enqueue(2); });
  ASSERT_TRUE(Eventually([&] { return queue->num_waiting_producers() == 1; }));

  queue->Close();
  queue->Close(/*cancel_pending=*/true);
  producer.join();
  EXPECT_EQ(produced.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(queue->size(), 1);
}

TEST(FifoQueue, TimedOutEnqueueManyReportsHowManyElementsWereEnqueued) {
  auto queue = MakeFifo(3, "records");
  absl::Status status = queue->EnqueueMany({1, 2, 3, 4, 5}, kShort);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("3 of 5"));
  EXPECT_THAT(ValueOrDie(queue->DequeueMany(3)), ElementsAre(1, 2, 3));
}

TEST(FifoQueue, EnqueueManyLargerThanCapacityCompletesAsConsumersDrain) {
  auto queue = MakeFifo(2);
  std::vector<int> values(10);
  std::iota(values.begin(), values.end(), 0);
  absl::Status produced;
  std::thread producer([&] { produced = queue->EnqueueMany(values); });

  std::vector<int> consumed;
  for (int i = 0; i < 5; ++i) {
    std::vector<int> batch = ValueOrDie(queue->DequeueMany(2, kGenerous));
    consumed.insert(consumed.end(), batch.begin(), batch.end());
  }
  producer.join();
  EXPECT_TRUE(produced.ok()) << produced;
  EXPECT_EQ(consumed, values);
}

TEST(FifoQueue, DequeueManyWaitsForExactlyNAndRemovesNothingOnTimeout) {
  auto queue = MakeFifo(4);
  ASSERT_TRUE(queue->EnqueueMany({1, 2}).ok());
  absl::StatusOr<std::vector<int>> batch = queue->DequeueMany(3, kShort);
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(queue->size(), 2);

  ASSERT_TRUE(queue->Enqueue(3).ok());
  EXPECT_THAT(ValueOrDie(queue->DequeueMany(3)), ElementsAre(1, 2, 3));
}

TEST(FifoQueue, DequeueManyAfterCloseWithTooFewLeftFailsAndRemovesNothing) {
  auto queue = MakeFifo(8, "records");
  ASSERT_TRUE(queue->EnqueueMany({1, 2, 3}).ok());
  queue->Close();

  absl::StatusOr<std::vector<int>> batch = queue->DequeueMany(5);
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(batch.status().message(), HasSubstr("'records'"));
  EXPECT_THAT(batch.status().message(), HasSubstr("3 elements left"));
  EXPECT_EQ(queue->size(), 3);
  // The short last batch is read with DequeueUpTo.
  EXPECT_THAT(ValueOrDie(queue->DequeueUpTo(5)), ElementsAre(1, 2, 3));
  EXPECT_EQ(queue->DequeueUpTo(5).status().code(),
            absl::StatusCode::kOutOfRange);
}

TEST(FifoQueue, DequeueUpToWaitsForNWhileOpen) {
  auto queue = MakeFifo(8);
  ASSERT_TRUE(queue->EnqueueMany({1, 2}).ok());
  EXPECT_EQ(queue->DequeueUpTo(3, kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(queue->size(), 2);
}

TEST(FifoQueue, CloseWakesBlockedDequeueUpToWithWhatIsLeft) {
  auto queue = MakeFifo(8);
  ASSERT_TRUE(queue->EnqueueMany({1, 2}).ok());
  absl::StatusOr<std::vector<int>> batch;
  std::thread consumer([&] { batch = queue->DequeueUpTo(5); });
  ASSERT_TRUE(Eventually([&] { return queue->num_waiting_consumers() == 1; }));

  queue->Close();
  consumer.join();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_THAT(*batch, ElementsAre(1, 2));
}

TEST(FifoQueue, DequeueCountOutsideZeroToCapacityIsInvalidArgument) {
  auto queue = MakeFifo(4, "records");
  absl::Status too_many = queue->DequeueMany(5).status();
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.message(), HasSubstr("'records'"));
  EXPECT_EQ(queue->DequeueUpTo(5).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(queue->DequeueMany(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValueOrDie(queue->DequeueMany(0, absl::ZeroDuration())).empty());
}

TEST(FifoQueue, WaitingConsumersAreServedInArrivalOrder) {
  auto queue = MakeFifo(8);
  absl::StatusOr<std::vector<int>> batch;
  absl::StatusOr<int> single;
  std::thread first([&] { batch = queue->DequeueMany(3); });
  ASSERT_TRUE(Eventually([&] { return queue->num_waiting_consumers() == 1; }));
  std::thread second([&] { single = queue->Dequeue(); });
  ASSERT_TRUE(Eventually([&] { return queue->num_waiting_consumers() == 2; }));

  // Without turns the single Dequeue would grab element 0.
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(queue->Enqueue(i).ok());
  first.join();
  second.join();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_THAT(*batch, ElementsAre(0, 1, 2));
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_EQ(*single, 3);
}

TEST(FifoQueue, EnqueueManyElementsAreNotInterleavedWithOtherProducers) {
  constexpr int kProducers = 4;
  constexpr int kBatches = 50;
  constexpr int kBatchSize = 7;  // larger than the capacity: added in parts
  auto queue = MakeFifo(5);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int b = 0; b < kBatches; ++b) {
        std::vector<int> batch;
        for (int i = 0; i < kBatchSize; ++i) {
          batch.push_back((p * kBatches + b) * kBatchSize + i);
        }
        EXPECT_TRUE(queue->EnqueueMany(std::move(batch)).ok());
      }
    });
  }
  std::vector<int> consumed;
  for (int i = 0; i < kProducers * kBatches * kBatchSize; ++i) {
    consumed.push_back(ValueOrDie(queue->Dequeue(kGenerous)));
  }
  for (std::thread& producer : producers) producer.join();

  for (size_t i = 0; i < consumed.size(); i += kBatchSize) {
    ASSERT_EQ(consumed[i] % kBatchSize, 0) << "batch split at " << i;
    for (int k = 1; k < kBatchSize; ++k) {
      ASSERT_EQ(consumed[i + k], consumed[i] + k) << "interleaved at " << i;
    }
  }
}

TEST(FifoQueue, HoldsMoveOnlyElements) {
  QueueOptions options;
  options.capacity = 4;
  auto queue = ValueOrDie(FifoQueue<std::unique_ptr<int>>::Create(options));
  ASSERT_TRUE(queue->Enqueue(std::make_unique<int>(1)).ok());
  std::vector<std::unique_ptr<int>> many;
  many.push_back(std::make_unique<int>(2));
  ASSERT_TRUE(queue->EnqueueMany(std::move(many)).ok());
  EXPECT_EQ(*ValueOrDie(queue->Dequeue()), 1);
  EXPECT_EQ(*ValueOrDie(queue->DequeueUpTo(1)).front(), 2);
}

// ------------------------------------------------------ random shuffle

TEST(RandomShuffleQueue, CreateRejectsMinAfterDequeueOutsideZeroToCapacity) {
  RandomShuffleQueueOptions options;
  options.name = "buffer";
  options.capacity = 4;
  options.min_after_dequeue = 4;
  absl::Status status = RandomShuffleQueue<int>::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("min_after_dequeue"));
  EXPECT_THAT(status.message(), HasSubstr("'buffer'"));

  options.min_after_dequeue = -1;
  EXPECT_EQ(RandomShuffleQueue<int>::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RandomShuffleQueue, DequeueWaitsWhileSizeIsAtMostMinAfterDequeue) {
  auto queue = MakeShuffle(10, /*min_after_dequeue=*/3);
  ASSERT_TRUE(queue->EnqueueMany({0, 1, 2}).ok());
  EXPECT_EQ(queue->Dequeue(kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  ASSERT_TRUE(queue->Enqueue(3).ok());
  EXPECT_TRUE(queue->Dequeue(absl::ZeroDuration()).ok());
  EXPECT_EQ(queue->size(), 3);
  EXPECT_EQ(queue->min_after_dequeue(), 3);
}

TEST(RandomShuffleQueue, DequeueManyLeavesMinAfterDequeueBehind) {
  auto queue = MakeShuffle(10, /*min_after_dequeue=*/3);
  ASSERT_TRUE(queue->EnqueueMany({0, 1, 2, 3, 4}).ok());
  EXPECT_EQ(queue->DequeueMany(3, kShort).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(ValueOrDie(queue->DequeueMany(2)).size(), 2u);
  EXPECT_EQ(queue->size(), 3);
}

TEST(RandomShuffleQueue, CloseDrainsEverythingBelowMinAfterDequeue) {
  auto queue = MakeShuffle(10, /*min_after_dequeue=*/3);
  ASSERT_TRUE(queue->EnqueueMany({0, 1, 2}).ok());
  queue->Close();
  EXPECT_THAT(ValueOrDie(queue->DequeueUpTo(7)), UnorderedElementsAre(0, 1, 2));
  EXPECT_EQ(queue->Dequeue().status().code(), absl::StatusCode::kOutOfRange);
}

TEST(RandomShuffleQueue, DequeueManyBeyondCapacityMinusMinAfterDequeueIsInvalid) {
  auto queue = MakeShuffle(10, /*min_after_dequeue=*/4);
  absl::Status status = queue->DequeueMany(7).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("capacity"));

  for (int i = 0; i < 10; ++i) ASSERT_TRUE(queue->Enqueue(i).ok());
  EXPECT_EQ(ValueOrDie(queue->DequeueMany(6)).size(), 6u);
}

// Streams 0..n-1 through a shuffle buffer from one thread, as a pipeline
// stage does, and returns the order that comes out.
std::vector<int> StreamThroughShuffle(uint64_t seed, int n) {
  auto queue = MakeShuffle(16, /*min_after_dequeue=*/8, seed);
  std::vector<int> order;
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(queue->Enqueue(i).ok());
    if (queue->size() > 8) order.push_back(ValueOrDie(queue->Dequeue()));
  }
  queue->Close();
  while (true) {
    absl::StatusOr<int> value = queue->Dequeue();
    if (!value.ok()) break;
    order.push_back(*value);
  }
  return order;
}

TEST(RandomShuffleQueue, SameSeedGivesSameOrder) {
  std::vector<int> first = StreamThroughShuffle(/*seed=*/42, 100);
  EXPECT_EQ(StreamThroughShuffle(/*seed=*/42, 100), first);

  std::vector<int> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> identity(100);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(sorted, identity);  // a permutation...
  EXPECT_NE(first, identity);   // ...that is actually shuffled
}

TEST(RandomShuffleQueue, DifferentSeedsGiveDifferentOrders) {
  EXPECT_NE(StreamThroughShuffle(/*seed=*/1, 100),
            StreamThroughShuffle(/*seed=*/2, 100));
}

TEST(RandomShuffleQueue, OrderForAFixedSeedIsPinned) {
  // The order is part of the contract (identical on every machine): it
  // follows from SplitMix64 and the swap-with-last removal, and was checked
  // against an independent model of both. A change here changes every
  // seeded run.
  std::vector<int> order = StreamThroughShuffle(/*seed=*/42, 20);
  EXPECT_THAT(order, ElementsAre(1, 8, 0, 10, 7, 6, 9, 5, 14, 2, 18, 12, 13,
                                 4, 17, 11, 16, 19, 3, 15));
}

// ------------------------------------------------------------ priority

TEST(PriorityQueue, DequeuesSmallestPriorityFirst) {
  auto queue = MakePriority(8);
  ASSERT_TRUE(queue->Enqueue({5, "five"}).ok());
  ASSERT_TRUE(queue->Enqueue({-3, "minus three"}).ok());
  ASSERT_TRUE(queue->EnqueueMany({{10, "ten"}, {0, "zero"}}).ok());

  std::vector<Prioritized<std::string>> all =
      ValueOrDie(queue->DequeueMany(4));
  std::vector<std::string> values;
  std::vector<int64_t> priorities;
  for (const auto& element : all) {
    priorities.push_back(element.priority);
    values.push_back(element.value);
  }
  EXPECT_THAT(priorities, ElementsAre(-3, 0, 5, 10));
  EXPECT_THAT(values, ElementsAre("minus three", "zero", "five", "ten"));
}

TEST(PriorityQueue, EqualPrioritiesDequeueInEnqueueOrder) {
  auto queue = MakePriority(16);
  ASSERT_TRUE(queue
                  ->EnqueueMany({{1, "a"}, {0, "b"}, {1, "c"}, {0, "d"},
                                 {1, "e"}})
                  .ok());
  EXPECT_EQ(ValueOrDie(queue->Dequeue()).value, "b");
  // Arrivals after a dequeue still queue behind earlier equals.
  ASSERT_TRUE(queue->Enqueue({0, "f"}).ok());
  ASSERT_TRUE(queue->Enqueue({1, "g"}).ok());
  queue->Close();
  std::vector<std::string> rest;
  while (true) {
    absl::StatusOr<Prioritized<std::string>> element = queue->Dequeue();
    if (!element.ok()) break;
    rest.push_back(element->value);
  }
  EXPECT_THAT(rest, ElementsAre("d", "f", "a", "c", "e", "g"));
}

}  // namespace
}  // namespace shardq::pipeline
