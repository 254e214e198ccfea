// Helpers shared by the pipeline tests.
#ifndef SHARDQ_SRC_PIPELINE_TEST_UTIL_H_
#define SHARDQ_SRC_PIPELINE_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "shardq/pipeline/queues.h"

namespace shardq::pipeline::testutil {

// For "must not happen" waits only; never reached when the code is right.
inline constexpr absl::Duration kGenerous = absl::Seconds(30);
// For "this call must time out" checks; short so the suites stay fast.
inline constexpr absl::Duration kShort = absl::Milliseconds(10);

template <typename T>
T ValueOrDie(absl::StatusOr<T> value) {
  if (!value.ok()) {
    ADD_FAILURE() << value.status();
    std::abort();
  }
  return *std::move(value);
}

// Polls `condition` (e.g. "a producer is blocked") so that a test acts
// only once another thread has reached a known state. False after
// kGenerous.
inline bool Eventually(const std::function<bool()>& condition) {
  const absl::Time limit = absl::Now() + kGenerous;
  while (!condition()) {
    if (absl::Now() > limit) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

inline std::unique_ptr<FifoQueue<int>> MakeFifo(int64_t capacity,
                                                std::string name = "fifo") {
  QueueOptions options;
  options.name = std::move(name);
  options.capacity = capacity;
  return ValueOrDie(FifoQueue<int>::Create(options));
}

inline std::unique_ptr<RandomShuffleQueue<int>> MakeShuffle(
    int64_t capacity, int64_t min_after_dequeue, uint64_t seed = 7) {
  RandomShuffleQueueOptions options;
  options.name = "shuffle";
  options.capacity = capacity;
  options.min_after_dequeue = min_after_dequeue;
  options.seed = seed;
  return ValueOrDie(RandomShuffleQueue<int>::Create(options));
}

}  // namespace shardq::pipeline::testutil

#endif  // SHARDQ_SRC_PIPELINE_TEST_UTIL_H_
