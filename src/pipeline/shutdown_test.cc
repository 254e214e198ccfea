// Destroying pipelines mid-stream (threads stop promptly, held items go
// back to the queue), progress notes, and errors from completing items.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardq/item_source.h"
#include "shardq/pipeline/dataset.h"
#include "shardq/work_queue.h"
#include "src/pipeline/dataset_test_util.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline {
namespace {

using ::shardq::pipeline::testutil::Drain;
using ::shardq::pipeline::testutil::Eventually;
using ::shardq::pipeline::testutil::ExpectedLines;
using ::shardq::pipeline::testutil::MakeQueue;
using ::shardq::pipeline::testutil::UniqueName;
using ::shardq::pipeline::testutil::ValueOrDie;
using ::shardq::pipeline::testutil::WriteTextFiles;
using ::testing::HasSubstr;

// No test waits this long unless shutdown hangs; the real figure is
// milliseconds (the poll interval of a blocked take is 100 ms).
constexpr absl::Duration kShutdownBound = absl::Seconds(5);

InterleaveOptions BusyRead() {
  InterleaveOptions read;
  read.cycle_length = 4;
  read.num_parallel_reads = 3;
  read.block_length = 2;
  return read;
}

Dataset<Batch<std::string>> BusyPipeline(WorkQueue* queue,
                                         absl::Duration map_delay) {
  MapOptions map;
  map.num_threads = 3;
  ShuffleOptions shuffle;
  shuffle.buffer_size = 200;
  BatchOptions batch;
  batch.batch_size = 8;
  return ReadItems(queue, TextReaderFactory(), BusyRead())
      .Map(
          [map_delay](Record r) {
            if (map_delay > absl::ZeroDuration()) absl::SleepFor(map_delay);
            return std::move(r.value);
          },
          map)
      .Shuffle(shuffle)
      .Batch(batch)
      .Prefetch(4);
}

template <typename T>
absl::Duration TimeToDestroy(std::unique_ptr<T> object) {
  const absl::Time start = absl::Now();
  object.reset();
  return absl::Now() - start;
}

TEST(Shutdown, DestroyingMidStreamJoinsEveryThreadPromptly) {
  std::vector<std::string> files = WriteTextFiles(UniqueName("mid"), 8, 3000);
  for (absl::Duration delay : {absl::ZeroDuration(), absl::Milliseconds(2)}) {
    std::unique_ptr<WorkQueue> queue = MakeQueue(files, 40, 12);
    auto it = ValueOrDie(BusyPipeline(queue.get(), delay).MakeIterator());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(it->Next().ok());
    EXPECT_GT(queue->held(), 0);
    EXPECT_LT(TimeToDestroy(std::move(it)), kShutdownBound);
    // Nothing of the unfinished items is lost: they are back in the queue.
    EXPECT_EQ(queue->held(), 0);
    QueueStats stats = ValueOrDie(queue->Stats());
    EXPECT_FALSE(stats.finished);
    EXPECT_EQ(stats.leased, 0);
  }
}

TEST(Shutdown, DestroyingWithFullBuffersAndNoConsumerIsPrompt) {
  std::vector<std::string> files = WriteTextFiles(UniqueName("full"), 4, 5000);
  std::unique_ptr<WorkQueue> queue = MakeQueue(files, 16, 12);
  auto it = ValueOrDie(BusyPipeline(queue.get(), absl::ZeroDuration())
                           .MakeIterator());
  // Wait until every stage is blocked on a full buffer.
  int64_t last = -1;
  ASSERT_TRUE(Eventually([&] {
    const int64_t now = it->stats().records_read;
    const bool settled = now > 0 && now == last;
    last = now;
    absl::SleepFor(absl::Milliseconds(20));
    return settled;
  }));
  EXPECT_LT(TimeToDestroy(std::move(it)), kShutdownBound);
  EXPECT_EQ(queue->held(), 0);
}

TEST(Shutdown, DestroyingWhileWaitingForItemsHeldByOthersIsPrompt) {
  std::vector<std::string> files = WriteTextFiles(UniqueName("others"), 2, 10);
  const std::string name = UniqueName("held-elsewhere");
  std::unique_ptr<WorkQueue> other = MakeQueue(files, 0, 2, 7, 1, name);
  std::unique_ptr<WorkQueue> mine = MakeQueue(files, 0, 2, 7, 1, name);
  WorkItem a = ValueOrDie(other->Take());
  WorkItem b = ValueOrDie(other->Take());
  auto it = ValueOrDie(ReadItems(mine.get(), TextReaderFactory()).MakeIterator());
  absl::SleepFor(absl::Milliseconds(150));  // the take is waiting by now
  EXPECT_LT(TimeToDestroy(std::move(it)), kShutdownBound);
  ASSERT_TRUE(other->Complete(a).ok());
  ASSERT_TRUE(other->Complete(b).ok());
}

TEST(Shutdown, ANewIteratorReadsWhatADestroyedOneLeft) {
  const std::string tag = UniqueName("resume");
  std::vector<std::string> files = WriteTextFiles(tag, 5, 200);
  std::unique_ptr<WorkQueue> queue = MakeQueue(files, 25, 10);
  std::multiset<std::string> seen;
  {
    auto it = ValueOrDie(BusyPipeline(queue.get(), absl::ZeroDuration())
                             .MakeIterator());
    for (int i = 0; i < 20; ++i) {
      for (std::string& v : ValueOrDie(it->Next()).rows) seen.insert(v);
    }
  }
  auto it = ValueOrDie(BusyPipeline(queue.get(), absl::ZeroDuration())
                           .MakeIterator());
  for (Batch<std::string>& batch : Drain(*it)) {
    for (std::string& v : batch.rows) seen.insert(v);
  }
  EXPECT_TRUE(ValueOrDie(queue->Stats()).finished);
  // At least once: every line, some (from released items) twice.
  for (const std::string& line : ExpectedLines(tag, 5, 200)) {
    EXPECT_GE(seen.count(line), 1u) << line;
  }
}

// An ItemSource that records what the pipeline tells it.
class RecordingSource final : public ItemSource {
 public:
  explicit RecordingSource(std::vector<std::string> items)
      : list_(std::move(items)) {}

  absl::StatusOr<WorkItem> NextItem() override {
    absl::MutexLock lock(&mu_);
    return list_.NextItem();
  }
  absl::Status ItemDone(const WorkItem& item) override {
    absl::MutexLock lock(&mu_);
    done_.push_back(item.item);
    if (fail_done_) return absl::UnavailableError("coordinator went away");
    return absl::OkStatus();
  }
  void NoteProgress(const WorkItem& item, int64_t offset) override {
    absl::MutexLock lock(&mu_);
    progress_[item.item] = offset;
  }

  void FailItemDone() {
    absl::MutexLock lock(&mu_);
    fail_done_ = true;
  }
  std::vector<std::string> done() const {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  std::map<std::string, int64_t> progress() const {
    absl::MutexLock lock(&mu_);
    return progress_;
  }

 private:
  mutable absl::Mutex mu_;
  ListItemSource list_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> done_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> progress_ ABSL_GUARDED_BY(mu_);
  bool fail_done_ ABSL_GUARDED_BY(mu_) = false;
};

TEST(Progress, FollowsTheRecordsConsumedInOrder) {
  // "progr 0 N\n" is 10 bytes: line n starts at byte 10 * n.
  std::vector<std::string> files = WriteTextFiles("progr", 1, 10);
  RecordingSource source(files);
  InterleaveOptions read;
  read.cycle_length = 1;
  auto it = ValueOrDie(ReadItems(&source, TextReaderFactory(), read)
                           .MakeIterator());
  EXPECT_TRUE(source.progress().empty());
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(it->Next().ok());
    EXPECT_EQ(source.progress()[files[0]], 10 * i);
  }
  EXPECT_TRUE(source.done().empty());
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(it->Next().ok());
  EXPECT_EQ(source.done(), files);
  EXPECT_TRUE(absl::IsOutOfRange(it->Next().status()));
}

TEST(Progress, OutOfOrderConsumptionReportsOnlyTheConsumedPrefix) {
  // "shufl 0 N\n" is 10 bytes, as above.
  std::vector<std::string> files = WriteTextFiles("shufl", 1, 10);
  RecordingSource source(files);
  ShuffleOptions shuffle;
  shuffle.buffer_size = 10;
  shuffle.seed = 1;
  auto it = ValueOrDie(ReadItems(&source, TextReaderFactory())
                           .Shuffle(shuffle)
                           .MakeIterator());
  std::set<int64_t> consumed_offsets;
  for (int i = 0; i < 9; ++i) {
    Record r = ValueOrDie(it->Next());
    consumed_offsets.insert(std::stoll(r.key.substr(r.key.rfind(':') + 1)));
    // The resume offset is the end of the longest consumed prefix.
    int64_t prefix_end = 0;
    while (consumed_offsets.count(prefix_end) > 0) prefix_end += 10;
    auto progress = source.progress();
    if (prefix_end == 0) {
      EXPECT_EQ(progress.count(files[0]), 0u);
    } else {
      EXPECT_EQ(progress[files[0]], prefix_end);
    }
  }
}

TEST(Consume, ItemDoneErrorEndsThePipelineAfterTheElement) {
  std::vector<std::string> files = WriteTextFiles("donefail", 2, 3);
  RecordingSource source(files);
  source.FailItemDone();
  InterleaveOptions read;
  read.cycle_length = 1;
  auto it = ValueOrDie(ReadItems(&source, TextReaderFactory(), read)
                           .MakeIterator());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(it->Next().ok());  // the third
  absl::Status status = it->Next().status();                 // completes
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr(files[0]));
  EXPECT_THAT(status.message(), HasSubstr("coordinator went away"));
}

}  // namespace
}  // namespace shardq::pipeline
