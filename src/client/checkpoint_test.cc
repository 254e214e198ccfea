// A training job's checkpoint of a queue: consume part of an epoch (ending
// mid-slice), save, restore into a new coordinator, finish there.
#include <fstream>
#include <iterator>
#include <map>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/text_line_reader.h"
#include "shardq/work_queue.h"
#include "src/client/checkpoint_file.h"
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

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

journal::Checkpoint SomeCheckpoint() {
  journal::Checkpoint checkpoint;
  checkpoint.mutable_config()->set_name("q");
  for (int i = 0; i < 20; ++i) checkpoint.mutable_config()->add_items(absl::StrCat("f", i, ".txt"));
  checkpoint.add_completed_bits(std::string(3, '\xff'));
  checkpoint.add_completed_bits(std::string(3, '\x0f'));
  checkpoint.set_first_epoch(1);
  journal::Ref* residual = checkpoint.add_residual();
  residual->set_epoch(2);
  residual->set_index(7);
  residual->set_item_override("f7.txt?start=10&end=20");
  return checkpoint;
}

TEST(CheckpointFile, EveryCutOrFlippedByteIsDataLossNeverAShorterCheckpoint) {
  const std::string path = absl::StrCat(testing::TempDir(), "/framed.ckpt");
  const journal::Checkpoint checkpoint = SomeCheckpoint();
  ASSERT_TRUE(WriteCheckpointFile(path, checkpoint).ok());
  absl::StatusOr<journal::Checkpoint> back = ReadCheckpointFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), checkpoint.SerializeAsString());
  const std::string whole = ReadAll(path);
  const size_t header = std::string("SHARDQ-CHECKPOINT-1\n").size();
  ASSERT_EQ(whole.substr(0, header), "SHARDQ-CHECKPOINT-1\n");
  // The bytes after the header are one Checkpoint message (the framing is
  // two unknown fields), as the file was before the framing.
  journal::Checkpoint parsed;
  ASSERT_TRUE(parsed.ParseFromString(whole.substr(header)));
  EXPECT_EQ(parsed.config().SerializeAsString(), checkpoint.config().SerializeAsString());
  ASSERT_EQ(parsed.completed_bits_size(), 2);
  EXPECT_EQ(parsed.completed_bits(1), checkpoint.completed_bits(1));
  EXPECT_EQ(parsed.first_epoch(), 1);
  ASSERT_EQ(parsed.residual_size(), 1);
  EXPECT_EQ(parsed.residual(0).item_override(), "f7.txt?start=10&end=20");
  // A cut anywhere after the header: many of these prefixes parse as a
  // message on their own (a cut at a field boundary), which without the
  // framing would restore a queue that forgot completions.
  const std::string cut_path = absl::StrCat(testing::TempDir(), "/cut.ckpt");
  for (size_t keep = header; keep < whole.size(); ++keep) {
    WriteAll(cut_path, whole.substr(0, keep));
    absl::StatusOr<journal::Checkpoint> r = ReadCheckpointFile(cut_path);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << "kept " << keep << " bytes";
    EXPECT_NE(r.status().message().find(cut_path), std::string::npos) << r.status();
  }
  for (size_t at = header; at < whole.size(); ++at) {
    std::string flipped = whole;
    flipped[at] ^= 0x20;
    WriteAll(cut_path, flipped);
    EXPECT_EQ(ReadCheckpointFile(cut_path).status().code(), absl::StatusCode::kDataLoss)
        << "flipped byte " << at;
  }
  WriteAll(cut_path, whole + "x");
  EXPECT_EQ(ReadCheckpointFile(cut_path).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointFile, AFileWithoutTheFramingIsReadAsTheMessageAlone) {
  // As written before the framing, or doctored by hand.
  const std::string path = absl::StrCat(testing::TempDir(), "/legacy.ckpt");
  const journal::Checkpoint checkpoint = SomeCheckpoint();
  WriteAll(path, "SHARDQ-CHECKPOINT-1\n" + checkpoint.SerializeAsString());
  absl::StatusOr<journal::Checkpoint> back = ReadCheckpointFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), checkpoint.SerializeAsString());
  WriteAll(path, "SHARDQ-CHECKPOINT-1\n");
  EXPECT_EQ(ReadCheckpointFile(path).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointFile, AnUnwritableDirectoryIsAnErrorAndLeavesNothing) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/no-such-dir");
  absl::Status s = WriteCheckpointFile(dir + "/x.ckpt", SomeCheckpoint());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find(dir), std::string::npos) << s;
}

}  // namespace
}  // namespace shardq
