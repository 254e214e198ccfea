// Take-ahead (WorkQueueOptions::take_ahead) over an in-process coordinator:
// items kept ready count against num_clients, go back at close, and one not
// started goes to an idle worker when the tail is rebalanced.
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "shardq/text_line_reader.h"
#include "shardq/work_queue.h"
#include "src/client/embedded_backend.h"
#include "src/client/work_queue_backend.h"
#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

std::vector<std::string> Files(const std::string& tag, int files, int lines) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string path = absl::StrCat(testing::TempDir(), "/ahead-", tag, "-", f, ".txt");
    std::ofstream out(path);
    for (int l = 0; l < lines; ++l) out << absl::StrFormat("%s %d %04d\n", tag, f, l);
    paths.push_back(path);
  }
  return paths;
}

struct Fixture {
  Fixture() {
    auto created = CoordinatorImpl::Create(CoordinatorOptions());
    EXPECT_TRUE(created.ok());
    coordinator = *std::move(created);
    backend = BackendForCoordinator(coordinator.get());
  }
  std::unique_ptr<WorkQueue> Worker(WorkQueueOptions o, const std::string& id) {
    o.worker_id = id;
    auto q = WorkQueueFactory::Create(o, backend);
    EXPECT_TRUE(q.ok()) << q.status();
    return q.ok() ? *std::move(q) : nullptr;
  }
  std::unique_ptr<CoordinatorImpl> coordinator;
  std::shared_ptr<QueueBackend> backend;
};

WorkQueueOptions Options(const std::string& name, std::vector<std::string> works) {
  WorkQueueOptions o;
  o.name = name;
  o.works = std::move(works);
  o.seed = 5;
  return o;
}

TEST(TakeAhead, KeepsTakeAheadItemsReadyWithinNumClients) {
  Fixture f;
  WorkQueueOptions o = Options("k", Files("k", 8, 4));
  o.num_clients = 3;
  o.take_ahead = 2;
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  ASSERT_TRUE(q->Take().ok());
  EXPECT_EQ(q->ready(), 2);
  EXPECT_EQ(q->held(), 3);
  EXPECT_EQ(f.coordinator->Stats("k")->leased, 3);
  // The next two come without the coordinator: nothing more is leased.
  ASSERT_TRUE(q->Take().ok());
  ASSERT_TRUE(q->Take().ok());
  EXPECT_EQ(q->ready(), 0);
  EXPECT_EQ(f.coordinator->Stats("k")->leased, 3);
  // At the limit the coordinator's refusal comes through.
  EXPECT_EQ(q->Take().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TakeAhead, ReadyItemsCountAgainstNumClients) {
  Fixture f;
  WorkQueueOptions o = Options("cap", Files("cap", 8, 4));
  o.num_clients = 2;
  o.take_ahead = 5;
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  absl::StatusOr<WorkItem> item = q->Take();
  ASSERT_TRUE(item.ok());
  EXPECT_EQ(q->held(), 2);
  EXPECT_EQ(q->ready(), 1);
  // A completion refills within the limit too.
  ASSERT_TRUE(q->Complete(*item).ok());
  EXPECT_EQ(q->held(), 2);
  EXPECT_EQ(f.coordinator->Stats("cap")->leased, 2);
}

TEST(TakeAhead, ZeroTakesEachItemWhenAskedFor) {
  Fixture f;
  WorkQueueOptions o = Options("zero", Files("zero", 4, 4));
  o.num_clients = 4;
  o.take_ahead = 0;
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  absl::StatusOr<WorkItem> item = q->Take();
  ASSERT_TRUE(item.ok());
  ASSERT_TRUE(q->Complete(*item).ok());
  EXPECT_EQ(q->held(), 0);
  EXPECT_EQ(f.coordinator->Stats("zero")->leased, 0);
}

TEST(TakeAhead, ReadyItemsAreReleasedWhenTheQueueCloses) {
  Fixture f;
  WorkQueueOptions o = Options("close", Files("close", 6, 4));
  o.num_clients = 4;
  o.take_ahead = 3;
  {
    std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
    absl::StatusOr<WorkItem> item = q->Take();
    ASSERT_TRUE(item.ok());
    ASSERT_TRUE(q->Complete(*item).ok());
    // Three kept ready, plus the one for the take that usually follows a
    // completion.
    EXPECT_EQ(q->ready(), 4);
  }
  absl::StatusOr<QueueStats> stats = f.coordinator->Stats("close");
  EXPECT_EQ(stats->leased, 0);
  EXPECT_EQ(stats->completed, 1);
  EXPECT_EQ(stats->pending, 5);
}

TEST(TakeAhead, WorkersWithTakeAheadReadEveryLineOnce) {
  Fixture f;
  WorkQueueOptions o = Options("once", Files("once", 6, 50));
  o.num_slices = 30;
  o.num_clients = 3;
  o.take_ahead = 2;
  o.num_epochs = 2;
  std::mutex mu;
  std::map<std::string, int> lines;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<WorkQueue> q = f.Worker(o, absl::StrCat("w", t));
      ASSERT_NE(q, nullptr);
      TextLineReader reader;
      while (true) {
        absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(*q, 7);
        if (absl::IsOutOfRange(batch.status())) break;
        ASSERT_TRUE(batch.ok()) << batch.status();
        std::lock_guard<std::mutex> lock(mu);
        for (const Record& r : *batch) ++lines[r.value];
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(lines.size(), 300u);
  for (const auto& [line, n] : lines) EXPECT_EQ(n, 2) << line;
  EXPECT_EQ(f.coordinator->Stats("once")->duplicates, 0);
}

TEST(TakeAhead, UnstartedReadyItemGoesToAnIdleWorker) {
  Fixture f;
  WorkQueueOptions o = Options("idle", Files("idle", 1, 400));
  o.num_slices = 2;
  o.shuffle = false;
  o.num_clients = 2;
  o.take_ahead = 1;
  o.heartbeat_interval = absl::Milliseconds(20);
  std::unique_ptr<WorkQueue> a = f.Worker(o, "a");
  std::unique_ptr<WorkQueue> b = f.Worker(o, "b");
  absl::StatusOr<WorkItem> reading = a->Take();
  ASSERT_TRUE(reading.ok());
  ASSERT_EQ(a->ready(), 1);
  // Nothing is pending: b's take gets a's ready item back (generous bound;
  // it comes as soon as a answers the proposal).
  absl::StatusOr<WorkItem> got = b->Take(absl::Seconds(60));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(a->ready(), 0);
  ASSERT_TRUE(got->spec.has_value() && reading->spec.has_value());
  EXPECT_NE(got->spec->start, reading->spec->start);
  // Both finish; nothing is left over.
  ASSERT_TRUE(b->Complete(*got).ok());
  ASSERT_TRUE(a->Complete(*reading).ok());
  EXPECT_TRUE(f.coordinator->Stats("idle")->finished);
}

}  // namespace
}  // namespace shardq
