// Tail rebalancing end to end in one process: real WorkQueues and
// TextLineReaders over an in-process coordinator.
#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "shardq/text_line_reader.h"
#include "shardq/work_queue.h"
#include "src/client/embedded_backend.h"
#include "src/client/work_queue_backend.h"
#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

std::string WriteLines(const std::string& name, int64_t n) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name, "-", ::getpid());
  std::ofstream out(path);
  // Equal lengths: byte-range slices hold equal numbers of lines.
  for (int64_t i = 0; i < n; ++i) out << absl::StrFormat("line-%06d\n", i);
  return path;
}

// 4 workers, 4 slices; worker 0 takes 10x as long per line. Without splits
// the run lasts as long as worker 0 needs for a whole slice; with them the
// idle workers take over the rest of its slice.
TEST(TailRebalancing, ForcedStragglerIsSplitAndTheRunEndsEarly) {
  constexpr int64_t kLines = 4000;
  const std::string path = WriteLines("straggler", kLines);
  absl::StatusOr<std::unique_ptr<CoordinatorImpl>> coordinator =
      CoordinatorImpl::Create(CoordinatorOptions());
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  std::shared_ptr<QueueBackend> backend = BackendForCoordinator(coordinator->get());

  WorkQueueOptions options;
  options.works = {path};
  options.num_slices = 4;
  options.shuffle = false;
  options.name = "straggler";
  options.heartbeat_interval = absl::Milliseconds(20);
  // Each worker's slice would take it 1000 lines x its per-line time.
  const std::vector<absl::Duration> per_line = {
      absl::Microseconds(2000), absl::Microseconds(200), absl::Microseconds(200),
      absl::Microseconds(200)};

  absl::Mutex mu;
  std::map<std::string, int64_t> seen;   // line -> times read
  std::vector<int64_t> lines_of(4, 0);   // lines read per worker
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&, w] {
      WorkQueueOptions mine = options;
      mine.worker_id = absl::StrCat("w", w);
      absl::StatusOr<std::unique_ptr<WorkQueue>> queue = WorkQueueFactory::Create(mine, backend);
      if (!queue.ok()) {
        ++failures;
        ADD_FAILURE() << queue.status();
        return;
      }
      TextLineReader reader;
      while (true) {
        absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(**queue, 8);
        if (absl::IsOutOfRange(batch.status())) break;
        if (!batch.ok()) {
          ++failures;
          ADD_FAILURE() << batch.status();
          return;
        }
        for (const Record& r : *batch) {
          absl::SleepFor(per_line[static_cast<size_t>(w)]);
          absl::MutexLock lock(&mu);
          ++seen[r.value];
          ++lines_of[static_cast<size_t>(w)];
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  ASSERT_EQ(failures.load(), 0);

  // Every line exactly once.
  ASSERT_EQ(static_cast<int64_t>(seen.size()), kLines);
  for (const auto& [line, times] : seen) EXPECT_EQ(times, 1) << line;
  absl::StatusOr<QueueStats> stats = (*coordinator)->Stats("straggler");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_TRUE(stats->finished);
  EXPECT_GE(stats->splits, 1);
  EXPECT_EQ(stats->split_items_open, 0);
  EXPECT_EQ(stats->completed, 4);
  EXPECT_EQ(stats->duplicates, 0);
  // The straggler stopped well before the end of its 1000-line slice: the
  // run ended before a fixed-slice run could have.
  EXPECT_LT(lines_of[0], 1000) << "lines per worker: " << lines_of[0] << " " << lines_of[1]
                               << " " << lines_of[2] << " " << lines_of[3];
  ::unlink(path.c_str());
}

// With splitting off, the straggler reads its whole slice.
TEST(TailRebalancing, DisabledQueueKeepsFixedSlices) {
  constexpr int64_t kLines = 400;
  const std::string path = WriteLines("nosplit", kLines);
  absl::StatusOr<std::unique_ptr<CoordinatorImpl>> coordinator =
      CoordinatorImpl::Create(CoordinatorOptions());
  ASSERT_TRUE(coordinator.ok());
  std::shared_ptr<QueueBackend> backend = BackendForCoordinator(coordinator->get());
  WorkQueueOptions options;
  options.works = {path};
  options.num_slices = 2;
  options.shuffle = false;
  options.name = "nosplit";
  options.split = false;
  options.heartbeat_interval = absl::Milliseconds(10);
  std::vector<int64_t> lines_of(2, 0);
  std::vector<std::thread> workers;
  for (int w = 0; w < 2; ++w) {
    workers.emplace_back([&, w] {
      WorkQueueOptions mine = options;
      mine.worker_id = absl::StrCat("w", w);
      absl::StatusOr<std::unique_ptr<WorkQueue>> queue = WorkQueueFactory::Create(mine, backend);
      ASSERT_TRUE(queue.ok()) << queue.status();
      TextLineReader reader;
      while (true) {
        absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(**queue, 4);
        if (!batch.ok()) break;
        for (size_t i = 0; i < batch->size(); ++i) {
          absl::SleepFor(absl::Microseconds(w == 0 ? 2000 : 100));
          ++lines_of[static_cast<size_t>(w)];
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  absl::StatusOr<QueueStats> stats = (*coordinator)->Stats("nosplit");
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->splits, 0);
  EXPECT_EQ(lines_of[0] + lines_of[1], kLines);
  EXPECT_EQ(lines_of[0] % 200, 0);  // whole slices only
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace shardq
