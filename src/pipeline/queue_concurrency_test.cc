// Many producers and consumers on every queue kind: nothing lost, nothing
// duplicated, whatever the interleaving (run under TSan via
// `make test-tsan`).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "shardq/pipeline/queues.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline {
namespace {

using ::shardq::pipeline::testutil::MakeFifo;
using ::shardq::pipeline::testutil::MakeShuffle;
using ::shardq::pipeline::testutil::ValueOrDie;

// Runs producers (mixing Enqueue and EnqueueMany) and consumers (mixing
// Dequeue, DequeueMany and DequeueUpTo) over `queue` and checks that every
// element 0..n-1 comes out exactly once. `wrap` / `unwrap` convert between
// int and the queue's element type.
template <typename T>
void ExpectEveryElementDeliveredExactlyOnce(
    Queue<T>& queue, const std::function<T(int)>& wrap,
    const std::function<int(const T&)>& unwrap) {
  constexpr int kProducers = 4;
  constexpr int kConsumers = 4;
  constexpr int kPerProducer = 2500;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      int next = p * kPerProducer;
      const int end = next + kPerProducer;
      int batch_size = 1;
      while (next < end) {
        if (batch_size == 1) {
          ASSERT_TRUE(queue.Enqueue(wrap(next++)).ok());
        } else {
          std::vector<T> batch;
          while (next < end && static_cast<int>(batch.size()) < batch_size) {
            batch.push_back(wrap(next++));
          }
          ASSERT_TRUE(queue.EnqueueMany(std::move(batch)).ok());
        }
        batch_size = batch_size % 7 + 1;
      }
    });
  }
  std::vector<std::vector<int>> consumed(kConsumers);
  std::vector<std::thread> consumers;
  for (int c = 0; c < kConsumers; ++c) {
    consumers.emplace_back([&, c] {
      std::vector<int>& mine = consumed[static_cast<size_t>(c)];
      while (true) {
        if (c % 3 == 0) {
          absl::StatusOr<T> value = queue.Dequeue();
          if (!value.ok()) {
            EXPECT_EQ(value.status().code(), absl::StatusCode::kOutOfRange);
            return;
          }
          mine.push_back(unwrap(*value));
          continue;
        }
        // DequeueMany fails at the end when fewer than 3 are left; the
        // DequeueUpTo consumers (and this one, on its retry) get those.
        absl::StatusOr<std::vector<T>> batch =
            c % 3 == 1 ? queue.DequeueMany(3) : queue.DequeueUpTo(5);
        if (!batch.ok()) {
          ASSERT_EQ(batch.status().code(), absl::StatusCode::kOutOfRange);
          batch = queue.DequeueUpTo(3);
          if (!batch.ok()) return;
        }
        for (const T& value : *batch) mine.push_back(unwrap(value));
      }
    });
  }
  for (std::thread& producer : producers) producer.join();
  queue.Close();
  for (std::thread& consumer : consumers) consumer.join();

  std::vector<int> all;
  for (const std::vector<int>& mine : consumed) {
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int> expected(kProducers * kPerProducer);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(all, expected);
  EXPECT_EQ(queue.size(), 0);
}

TEST(QueueConcurrency, FifoDeliversEveryElementExactlyOnce) {
  auto queue = MakeFifo(16);
  ExpectEveryElementDeliveredExactlyOnce<int>(
      *queue, [](int i) { return i; }, [](const int& i) { return i; });
}

TEST(QueueConcurrency, RandomShuffleDeliversEveryElementExactlyOnce) {
  auto queue = MakeShuffle(16, /*min_after_dequeue=*/5);
  ExpectEveryElementDeliveredExactlyOnce<int>(
      *queue, [](int i) { return i; }, [](const int& i) { return i; });
}

TEST(QueueConcurrency, PriorityDeliversEveryElementExactlyOnce) {
  QueueOptions options;
  options.capacity = 16;
  auto queue = ValueOrDie(PriorityQueue<int>::Create(options));
  ExpectEveryElementDeliveredExactlyOnce<Prioritized<int>>(
      *queue,
      [](int i) { return Prioritized<int>{i % 5, i}; },
      [](const Prioritized<int>& e) { return e.value; });
}

TEST(QueueConcurrency, CancelUnblocksAllProducersAndLosesNothingEnqueued) {
  constexpr int kProducers = 8;
  auto queue = MakeFifo(4);
  std::atomic<int64_t> enqueued{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&] {
      while (true) {
        absl::Status status = queue->Enqueue(1);
        if (!status.ok()) {
          EXPECT_TRUE(absl::IsCancelled(status) ||
                      absl::IsFailedPrecondition(status))
              << status;
          return;
        }
        enqueued.fetch_add(1);
      }
    });
  }
  int64_t dequeued = 0;
  for (int i = 0; i < 200; ++i) dequeued += ValueOrDie(queue->Dequeue());
  queue->Close(/*cancel_pending=*/true);
  for (std::thread& producer : producers) producer.join();
  while (true) {
    absl::StatusOr<int> value = queue->Dequeue();
    if (!value.ok()) break;
    dequeued += *value;
  }
  EXPECT_EQ(dequeued, enqueued.load());
}

TEST(QueueConcurrency, TimeoutsUnderContentionNeitherLoseNorDuplicate) {
  constexpr int kThreads = 4;
  constexpr int kPerProducer = 500;
  auto queue = MakeFifo(2);
  std::vector<std::thread> threads;
  std::atomic<int64_t> produced_sum{0};
  std::atomic<int64_t> consumed_sum{0};
  std::atomic<int> producers_left{kThreads};
  for (int p = 0; p < kThreads; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) {
        const int value = p * kPerProducer + i;
        // A timed-out Enqueue drops its element: retry with a copy.
        while (!queue->Enqueue(value, absl::Microseconds(50)).ok()) {
        }
        produced_sum.fetch_add(value);
      }
      if (producers_left.fetch_sub(1) == 1) queue->Close();
    });
    threads.emplace_back([&] {
      while (true) {
        absl::StatusOr<int> value = queue->Dequeue(absl::Microseconds(50));
        if (value.ok()) {
          consumed_sum.fetch_add(*value);
        } else if (absl::IsOutOfRange(value.status())) {
          return;
        } else {
          ASSERT_TRUE(absl::IsDeadlineExceeded(value.status()))
              << value.status();
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const int64_t n = kThreads * kPerProducer;
  EXPECT_EQ(produced_sum.load(), n * (n - 1) / 2);
  EXPECT_EQ(consumed_sum.load(), produced_sum.load());
}

}  // namespace
}  // namespace shardq::pipeline
