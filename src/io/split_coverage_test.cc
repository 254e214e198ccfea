// Tail rebalancing keeps coverage exact: whatever splits cut the items of a
// plan while they are read (recursively, at any point, behind or ahead of
// the reader), the records read from the heads and the residuals together
// are the data set, each record exactly once. Checked through the public
// readers for text, plain TFRecord and SQLite tables.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "shardq/item_source.h"
#include "shardq/slice.h"
#include "shardq/splittable_range.h"
#include "shardq/table_reader.h"
#include "shardq/text_line_reader.h"
#include "shardq/tfrecord_reader.h"
#include "src/core/slice_plan.h"
#include "src/io/record_test_util.h"
#include "src/io/split_coverage_data.h"

namespace shardq {
namespace {

using split_coverage::Below;
using split_coverage::DataSet;
using split_coverage::Got;
using split_coverage::RandomTableData;
using split_coverage::RandomTextData;
using split_coverage::RandomTFRecordData;
using split_coverage::ToGot;

// ---------------------------------------------------------------------------
// An ItemSource that hands out splittable items and queues the residuals.

struct SplitOutcome {
  bool attempted = false;  // an item was being read
  std::string item;
  int64_t start = 0;
  int64_t end_before = 0;
  int64_t point = 0;
  int64_t min_residual = 0;
  std::optional<int64_t> at;
};

// (item, start, end) -> (point, min_residual) of the split to try.
using ChooseSplit = std::function<std::pair<int64_t, int64_t>(
    const std::string& item, int64_t start, int64_t end)>;

// Hands out each item with its own SplittableRange, as a WorkQueue does.
// SplitCurrent splits the item being read; an accepted split queues the
// residual [at, end) as a new item (splittable in turn) at a random place.
// Thread-safe: a reader takes items while another thread splits.
class SplittingSource final : public ItemSource {
 public:
  SplittingSource(const std::vector<std::string>& items, uint64_t seed)
      : pending_(items.begin(), items.end()), rng_(seed) {}

  absl::StatusOr<WorkItem> NextItem() override {
    absl::MutexLock lock(&mu_);
    if (pending_.empty()) return absl::OutOfRangeError("no more items");
    std::string item = std::move(pending_.front());
    pending_.pop_front();
    absl::StatusOr<SliceSpec> spec = ParseItem(item);
    if (!spec.ok()) return spec.status();
    if (!spec->start.has_value() || !spec->end.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("no range: ", item));
    }
    auto range = std::make_shared<SplittableRange>(*spec->start, *spec->end);
    // Nothing is claimed yet: a split now must be refused.
    if (range->Split(*spec->start + (*spec->end - *spec->start) / 2, 0)
            .has_value() ||
        range->Split(*spec->start, 1).has_value()) {
      unclaimed_splits_accepted_.push_back(item);
    }
    if (!ranges_.emplace(item, range).second) duplicate_items_.push_back(item);
    auto generation = generation_.find(item);
    current_ = Current{item, *std::move(spec), range,
                       generation == generation_.end() ? 0 : generation->second};
    ++handed_out_;
    return WorkItem{item, 0, handed_out_ - 1, static_cast<uint64_t>(handed_out_),
                    range, std::nullopt};
  }

  absl::Status ItemDone(const WorkItem& item) override {
    absl::MutexLock lock(&mu_);
    if (!current_.has_value() || current_->item != item.item) {
      protocol_errors_.push_back("ItemDone of an item not being read: " + item.item);
    }
    if (++done_[item.item] > 1) {
      protocol_errors_.push_back("ItemDone twice: " + item.item);
    }
    current_.reset();
    return absl::OkStatus();
  }

  SplitOutcome SplitCurrent(const ChooseSplit& choose) {
    absl::MutexLock lock(&mu_);
    SplitOutcome outcome;
    if (!current_.has_value()) return outcome;
    SplittableRange& range = *current_->range;
    outcome.attempted = true;
    outcome.item = current_->item;
    outcome.start = range.start();
    outcome.end_before = range.end();
    std::tie(outcome.point, outcome.min_residual) =
        choose(outcome.item, outcome.start, outcome.end_before);
    outcome.at = range.Split(outcome.point, outcome.min_residual);
    if (outcome.at.has_value()) {
      SliceSpec residual = current_->spec;
      residual.start = *outcome.at;
      residual.end = outcome.end_before;
      const auto where = static_cast<std::ptrdiff_t>(rng_() % (pending_.size() + 1));
      const std::string residual_item = FormatItem(residual);
      pending_.insert(pending_.begin() + where, residual_item);
      generation_[residual_item] = current_->generation + 1;
      max_generation_ = std::max(max_generation_, current_->generation + 1);
      ++splits_;
    }
    return outcome;
  }

  // The range an item was handed out with (its end is final once done).
  std::shared_ptr<SplittableRange> RangeOf(const std::string& item) const {
    absl::MutexLock lock(&mu_);
    auto it = ranges_.find(item);
    return it == ranges_.end() ? nullptr : it->second;
  }

  // Every item handed out was done exactly once, and nothing was split
  // before its reader claimed a record.
  void ExpectConsistent(const std::string& context) const {
    absl::MutexLock lock(&mu_);
    EXPECT_TRUE(pending_.empty()) << context;
    if (current_.has_value()) {
      ADD_FAILURE() << context << ": never done: " << current_->item;
    }
    for (const auto& [item, range] : ranges_) {
      EXPECT_EQ(done_.count(item), 1u) << context << ": never done: " << item;
    }
    for (const std::string& error : protocol_errors_) {
      ADD_FAILURE() << context << ": " << error;
    }
    for (const std::string& item : unclaimed_splits_accepted_) {
      ADD_FAILURE() << context << ": split accepted before any claim: " << item;
    }
    for (const std::string& item : duplicate_items_) {
      ADD_FAILURE() << context << ": item handed out twice: " << item;
    }
  }

  int64_t splits() const {
    absl::MutexLock lock(&mu_);
    return splits_;
  }

  // 0: no split; 1: plan items were split; 2: so were residuals; ...
  int max_generation() const {
    absl::MutexLock lock(&mu_);
    return max_generation_;
  }

 private:
  struct Current {
    std::string item;
    SliceSpec spec;
    std::shared_ptr<SplittableRange> range;
    int generation = 0;  // residual of a residual of ... a plan item
  };

  mutable absl::Mutex mu_;
  std::deque<std::string> pending_ ABSL_GUARDED_BY(mu_);
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  std::optional<Current> current_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<SplittableRange>> ranges_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> done_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> protocol_errors_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> unclaimed_splits_accepted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> duplicate_items_ ABSL_GUARDED_BY(mu_);
  int64_t handed_out_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t splits_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> generation_ ABSL_GUARDED_BY(mu_);  // residuals
  int max_generation_ ABSL_GUARDED_BY(mu_) = 0;
};

// ---------------------------------------------------------------------------
// Checks.

// The records read are the data set exactly, and each was read from an item
// whose final range holds it.
void ExpectExactCoverage(const DataSet& data, const std::vector<Got>& got,
                         const SplittingSource& source, const std::string& context) {
  std::map<std::pair<std::string, int64_t>, int> times_read;
  int failures = 0;
  auto fail = [&]() -> bool { return ++failures <= 10; };
  for (const Got& g : got) {
    const auto key = std::make_pair(g.work, g.offset);
    ++times_read[key];
    auto expected = data.records.find(key);
    if (expected == data.records.end()) {
      if (fail()) {
        ADD_FAILURE() << context << ": read a record that is not in the data set: "
                      << g.work << " @" << g.offset << " from " << g.item;
      }
      continue;
    }
    if (expected->second != g.content && fail()) {
      ADD_FAILURE() << context << ": wrong content for " << g.work << " @" << g.offset
                    << " from " << g.item << " (" << g.content.size() << " bytes, want "
                    << expected->second.size() << ")";
    }
    std::shared_ptr<SplittableRange> range = source.RangeOf(g.item);
    if (range == nullptr) {
      if (fail()) ADD_FAILURE() << context << ": unknown item " << g.item;
    } else if ((g.offset < range->start() || g.offset >= range->end()) && fail()) {
      ADD_FAILURE() << context << ": " << g.work << " @" << g.offset << " read from "
                    << g.item << " whose final range is [" << range->start() << ", "
                    << range->end() << ")";
    }
  }
  for (const auto& [key, record] : data.records) {
    auto it = times_read.find(key);
    const int n = it == times_read.end() ? 0 : it->second;
    if (n != 1 && fail()) {
      ADD_FAILURE() << context << ": " << key.first << " @" << key.second << " read "
                    << n << " times";
    }
  }
  EXPECT_EQ(got.size(), data.records.size()) << context;
  EXPECT_LE(failures, 10) << context << ": " << failures << " failures in all";
  source.ExpectConsistent(context);
}

// How much splitting a test did, to check that it tested something.
struct SplitCounts {
  int64_t splits = 0;
  int max_generation = 0;
};

// Random split requests: inside the range, behind or at the reader, at
// the start, close to or past the end; min_residual from none to huge.
std::pair<int64_t, int64_t> RandomSplit(std::mt19937_64& rng, int64_t start,
                                        int64_t end, std::optional<int64_t> last) {
  const int64_t length = std::max<int64_t>(end - start, 1);
  const int64_t reader = last.value_or(start);
  int64_t point;
  switch (Below(rng, 7)) {
    case 0:
    case 1:
      point = start + Below(rng, length);
      break;
    case 2:  // behind the reader
      point = start - 2 + Below(rng, std::max<int64_t>(reader - start + 3, 1));
      break;
    case 3:  // right at the reader
      point = reader + Below(rng, 3) - 1;
      break;
    case 4:  // close to the end
      point = end - Below(rng, 8);
      break;
    case 5:  // past the end
      point = end + Below(rng, 5);
      break;
    default:  // just ahead of the reader
      point = reader + 1 + Below(rng, std::max<int64_t>(length / 8, 1));
      break;
  }
  int64_t min_residual;
  switch (Below(rng, 5)) {
    case 0:
      min_residual = 0;
      break;
    case 1:
      min_residual = 1;
      break;
    case 2:
      min_residual = Below(rng, 32);
      break;
    case 3:
      min_residual = Below(rng, length + 1);
      break;
    default:
      min_residual = length + Below(rng, 100);  // never fits
      break;
  }
  return {point, min_residual};
}

// Reads every item of `plan` with splits between batches of random sizes,
// checking each split's outcome exactly: the reader has claimed precisely
// the records it returned, so the split point is determined.
template <typename Reader>
void ReadWithRandomSplits(Reader& reader, const DataSet& data,
                          const std::vector<std::string>& plan, std::mt19937_64& rng,
                          const std::string& context, SplitCounts* counts) {
  SplittingSource source(plan, rng());
  std::vector<Got> got;
  std::map<std::string, int64_t> last_returned;  // per item
  const int64_t split_percent = Below(rng, 70);
  int64_t calls = 0;
  while (true) {
    ASSERT_LT(++calls, 1000000) << context << ": the reader does not finish";
    const int64_t n = Below(rng, 8) == 0 ? 1 + Below(rng, 300) : 1 + Below(rng, 6);
    auto batch = reader.ReadUpTo(source, n);
    if (absl::IsOutOfRange(batch.status())) break;
    ASSERT_TRUE(batch.ok()) << context << ": " << batch.status();
    ASSERT_FALSE(batch->empty()) << context;
    ASSERT_LE(static_cast<int64_t>(batch->size()), n) << context;
    for (const auto& record : *batch) {
      got.push_back(ToGot(record, data));
      last_returned[got.back().item] = got.back().offset;
    }
    const int tries = Below(rng, 100) < split_percent ? 1 + static_cast<int>(Below(rng, 3)) : 0;
    for (int t = 0; t < tries; ++t) {
      std::optional<int64_t> last;
      const SplitOutcome outcome = source.SplitCurrent(
          [&](const std::string& item, int64_t start, int64_t end) {
            auto it = last_returned.find(item);
            if (it != last_returned.end()) last = it->second;
            return RandomSplit(rng, start, end, last);
          });
      if (!outcome.attempted) break;
      // Between batches the current item has returned a record (an item
      // that runs out is done at once), and claimed exactly those.
      ASSERT_TRUE(last.has_value()) << context << ": " << outcome.item;
      const int64_t lands = std::max({outcome.point, *last + 1, outcome.start + 1});
      const bool fits =
          lands < outcome.end_before &&
          outcome.end_before - lands >= std::max<int64_t>(outcome.min_residual, 1);
      const std::string what = absl::StrCat(
          context, ": Split(", outcome.point, ", ", outcome.min_residual, ") of ",
          outcome.item, " at end ", outcome.end_before, ", last record at ", *last);
      if (fits) {
        EXPECT_EQ(outcome.at, std::optional<int64_t>(lands)) << what;
      } else {
        EXPECT_EQ(outcome.at, std::nullopt) << what;
      }
      std::shared_ptr<SplittableRange> range = source.RangeOf(outcome.item);
      EXPECT_EQ(range->end(), outcome.at.value_or(outcome.end_before)) << what;
    }
  }
  counts->splits += source.splits();
  counts->max_generation = std::max(counts->max_generation, source.max_generation());
  ExpectExactCoverage(data, got, source, context);
}

// As ReadWithRandomSplits, but another thread splits whatever item is being
// read at random moments while the reader reads.
template <typename Reader>
void ReadWhileAnotherThreadSplits(Reader& reader, const DataSet& data,
                                  const std::vector<std::string>& plan,
                                  std::mt19937_64& rng, const std::string& context,
                                  SplitCounts* counts) {
  SplittingSource source(plan, rng());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> split_calls{0};
  const uint64_t splitter_seed = rng();
  std::thread splitter([&] {
    std::mt19937_64 split_rng(splitter_seed);
    while (!stop.load()) {
      for (int64_t i = Below(split_rng, 20); i > 0; --i) std::this_thread::yield();
      const SplitOutcome outcome = source.SplitCurrent(
          [&](const std::string&, int64_t start, int64_t end) {
            return RandomSplit(split_rng, start, end, std::nullopt);
          });
      split_calls.fetch_add(1);
      if (!outcome.attempted || !outcome.at.has_value()) continue;
      const int64_t at = *outcome.at;
      EXPECT_GE(at, outcome.point) << context;
      EXPECT_GT(at, outcome.start) << context;
      EXPECT_LT(at, outcome.end_before) << context;
      EXPECT_GE(outcome.end_before - at, std::max<int64_t>(outcome.min_residual, 1))
          << context;
    }
  });
  std::vector<Got> got;
  while (true) {
    const int64_t n = 1 + Below(rng, 16);
    auto batch = reader.ReadUpTo(source, n);
    if (absl::IsOutOfRange(batch.status())) break;
    if (!batch.ok()) {
      ADD_FAILURE() << context << ": " << batch.status();
      break;
    }
    for (const auto& record : *batch) got.push_back(ToGot(record, data));
    // Consuming a batch takes time: leave the splitter room to act. After
    // the first batch the reader waits for one split call (on a loaded
    // machine the splitter may otherwise not run before the reader ends).
    if (got.size() == batch->size()) {
      const absl::Time give_up = absl::Now() + absl::Seconds(10);
      while (split_calls.load() == 0 && absl::Now() < give_up) std::this_thread::yield();
    } else if (Below(rng, 2) == 0) {
      std::this_thread::yield();
    }
  }
  stop.store(true);
  splitter.join();
  counts->splits += source.splits();
  counts->max_generation = std::max(counts->max_generation, source.max_generation());
  ExpectExactCoverage(data, got, source, context);
}

std::vector<std::string> RandomPlan(const DataSet& data, std::mt19937_64& rng) {
  absl::StatusOr<std::vector<std::string>> plan =
      PlanSlices(data.works, 1 + Below(rng, 30));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : std::vector<std::string>{};
}

TableReaderOptions RandomTableOptions(std::mt19937_64& rng) {
  TableReaderOptions options;
  options.batch_rows = 1 + Below(rng, 300);
  options.max_open_tables = 1 + Below(rng, 3);
  return options;
}

// ---------------------------------------------------------------------------
// Coverage under random recursive splits.

#if defined(__SANITIZE_THREAD__)
#define SHARDQ_SPLIT_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHARDQ_SPLIT_TEST_UNDER_TSAN 1
#endif
#endif

// ThreadSanitizer runs this binary for its concurrent tests, about 20 times
// slower: there the random trials (and what they must reach) are scaled down.
int Scaled(int n) {
#ifdef SHARDQ_SPLIT_TEST_UNDER_TSAN
  return std::max(n / 4, 1);
#else
  return n;
#endif
}

TEST(SplitCoverage, TextLinesAreReadExactlyOnceUnderRandomSplits) {
  std::mt19937_64 rng(5101);
  SplitCounts counts;
  for (int trial = 0; trial < Scaled(150); ++trial) {
    DataSet data = RandomTextData(rng);
    const std::vector<std::string> plan = RandomPlan(data, rng);
    TextLineReader reader;
    ReadWithRandomSplits(reader, data, plan, rng, absl::StrCat("text trial ", trial),
                         &counts);
    if (HasFatalFailure()) return;
  }
  // The trials did split, many times, and split residuals again.
  EXPECT_GT(counts.splits, Scaled(300));
  EXPECT_GE(counts.max_generation, 3);
}

TEST(SplitCoverage, TFRecordsAreReadExactlyOnceUnderRandomSplits) {
  std::mt19937_64 rng(5202);
  SplitCounts counts;
  for (int trial = 0; trial < Scaled(150); ++trial) {
    DataSet data = RandomTFRecordData(rng);
    const std::vector<std::string> plan = RandomPlan(data, rng);
    TFRecordReaderOptions options;
    options.buffer_bytes = Below(rng, 2) == 0 ? 64 + Below(rng, 4096) : 256 << 10;
    TFRecordReader reader(options);
    ReadWithRandomSplits(reader, data, plan, rng,
                         absl::StrCat("tfrecord trial ", trial), &counts);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(counts.splits, Scaled(300));
  EXPECT_GE(counts.max_generation, 3);
}

TEST(SplitCoverage, TableRowsAreReadExactlyOnceUnderRandomSplits) {
  std::mt19937_64 rng(5303);
  SplitCounts counts;
  for (int trial = 0; trial < Scaled(40); ++trial) {
    DataSet data = RandomTableData(rng);
    const std::vector<std::string> plan = RandomPlan(data, rng);
    TableReader reader(RandomTableOptions(rng));
    ReadWithRandomSplits(reader, data, plan, rng, absl::StrCat("table trial ", trial),
                         &counts);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(counts.splits, Scaled(200));
  EXPECT_GE(counts.max_generation, 3);
}

TEST(SplitCoverageConcurrency, TextLinesAreReadExactlyOnceWhileSplitConcurrently) {
  std::mt19937_64 rng(5404);
  SplitCounts counts;
  // More trials while none has split yet (scheduling decides how many do).
  for (int trial = 0; trial < Scaled(40) || (counts.splits == 0 && trial < 10 * Scaled(40));
       ++trial) {
    DataSet data = RandomTextData(rng);
    const std::vector<std::string> plan = RandomPlan(data, rng);
    TextLineReader reader;
    ReadWhileAnotherThreadSplits(reader, data, plan, rng,
                                 absl::StrCat("text trial ", trial), &counts);
  }
  EXPECT_GT(counts.splits, 0);  // how many depends on scheduling
}

TEST(SplitCoverageConcurrency, TFRecordsAreReadExactlyOnceWhileSplitConcurrently) {
  std::mt19937_64 rng(5505);
  SplitCounts counts;
  // More trials while none has split yet (scheduling decides how many do).
  for (int trial = 0; trial < Scaled(20) || (counts.splits == 0 && trial < 10 * Scaled(20));
       ++trial) {
    DataSet data = RandomTFRecordData(rng);
    const std::vector<std::string> plan = RandomPlan(data, rng);
    TFRecordReader reader;
    ReadWhileAnotherThreadSplits(reader, data, plan, rng,
                                 absl::StrCat("tfrecord trial ", trial), &counts);
  }
  EXPECT_GT(counts.splits, 0);  // how many depends on scheduling
}

TEST(SplitCoverageConcurrency, TableRowsAreReadExactlyOnceWhileSplitConcurrently) {
  std::mt19937_64 rng(5606);
  SplitCounts counts;
  // More trials while none has split yet (scheduling decides how many do).
  for (int trial = 0; trial < Scaled(15) || (counts.splits == 0 && trial < 10 * Scaled(15));
       ++trial) {
    DataSet data = RandomTableData(rng);
    const std::vector<std::string> plan = RandomPlan(data, rng);
    TableReader reader(RandomTableOptions(rng));
    ReadWhileAnotherThreadSplits(reader, data, plan, rng,
                                 absl::StrCat("table trial ", trial), &counts);
  }
  EXPECT_GT(counts.splits, 0);  // how many depends on scheduling
}

}  // namespace
}  // namespace shardq
