#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardq/pipeline/coordinator.h"
#include "shardq/pipeline/queues.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline {
namespace {

using ::shardq::pipeline::testutil::Eventually;
using ::shardq::pipeline::testutil::kGenerous;
using ::shardq::pipeline::testutil::MakeFifo;
using ::shardq::pipeline::testutil::ValueOrDie;
using ::testing::HasSubstr;

// Counts up from `start` to `end` (exclusive), then reports exhaustion.
QueueRunner<int>::Producer CountingProducer(int start, int end) {
  auto next = std::make_shared<int>(start);
  return [next, end]() -> absl::StatusOr<std::optional<int>> {
    if (*next == end) return std::optional<int>();
    return std::optional<int>((*next)++);
  };
}

QueueRunner<int>::Producer EndlessProducer() {
  return []() -> absl::StatusOr<std::optional<int>> {
    return std::optional<int>(1);
  };
}

std::vector<int> DrainUntilOutOfRange(Queue<int>& queue) {
  std::vector<int> values;
  while (true) {
    absl::StatusOr<int> value = queue.Dequeue(kGenerous);
    if (!value.ok()) {
      EXPECT_EQ(value.status().code(), absl::StatusCode::kOutOfRange)
          << value.status();
      return values;
    }
    values.push_back(*value);
  }
}

TEST(QueueRunner, ClosesTheQueueWhenAllProducersAreExhausted) {
  auto queue = MakeFifo(8);
  ThreadCoordinator coordinator;
  auto runner = ValueOrDie(QueueRunner<int>::Create(
      queue.get(), {CountingProducer(0, 100), CountingProducer(100, 200),
                    CountingProducer(200, 300)}));
  ASSERT_TRUE(runner->Start(&coordinator).ok());

  std::vector<int> values = DrainUntilOutOfRange(*queue);
  std::sort(values.begin(), values.end());
  std::vector<int> expected(300);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(values, expected);
  EXPECT_TRUE(queue->closed());
  EXPECT_TRUE(coordinator.Join().ok());
  EXPECT_FALSE(coordinator.ShouldStop());
}

TEST(QueueRunner, SharedProducerIsCalledByEveryThreadWithoutDuplicates) {
  auto queue = MakeFifo(4);
  ThreadCoordinator coordinator;
  auto mu = std::make_shared<absl::Mutex>();
  auto next = std::make_shared<int>(0);
  auto runner = ValueOrDie(QueueRunner<int>::Create(
      queue.get(), /*num_threads=*/4,
      [mu, next]() -> absl::StatusOr<std::optional<int>> {
        absl::MutexLock lock(mu.get());
        if (*next == 1000) return std::optional<int>();
        return std::optional<int>((*next)++);
      }));
  EXPECT_EQ(runner->num_threads(), 4);
  ASSERT_TRUE(runner->Start(&coordinator).ok());

  std::vector<int> values = DrainUntilOutOfRange(*queue);
  std::sort(values.begin(), values.end());
  std::vector<int> expected(1000);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(values, expected);
  EXPECT_TRUE(coordinator.Join().ok());
}

TEST(QueueRunner, OutOfRangeFromAProducerMeansItsInputIsExhausted) {
  auto queue = MakeFifo(4);
  ThreadCoordinator coordinator;
  auto runner = ValueOrDie(QueueRunner<int>::Create(
      queue.get(), {[]() -> absl::StatusOr<std::optional<int>> {
        return absl::OutOfRangeError("end of file");
      }}));
  ASSERT_TRUE(runner->Start(&coordinator).ok());
  EXPECT_TRUE(DrainUntilOutOfRange(*queue).empty());
  EXPECT_TRUE(coordinator.Join().ok());
}

TEST(QueueRunner, ProducerErrorReachesJoinAndCancelsTheQueue) {
  auto queue = MakeFifo(4, "records");
  ThreadCoordinator coordinator;
  auto produced = std::make_shared<int>(0);
  QueueRunner<int>::Producer failing =
      [produced]() -> absl::StatusOr<std::optional<int>> {
    if (++*produced > 5) {
      return absl::DataLossError("data/part-1.tfrecord: bad CRC at offset 7");
    }
    return std::optional<int>(1);
  };
  auto runner = ValueOrDie(QueueRunner<int>::Create(
      queue.get(), {failing, EndlessProducer(), EndlessProducer()}));
  ASSERT_TRUE(runner->Start(&coordinator).ok());

  // The endless producers fill the queue; the consumer keeps it moving
  // until the error closes it.
  DrainUntilOutOfRange(*queue);
  absl::Status status = coordinator.Join();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr("'records'"));
  EXPECT_THAT(status.message(), HasSubstr("offset 7"));
  EXPECT_TRUE(coordinator.ShouldStop());
}

TEST(QueueRunner, StopUnblocksProducersWaitingOnAFullQueue) {
  auto queue = MakeFifo(2);
  ThreadCoordinator coordinator;
  auto runner = ValueOrDie(QueueRunner<int>::Create(
      queue.get(), /*num_threads=*/3, EndlessProducer()));
  ASSERT_TRUE(runner->Start(&coordinator).ok());
  ASSERT_TRUE(Eventually([&] { return queue->num_waiting_producers() == 3; }));

  coordinator.RequestStop();
  EXPECT_TRUE(coordinator.Join(kGenerous).ok());
  EXPECT_TRUE(queue->closed());
  EXPECT_EQ(queue->num_waiting_producers(), 0);
}

TEST(QueueRunner, ConsumerClosingTheQueueEndsProducersQuietly) {
  auto queue = MakeFifo(2);
  ThreadCoordinator coordinator;
  auto runner = ValueOrDie(QueueRunner<int>::Create(
      queue.get(), /*num_threads=*/2, EndlessProducer()));
  ASSERT_TRUE(runner->Start(&coordinator).ok());
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(queue->Dequeue(kGenerous).ok());

  queue->Close(/*cancel_pending=*/true);
  EXPECT_TRUE(coordinator.Join(kGenerous).ok());
  EXPECT_FALSE(coordinator.ShouldStop());
}

TEST(QueueRunner, RunnerMayBeDestroyedWhileItsThreadsRun) {
  auto queue = MakeFifo(4);
  ThreadCoordinator coordinator;
  {
    auto runner = ValueOrDie(
        QueueRunner<int>::Create(queue.get(), {CountingProducer(0, 50)}));
    ASSERT_TRUE(runner->Start(&coordinator).ok());
  }
  EXPECT_EQ(DrainUntilOutOfRange(*queue).size(), 50u);
  EXPECT_TRUE(coordinator.Join().ok());
}

TEST(QueueRunner, StopBeforeStartClosesTheQueueAtOnce) {
  auto queue = MakeFifo(2);
  ThreadCoordinator coordinator;
  coordinator.RequestStop();
  auto runner = ValueOrDie(QueueRunner<int>::Create(
      queue.get(), /*num_threads=*/2, EndlessProducer()));
  ASSERT_TRUE(runner->Start(&coordinator).ok());
  EXPECT_TRUE(coordinator.Join(kGenerous).ok());
  EXPECT_TRUE(queue->closed());
}

TEST(QueueRunner, CreateAndStartRejectBadArguments) {
  auto queue = MakeFifo(2);
  EXPECT_EQ(QueueRunner<int>::Create(nullptr, {EndlessProducer()})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QueueRunner<int>::Create(queue.get(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QueueRunner<int>::Create(queue.get(), {nullptr}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QueueRunner<int>::Create(queue.get(), 0, EndlessProducer())
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  ThreadCoordinator coordinator;
  auto runner = ValueOrDie(
      QueueRunner<int>::Create(queue.get(), {CountingProducer(0, 1)}));
  EXPECT_EQ(runner->Start(nullptr).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(runner->Start(&coordinator).ok());
  EXPECT_EQ(runner->Start(&coordinator).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(DrainUntilOutOfRange(*queue).size(), 1u);
  EXPECT_TRUE(coordinator.Join().ok());
}

}  // namespace
}  // namespace shardq::pipeline
