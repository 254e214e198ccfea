#include "shardq/work_queue.h"

#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/input_producer.h"
#include "shardq/text_line_reader.h"
#include "src/client/backend.h"

namespace shardq {
namespace {

std::vector<std::string> MakeFiles(const std::string& tag, int files, int lines) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string path = absl::StrCat(testing::TempDir(), "/", tag, "-", f, ".txt");
    std::ofstream out(path);
    for (int l = 0; l < lines; ++l) out << tag << " " << f << " " << l << "\n";
    paths.push_back(path);
  }
  return paths;
}

WorkQueueOptions Options(const std::string& name, std::vector<std::string> works) {
  WorkQueueOptions o;
  o.name = name;
  o.works = std::move(works);
  o.seed = 11;
  return o;
}

TEST(WorkQueue, BadOptionsAreNamed) {
  WorkQueueOptions o = Options("bad", {});
  absl::Status s = WorkQueue::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("works"), std::string::npos);
  o = Options("bad", MakeFiles("bad", 1, 3));
  o.num_epochs = 0;
  s = WorkQueue::Create(o).status();
  EXPECT_NE(s.message().find("num_epochs"), std::string::npos);
  o.num_epochs = 1;
  o.num_slices = 0;
  s = WorkQueue::Create(o).status();
  EXPECT_NE(s.message().find("num_slices"), std::string::npos);
  o.num_slices.reset();
  o.works.push_back("/missing/shardq/x.txt");
  s = WorkQueue::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/missing/shardq/x.txt"), std::string::npos);
}

TEST(WorkQueue, WorkersNamingTheSameQueueShareIt) {
  std::vector<std::string> files = MakeFiles("share", 4, 10);
  auto a = WorkQueue::Create(Options("share", files));
  auto b = WorkQueue::Create(Options("share", files));
  ASSERT_TRUE(a.ok() && b.ok());
  std::set<int64_t> seen;
  for (int i = 0; i < 2; ++i) {
    for (auto* q : {a->get(), b->get()}) {
      absl::StatusOr<WorkItem> item = q->Take();
      ASSERT_TRUE(item.ok());
      EXPECT_TRUE(seen.insert(item->index).second);
      ASSERT_TRUE(q->Complete(*item).ok());
    }
  }
  EXPECT_TRUE(absl::IsOutOfRange((*a)->Take().status()));
  EXPECT_EQ((*a)->Stats()->workers.size(), 2u);
}

TEST(WorkQueue, DifferentConfigUnderTheSameNameFails) {
  std::vector<std::string> files = MakeFiles("cfg", 2, 5);
  auto a = WorkQueue::Create(Options("cfg", files));
  ASSERT_TRUE(a.ok());
  WorkQueueOptions o = Options("cfg", files);
  o.num_epochs = 3;
  absl::Status s = WorkQueue::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("num_epochs"), std::string::npos);
}

TEST(WorkQueue, UnsetSeedIsDrawnAndReported) {
  WorkQueueOptions o = Options("seedless", MakeFiles("seedless", 2, 5));
  o.seed.reset();
  auto a = WorkQueue::Create(o);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->Stats()->seed, (*a)->seed());
}

TEST(WorkQueue, TakeTimesOutWhileOthersHoldEverything) {
  auto a = WorkQueue::Create(Options("timeout", MakeFiles("timeout", 1, 5)));
  auto b = WorkQueue::Create(Options("timeout", MakeFiles("timeout", 1, 5)));
  ASSERT_TRUE((*a)->Take().ok());
  EXPECT_EQ((*b)->Take(absl::Milliseconds(30)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(WorkQueue, DestroyingAWorkerReleasesItsItems) {
  std::vector<std::string> files = MakeFiles("destroy", 1, 5);
  auto b = WorkQueue::Create(Options("destroy", files));
  {
    auto a = WorkQueue::Create(Options("destroy", files));
    ASSERT_TRUE((*a)->Take().ok());
  }
  absl::StatusOr<WorkItem> item = (*b)->Take(absl::Seconds(5));
  ASSERT_TRUE(item.ok()) << item.status();
}

TEST(WorkQueue, InputDatasetCompletesEachItemWhenTheNextIsRequested) {
  auto q = WorkQueue::Create(Options("dataset", MakeFiles("dataset", 3, 2)));
  std::unique_ptr<ItemStream> items = (*q)->InputDataset();
  ASSERT_TRUE(items->Next().ok());
  EXPECT_EQ((*q)->Stats()->completed, 0);
  ASSERT_TRUE(items->Next().ok());
  EXPECT_EQ((*q)->Stats()->completed, 1);
  ASSERT_TRUE(items->Next().ok());
  EXPECT_TRUE(absl::IsOutOfRange(items->Next().status()));
  EXPECT_EQ((*q)->Stats()->completed, 3);
}

TEST(WorkQueue, EightReaderThreadsOverThreeEpochsReadEveryLineOncePerEpoch) {
  std::vector<std::string> files = MakeFiles("eight", 6, 100);
  std::mutex mu;
  std::map<std::string, int> lines;  // value -> times read
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      WorkQueueOptions o = Options("eight", files);
      o.num_epochs = 3;
      o.num_slices = 40;
      o.num_clients = 2;
      o.worker_id = absl::StrCat("t", t);
      auto q = WorkQueue::Create(o);
      ASSERT_TRUE(q.ok()) << q.status();
      std::unique_ptr<InputProducer> producer = (*q)->MakeInputProducer();
      TextLineReader reader;
      while (true) {
        absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(*producer, 9);
        if (absl::IsOutOfRange(batch.status())) break;
        ASSERT_TRUE(batch.ok()) << batch.status();
        std::lock_guard<std::mutex> lock(mu);
        for (const Record& r : *batch) ++lines[r.value];
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(lines.size(), 600u);
  for (const auto& [line, n] : lines) EXPECT_EQ(n, 3) << line;
  auto q = WorkQueue::Create([&] {
    WorkQueueOptions o = Options("eight", files);
    o.num_epochs = 3;
    o.num_slices = 40;
    o.num_clients = 2;
    return o;
  }());
  absl::StatusOr<QueueStats> stats = (*q)->Stats();
  EXPECT_EQ(stats->completed, 120);
  EXPECT_EQ(stats->duplicates, 0);
  EXPECT_EQ(stats->pending + stats->leased, 0);
}

TEST(WorkQueue, ShortLeasesOfALiveWorkerAreKeptByHeartbeats) {
  WorkQueueOptions o = Options("heartbeat", MakeFiles("heartbeat", 1, 5));
  o.lease_timeout = absl::Milliseconds(150);
  auto a = WorkQueue::Create(o);
  auto b = WorkQueue::Create(o);
  absl::StatusOr<WorkItem> item = (*a)->Take();
  ASSERT_TRUE(item.ok());
  // Several lease periods pass; heartbeats keep the item with `a`.
  EXPECT_EQ((*b)->Take(absl::Milliseconds(600)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*a)->Stats()->expired, 0);
  ASSERT_TRUE((*a)->Complete(*item).ok());
}

TEST(WorkQueue, ItemOfADeadWorkerGoesToASurvivorAfterTheLease) {
  // A worker that stops heartbeating: simulated by a backend call that takes
  // without a WorkQueue (so nothing renews the lease).
  WorkQueueOptions o = Options("dead", MakeFiles("dead", 1, 5));
  o.lease_timeout = absl::Milliseconds(100);
  auto survivor = WorkQueue::Create(o);
  ASSERT_TRUE(survivor.ok());
  absl::StatusOr<std::vector<WorkItem>> taken =
      EmbeddedBackend()->Take("dead", "ghost", 1, absl::Now());
  ASSERT_EQ(taken->size(), 1u);
  absl::StatusOr<WorkItem> item = (*survivor)->Take(absl::Seconds(10));
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->index, (*taken)[0].index);
  ASSERT_TRUE((*survivor)->Complete(*item).ok());
  EXPECT_TRUE(absl::IsOutOfRange((*survivor)->Take().status()));
  EXPECT_EQ((*survivor)->Stats()->expired, 1);
}

}  // namespace
}  // namespace shardq
