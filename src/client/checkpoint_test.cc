// A training job's checkpoint of a queue: consume part of an epoch (ending
// mid-slice), save, restore into a new coordinator, finish there.
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/text_line_reader.h"
#include "shardq/work_queue.h"
#include "src/client/embedded_backend.h"
#include "src/client/work_queue_backend.h"
#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

std::vector<std::string> MakeFiles(int files, int lines) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string path = absl::StrCat(testing::TempDir(), "/ckpt-", f, ".txt");
    std::ofstream out(path);
    for (int l = 0; l < lines; ++l) out << "file " << f << " line " << l << "\n";
    paths.push_back(path);
  }
  return paths;
}

TEST(Checkpoint, RestoredQueueFinishesWithEveryRecordReadOnce) {
  const std::vector<std::string> files = MakeFiles(4, 50);
  CoordinatorImpl first;
  WorkQueueOptions options;
  options.works = files;
  options.num_slices = 8;
  options.seed = 3;
  options.num_clients = 2;
  options.name = "train";
  options.worker_id = "before";
  std::map<std::string, int> seen;
  const std::string path = absl::StrCat(testing::TempDir(), "/train.ckpt");
  {
    auto queue = WorkQueueFactory::Create(options, BackendForCoordinator(&first));
    ASSERT_TRUE(queue.ok()) << queue.status();
    TextLineReader reader;
    // 75 of 200 lines: one item done, the next one part-read.
    for (int i = 0; i < 15; ++i) {
      auto batch = reader.ReadUpTo(**queue, 5);
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (const Record& r : *batch) ++seen[r.value];
    }
    ASSERT_EQ(seen.size(), 75u);
    ASSERT_TRUE((*queue)->SaveCheckpoint(path).ok());
  }  // the job stops here

  CoordinatorImpl second;
  auto restored = WorkQueueFactory::RestoreCheckpoint(BackendForCoordinator(&second), path, "", "after");
  ASSERT_TRUE(restored.ok()) << restored.status();
  TextLineReader reader;
  while (true) {
    auto batch = reader.ReadUpTo(**restored, 16);
    if (absl::IsOutOfRange(batch.status())) break;
    ASSERT_TRUE(batch.ok()) << batch.status();
    for (const Record& r : *batch) ++seen[r.value];
  }
  ASSERT_EQ(seen.size(), 200u);  // none missing
  for (const auto& [line, n] : seen) EXPECT_EQ(n, 1) << line;  // none repeated
  EXPECT_TRUE((*restored)->Stats()->finished);
}

TEST(Checkpoint, NotACheckpointFileIsDataLoss) {
  const std::string path = absl::StrCat(testing::TempDir(), "/not.ckpt");
  std::ofstream(path) << "hello";
  CoordinatorImpl c;
  auto restored = WorkQueueFactory::RestoreCheckpoint(BackendForCoordinator(&c), path, "", "");
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(restored.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace shardq
