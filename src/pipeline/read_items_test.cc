// Pipelines fed by a real embedded WorkQueue: every record exactly once
// (over slices, epochs, splits and two workers), determinism, read-ahead
// and TFRecord items. Errors, completion only once consumed, and refused
// options: read_items_completion_test.cc.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardq/input_producer.h"
#include "shardq/item_source.h"
#include "shardq/pipeline/dataset.h"
#include "shardq/work_queue.h"
#include "src/io/tfrecord.h"
#include "src/pipeline/dataset_test_util.h"
#include "src/pipeline/read_items_test_util.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline {
namespace {

using ::shardq::pipeline::testutil::Config;
using ::shardq::pipeline::testutil::Drain;
using ::shardq::pipeline::testutil::DrainDataset;
using ::shardq::pipeline::testutil::Eventually;
using ::shardq::pipeline::testutil::ExpectedLines;
using ::shardq::pipeline::testutil::MakePipeline;
using ::shardq::pipeline::testutil::MakeQueue;
using ::shardq::pipeline::testutil::Sorted;
using ::shardq::pipeline::testutil::UniqueName;
using ::shardq::pipeline::testutil::ValueOrDie;
using ::shardq::pipeline::testutil::Values;
using ::shardq::pipeline::testutil::WriteTextFiles;
using ::testing::HasSubstr;

std::vector<std::string> Repeat(const std::vector<std::string>& v, int times) {
  std::vector<std::string> out;
  for (int i = 0; i < times; ++i) out.insert(out.end(), v.begin(), v.end());
  return out;
}


class EveryRecordOnce : public ::testing::TestWithParam<Config> {};

TEST_P(EveryRecordOnce, OverSlicesAndEpochs) {
  const Config& c = GetParam();
  const std::string tag = UniqueName("once");
  std::vector<std::string> files = WriteTextFiles(tag, 5, 97);
  // num_clients >= every batch size: no batch can wait forever on items
  // whose records it holds (see InterleaveOptions::max_items_held).
  std::unique_ptr<WorkQueue> queue =
      MakeQueue(files, /*num_slices=*/23, /*num_clients=*/32, /*seed=*/3,
                /*num_epochs=*/2);
  auto it = ValueOrDie(MakePipeline(queue.get(), c).MakeIterator());
  std::vector<std::string> values = Values(Drain(*it));
  EXPECT_EQ(Sorted(values), Sorted(Repeat(ExpectedLines(tag, 5, 97), 2)));

  const PipelineStats stats = it->stats();
  EXPECT_EQ(stats.items_completed, queue->num_items() * 2);
  EXPECT_EQ(stats.items_held, 0);
  EXPECT_EQ(stats.records_read, 5 * 97 * 2);
  EXPECT_EQ(stats.records_consumed, stats.records_read);
  QueueStats queue_stats = ValueOrDie(queue->Stats());
  EXPECT_TRUE(queue_stats.finished);
  EXPECT_EQ(queue_stats.completed, queue->num_items() * 2);
  EXPECT_EQ(queue_stats.duplicates, 0);
  EXPECT_EQ(queue->held(), 0);
}

// Batches handed back (Iterator::Recycle) lend their strings to the
// records read next (StringPool): lines of several lengths, read into
// strings that held others, come out exactly as written, each once.
TEST_P(EveryRecordOnce, RecyclingBatchesChangesNothing) {
  const Config& c = GetParam();
  const std::string tag = UniqueName("recycle");
  std::vector<std::string> files = WriteTextFiles(tag, 5, 97);
  std::unique_ptr<WorkQueue> queue =
      MakeQueue(files, /*num_slices=*/23, /*num_clients=*/32, /*seed=*/3,
                /*num_epochs=*/2);
  auto it = ValueOrDie(MakePipeline(queue.get(), c).MakeIterator());
  std::vector<std::string> values;
  while (true) {
    absl::StatusOr<std::optional<Batch<Record>>> next = it->Next();
    if (absl::IsOutOfRange(next.status())) break;
    ASSERT_TRUE(next.ok()) << next.status();
    ASSERT_TRUE(next->has_value());
    for (const Record& r : (*next)->rows) values.push_back(r.value);
    it->Recycle(**std::move(next));
  }
  EXPECT_EQ(Sorted(values), Sorted(Repeat(ExpectedLines(tag, 5, 97), 2)));
  EXPECT_EQ(it->stats().records_consumed, 5 * 97 * 2);
  EXPECT_EQ(ValueOrDie(queue->Stats()).duplicates, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Configs, EveryRecordOnce,
    ::testing::Values(
        Config{"serial"},
        Config{"blocks", 3, 4, 1, 0, true, 0, 7, 0},
        Config{"parallel_reads", 4, 2, 3, 2, true, 50, 16, 2},
        Config{"nondeterministic", 6, 1, 2, 3, false, 100, 32, 3},
        Config{"big_shuffle", 8, 5, 4, 1, true, 400, 10, 1},
        // One read, calling-thread stages up to Prefetch: the reading runs
        // in the prefetch thread (read_stage.h, inline mode).
        Config{"read_in_prefetch_thread", 3, 4, 1, 0, true, 50, 16, 2},
        Config{"read_in_prefetch_thread_nondeterministic", 5, 2, 1, 0, false,
               30, 8, 1}),
    [](const ::testing::TestParamInfo<Config>& info) {
      return info.param.label;
    });

// complete_when_read: with one held item, batches spanning items fill, and
// each item is completed once read into the pipeline.
TEST(ReadItems, CompleteWhenReadBatchesAcrossItemsWithOneHeldItem) {
  const std::string tag = UniqueName("onheld");
  std::vector<std::string> files = WriteTextFiles(tag, 5, 7);
  std::unique_ptr<WorkQueue> queue = MakeQueue(files, 0, /*num_clients=*/1);
  InterleaveOptions read;
  read.complete_when_read = true;
  BatchOptions batch;
  batch.batch_size = 16;
  auto it = ValueOrDie(ReadItems(queue.get(), TextReaderFactory(), read).Batch(batch)
                           .MakeIterator());
  std::vector<std::string> values;
  while (true) {
    absl::StatusOr<Batch<Record>> next = it->Next();
    if (absl::IsOutOfRange(next.status())) break;
    ASSERT_TRUE(next.ok()) << next.status();
    for (const Record& r : next->rows) values.push_back(r.value);
  }
  EXPECT_EQ(Sorted(values), Sorted(ExpectedLines(tag, 5, 7)));
  const QueueStats stats = ValueOrDie(queue->Stats());
  EXPECT_TRUE(stats.finished);
  EXPECT_EQ(stats.completed, 5);
}

// The torch habit (set_epoch): a pass with max_epoch = e reads epoch e
// only, gives back the first item of epoch e + 1 (no failed attempt), and
// the next pass reads epoch e + 1 from it: every record once per pass.
TEST(ReadItems, MaxEpochReadsOneEpochPerPass) {
  const std::string tag = UniqueName("epochs");
  std::vector<std::string> files = WriteTextFiles(tag, 4, 9);
  std::unique_ptr<WorkQueue> queue = MakeQueue(files, 8, 16, 3, /*num_epochs=*/3);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    InterleaveOptions read;
    read.cycle_length = 3;
    read.max_epoch = epoch;
    auto it = ValueOrDie(ReadItems(queue.get(), TextReaderFactory(), read).MakeIterator());
    std::vector<std::string> values;
    for (const Record& r : Drain(*it)) values.push_back(r.value);
    EXPECT_EQ(Sorted(values), Sorted(ExpectedLines(tag, 4, 9))) << "epoch " << epoch;
    const QueueStats stats = ValueOrDie(queue->Stats());
    EXPECT_EQ(stats.completed, 8 * (epoch + 1)) << "epoch " << epoch;
    EXPECT_EQ(stats.finished, epoch == 2);
    EXPECT_EQ(stats.failed, 0);
  }
}

// InterleaveOptions::open_ahead is told, each time the stage takes an item,
// of the item the WorkQueue keeps ready to hand out next: here every item
// but the first, once each, before it is taken.
TEST(ReadItems, OpenAheadIsToldOfTheItemKeptReadyAfterEachTake) {
  const std::string tag = UniqueName("ahead");
  std::vector<std::string> files = WriteTextFiles(tag, 5, 7);
  std::unique_ptr<WorkQueue> queue = MakeQueue(files, 0, /*num_clients=*/1);
  absl::Mutex mu;
  std::vector<std::string> hinted;
  InterleaveOptions read;
  read.open_ahead = [&](const WorkItem& item) {
    absl::MutexLock lock(&mu);
    hinted.push_back(item.item);
  };
  auto it = ValueOrDie(ReadItems(queue.get(), TextReaderFactory(), read).MakeIterator());
  std::vector<std::string> values;
  std::vector<std::string> items;
  for (const Record& r : Drain(*it)) {
    values.push_back(r.value);
    const std::string item = r.key.substr(0, r.key.rfind(':'));
    if (items.empty() || items.back() != item) items.push_back(item);
  }
  EXPECT_EQ(Sorted(values), Sorted(ExpectedLines(tag, 5, 7)));
  ASSERT_EQ(items.size(), 5u);
  absl::MutexLock lock(&mu);
  EXPECT_EQ(hinted, std::vector<std::string>(items.begin() + 1, items.end()));
}

TEST(ReadItems, MaxEpochNeedsAWorkQueue) {
  ListItemSource source({"unused"});
  InterleaveOptions read;
  read.max_epoch = 0;
  auto it = ReadItems(&source, TextReaderFactory(), read).MakeIterator();
  EXPECT_TRUE(absl::IsInvalidArgument(it.status())) << it.status();
  EXPECT_THAT(std::string(it.status().message()), HasSubstr("max_epoch"));
  read.max_epoch = -2;
  std::unique_ptr<WorkQueue> queue = MakeQueue(WriteTextFiles(UniqueName("e2"), 1, 1), 0, 1);
  it = ReadItems(queue.get(), TextReaderFactory(), read).MakeIterator();
  EXPECT_TRUE(absl::IsInvalidArgument(it.status())) << it.status();
}

TEST(ReadItems, TwoWorkersSharingAQueueReadEveryRecordOnce) {
  const std::string tag = UniqueName("workers");
  std::vector<std::string> files = WriteTextFiles(tag, 4, 150);
  const std::string name = UniqueName("shared");
  // num_clients >= the batch size (16), see EveryRecordOnce.
  std::unique_ptr<WorkQueue> a = MakeQueue(files, 30, 16, 9, 1, name);
  std::unique_ptr<WorkQueue> b = MakeQueue(files, 30, 16, 9, 1, name);
  Config c;
  c.cycle_length = 3;
  c.shuffle = 20;
  std::vector<std::string> from_a, from_b;
  std::thread ta([&] { from_a = Values(DrainDataset(MakePipeline(a.get(), c))); });
  std::thread tb([&] { from_b = Values(DrainDataset(MakePipeline(b.get(), c))); });
  ta.join();
  tb.join();
  from_a.insert(from_a.end(), from_b.begin(), from_b.end());
  EXPECT_EQ(Sorted(from_a), Sorted(ExpectedLines(tag, 4, 150)));
  EXPECT_EQ(ValueOrDie(a->Stats()).duplicates, 0);
}

// Tail rebalancing through the pipeline: a slow consumer's item is split
// while its reader reads ahead, and the two workers still read every
// record exactly once. Deterministic: the slow worker takes its item first
// and stops after one record (no sleeps) until the split has happened.
TEST(ReadItems, SlowWorkersItemIsSplitAndEveryRecordIsReadOnce) {
  const std::string tag = UniqueName("split");
  std::vector<std::string> files = WriteTextFiles(tag, 1, 3000);
  WorkQueueOptions options;
  options.name = UniqueName("split");
  options.works = files;
  options.num_slices = 2;
  options.num_clients = 1;
  options.shuffle = false;
  options.heartbeat_interval = absl::Milliseconds(10);
  std::unique_ptr<WorkQueue> slow = ValueOrDie(WorkQueue::Create(options));
  std::unique_ptr<WorkQueue> fast = ValueOrDie(WorkQueue::Create(options));
  InterleaveOptions read;
  read.buffer_size = 8;  // read ahead little, so most of the slow item is splittable
  std::vector<std::string> from_slow, from_fast;
  auto slow_it = ValueOrDie(ReadItems(slow.get(), TextReaderFactory(), read).MakeIterator());
  // The slow worker holds the first slice, and stops here.
  from_slow.push_back(ValueOrDie(slow_it->Next()).value);
  std::thread tf([&] {
    auto it = ValueOrDie(ReadItems(fast.get(), TextReaderFactory(), read).MakeIterator());
    while (true) {
      absl::StatusOr<Record> r = it->Next();
      if (!r.ok()) {
        EXPECT_TRUE(absl::IsOutOfRange(r.status())) << r.status();
        break;
      }
      from_fast.push_back(r->value);
    }
  });
  // The fast worker, out of items, is handed the rest of the slow one: a
  // split, and a second item taken by the fast worker.
  EXPECT_TRUE(Eventually([&] {
    const QueueStats s = ValueOrDie(fast->Stats());
    auto w = s.workers.find(fast->worker_id());
    return s.splits >= 1 && w != s.workers.end() && w->second.taken >= 2;
  }));
  while (true) {
    absl::StatusOr<Record> r = slow_it->Next();
    if (!r.ok()) {
      EXPECT_TRUE(absl::IsOutOfRange(r.status())) << r.status();
      break;
    }
    from_slow.push_back(r->value);
  }
  tf.join();
  const QueueStats stats = ValueOrDie(fast->Stats());
  EXPECT_GE(stats.splits, 1);
  EXPECT_EQ(stats.duplicates, 0);
  from_slow.insert(from_slow.end(), from_fast.begin(), from_fast.end());
  EXPECT_EQ(Sorted(from_slow), Sorted(ExpectedLines(tag, 1, 3000)));
}

class Determinism : public ::testing::TestWithParam<Config> {};

TEST_P(Determinism, OrderIsIdenticalAcrossRunsWithSeeds) {
  const std::string tag = UniqueName("determinism");
  std::vector<std::string> files = WriteTextFiles(tag, 6, 80);
  const Config& c = GetParam();
  auto run = [&](uint64_t shuffle_seed) {
    // A queue of its own per run: same plan and seed, a new name.
    std::unique_ptr<WorkQueue> queue = MakeQueue(files, 20, 64, /*seed=*/11, 2);
    return Values(DrainDataset(MakePipeline(queue.get(), c, shuffle_seed)));
  };
  const std::vector<std::string> first = run(5);
  ASSERT_EQ(first.size(), 6u * 80u * 2u);
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::string> again = run(5);
    size_t same = 0;
    while (same < again.size() && again[same] == first[same]) ++same;
    EXPECT_EQ(same, first.size()) << "run " << i << " differs at " << same;
  }
  if (c.shuffle > 0) {
    EXPECT_NE(run(6), first);  // the shuffle seed matters
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, Determinism,
    ::testing::Values(
        Config{"one_thread_per_stage", 4, 3, 1, 1, true, 64, 10, 0},
        Config{"inline_map", 4, 3, 1, 0, true, 0, 10, 0},
        Config{"parallel_reads", 4, 3, 3, 1, true, 0, 10, 0},
        Config{"parallel_map", 4, 3, 1, 3, true, 0, 10, 2},
        Config{"all_parallel", 4, 3, 2, 3, true, 64, 10, 2},
        Config{"read_in_prefetch_thread", 4, 3, 1, 0, true, 64, 10, 2}),
    [](const ::testing::TestParamInfo<Config>& info) {
      return info.param.label;
    });

// Counts the records its readers return (every item's, all threads).
class CountingReader final : public RecordReader {
 public:
  CountingReader(std::unique_ptr<RecordReader> inner, std::atomic<int64_t>* count)
      : inner_(std::move(inner)), count_(count) {}
  absl::StatusOr<bool> Next(Record* record) override {
    absl::StatusOr<bool> more = inner_->Next(record);
    if (more.ok() && *more) count_->fetch_add(1);
    return more;
  }
  int64_t resume_offset() const override { return inner_->resume_offset(); }

 private:
  std::unique_ptr<RecordReader> inner_;
  std::atomic<int64_t>* const count_;
};

// How far parallel reading threads read an item ahead of a consumer that
// took one record and stopped: what Next() has read by then, once the
// reading thread stood still for a moment (it never goes past its
// read-ahead, so the bound holds whenever it is checked).
int64_t ReadAheadOf(const std::string& path, int64_t read_ahead, int64_t settle_at_least) {
  std::atomic<int64_t> count{0};
  RecordReaderFactory text = TextReaderFactory();
  RecordReaderFactory counting =
      [&](const WorkItem& item) -> absl::StatusOr<std::unique_ptr<RecordReader>> {
    absl::StatusOr<std::unique_ptr<RecordReader>> inner = text(item);
    if (!inner.ok()) return inner.status();
    return std::make_unique<CountingReader>(*std::move(inner), &count);
  };
  ListItemSource source({path});
  InterleaveOptions read;
  read.cycle_length = 2;
  read.block_length = 16;
  read.num_parallel_reads = 2;
  read.read_ahead = read_ahead;
  read.buffer_size = 16;  // what the merge keeps ready beyond the read-ahead
  auto it = ValueOrDie(ReadItems(&source, counting, read).MakeIterator());
  EXPECT_TRUE(it->Next().ok());
  EXPECT_TRUE(Eventually([&] { return count.load() >= settle_at_least; }))
      << "read " << count.load() << " records ahead, expected at least " << settle_at_least;
  absl::SleepFor(absl::Milliseconds(100));
  return count.load();
}

TEST(ReadItems, StatsCountWhatTheReadersSkipped) {
  // Two files of 20 records; in each, record 7's data is damaged. Read with
  // on_corrupt = kSkip, serially and in parallel: 38 records, and the two
  // regions and their bytes in the pipeline's stats (they were only
  // written to stderr).
  std::vector<std::string> paths;
  for (int f = 0; f < 2; ++f) {
    paths.push_back(absl::StrCat(::testing::TempDir(), "/", UniqueName("skips"), ".tfrecord"));
    std::string bytes;
    size_t damaged_at = 0;
    for (int r = 0; r < 20; ++r) {
      if (r == 7) damaged_at = bytes.size() + 14;
      bytes += EncodeTFRecord(absl::StrCat("record ", f, "-", r));
    }
    bytes[damaged_at] ^= 0x5a;
    std::ofstream(paths.back(), std::ios::binary) << bytes;
  }
  TFRecordReaderOptions options;
  options.on_corrupt = TFRecordReaderOptions::OnCorrupt::kSkip;
  options.log_skips = false;
  for (const int64_t threads : {1, 2}) {
    SCOPED_TRACE(threads);
    ListItemSource source(paths);
    InterleaveOptions read;
    read.num_parallel_reads = threads;
    auto it = ValueOrDie(
        ReadItems(&source, TFRecordReaderFactory(options), read).MakeIterator());
    std::vector<Record> records = Drain(*it);
    EXPECT_EQ(records.size(), 38u);
    const PipelineStats stats = it->stats();
    EXPECT_EQ(stats.corrupt_regions, 2);
    EXPECT_EQ(stats.skipped_bytes,
              2 * static_cast<int64_t>(EncodeTFRecord("record 0-7").size()));
  }
}

TEST(ReadItems, ParallelReadsOfSmallRecordsReadAheadByBytes) {
  // ~100-byte lines: about 256 KiB of records is ~1000 of them, far more
  // than the 64-record floor, so a reading thread is woken once per
  // hundreds of records.
  const std::string path = absl::StrCat(::testing::TempDir(), "/", UniqueName("ahead-small"), ".txt");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (int l = 0; l < 20000; ++l) out << std::string(90, 'a') << " " << l << "\n";
  }
  const int64_t read = ReadAheadOf(path, /*read_ahead=*/0, /*settle_at_least=*/600);
  EXPECT_LE(read, 2000) << "read far past ~256 KiB of records";
  std::remove(path.c_str());
}

TEST(ReadItems, ParallelReadsOfLargeRecordsReadAheadTheFloorAndAnExplicitCountIsKept) {
  // 64 KiB lines: 256 KiB would be 4 records; the floor of 64 (4 blocks)
  // holds, and reading stops there (of 400 in the file). Beyond the
  // read-ahead (and the one refill a taken block may start), the merge
  // holds up to about 6 blocks of 16: its output queue (buffer_size 16, in
  // blocks), the block it is merging and the one the consumer took.
  constexpr int64_t kMergeHolds = 6 * 16;
  const std::string path = absl::StrCat(::testing::TempDir(), "/", UniqueName("ahead-large"), ".txt");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (int l = 0; l < 400; ++l) out << std::string(64 << 10, 'b') << "\n";
  }
  int64_t read = ReadAheadOf(path, /*read_ahead=*/0, /*settle_at_least=*/64);
  EXPECT_LE(read, 64 + 17 + kMergeHolds);
  // An explicit read_ahead is a count of records, whatever their size.
  read = ReadAheadOf(path, /*read_ahead=*/200, /*settle_at_least=*/200);
  EXPECT_LE(read, 200 + 17 + kMergeHolds);
  std::remove(path.c_str());
}

TEST(ReadItems, OrderDoesNotDependOnTheNumberOfThreads) {
  const std::string tag = UniqueName("threads");
  std::vector<std::string> files = WriteTextFiles(tag, 5, 60);
  std::vector<std::string> reference;
  for (int64_t threads : {1, 2, 3, 5}) {
    Config c;
    c.cycle_length = 5;
    c.block_length = 4;
    c.parallel_reads = threads;
    c.map_threads = threads - 1;
    c.shuffle = 32;
    c.batch = 8;
    std::unique_ptr<WorkQueue> queue = MakeQueue(files, 17, 64, /*seed=*/4);
    std::vector<std::string> values =
        Values(DrainDataset(MakePipeline(queue.get(), c)));
    if (reference.empty()) reference = values;
    EXPECT_EQ(values, reference) << threads << " threads";
  }
}

TEST(ReadItems, ReadsTFRecordItems) {
  const std::string tag = UniqueName("tfrecord");
  std::vector<std::string> files;
  std::vector<std::string> expected;
  for (int f = 0; f < 3; ++f) {
    const std::string path =
        absl::StrCat(::testing::TempDir(), "/", tag, "-", f, ".tfrecord");
    auto writer = ValueOrDie(TFRecordWriter::Create(path));
    for (int r = 0; r < 70; ++r) {
      const std::string value = absl::StrCat(tag, " ", f, " ", r);
      ASSERT_TRUE(writer->Write(value).ok());
      expected.push_back(value);
    }
    ASSERT_TRUE(writer->Close().ok());
    files.push_back(path);
  }
  std::unique_ptr<WorkQueue> queue = MakeQueue(files, 11, 16);
  InterleaveOptions read;
  read.cycle_length = 8;
  read.num_parallel_reads = 2;
  BatchOptions batch;
  batch.batch_size = 9;
  std::vector<std::string> values = Values(DrainDataset(
      ReadItems(queue.get(), TFRecordReaderFactory(), read).Batch(batch)));
  EXPECT_EQ(Sorted(values), Sorted(expected));
  EXPECT_TRUE(ValueOrDie(queue->Stats()).finished);
}

}  // namespace
}  // namespace shardq::pipeline
