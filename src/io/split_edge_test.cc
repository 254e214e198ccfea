// Single splits with a known outcome, through the public readers: when a
// split is refused, where an accepted one lands relative to the reader, and
// how table splits count rows. (split_coverage_test.cc covers random and
// concurrent splits.)
#include <sqlite3.h>

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

namespace shardq {
namespace {

using ::shardq::testing_util::EncodeAll;
using ::shardq::testing_util::ExecSql;
using ::shardq::testing_util::LinesOf;
using ::shardq::testing_util::OneItemSource;
using ::shardq::testing_util::RandomPayload;
using ::shardq::testing_util::RecordOffsets;
using ::shardq::testing_util::SplitKey;
using ::shardq::testing_util::TempPath;
using ::shardq::testing_util::WriteBytes;

std::string Item(const std::string& path, int64_t start, int64_t end) {
  return FormatItem(SliceSpec{path, start, end, {}});
}

// Reads `item` to its end without splits; the (offset, line) pairs.
std::vector<std::pair<int64_t, std::string>> ReadLines(TextLineReader& reader,
                                                       ItemSource& source) {
  std::vector<std::pair<int64_t, std::string>> lines;
  while (true) {
    absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(source, 5);
    if (absl::IsOutOfRange(batch.status())) break;
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) break;
    for (const Record& record : *batch) {
      std::string item;
      int64_t offset = -1;
      EXPECT_TRUE(SplitKey(record.key, &item, &offset));
      lines.emplace_back(offset, record.value);
    }
  }
  return lines;
}

constexpr char kText[] = "alpha\n\nbeta\r\ngamma delta\nx\n\n\nlast line";

TEST(SplitCoverage, SplitIsRefusedUntilTheReaderClaimsARecord) {
  TempPath path(".txt");
  WriteBytes(path.path(), kText);
  const int64_t size = static_cast<int64_t>(sizeof(kText) - 1);
  OneItemSource source(Item(path.path(), 0, size), /*splittable=*/true);
  EXPECT_EQ(source.range().Split(10, 1), std::nullopt);
  TextLineReader reader;
  absl::StatusOr<std::vector<Record>> first = reader.ReadUpTo(source, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ(source.range().Split(10, 1), std::optional<int64_t>(10));
}

TEST(SplitCoverage, ItemWithNoLineStartCannotBeSplitAndYieldsNothing) {
  TempPath path(".txt");
  WriteBytes(path.path(), std::string(1000, 'x') + "\nnext\n");
  // Starts inside line 0.
  OneItemSource source(Item(path.path(), 100, 900), /*splittable=*/true);
  TextLineReader reader;
  EXPECT_TRUE(absl::IsOutOfRange(reader.ReadUpTo(source, 10).status()));
  EXPECT_EQ(source.done, 1);
  EXPECT_EQ(source.range().Split(500, 1), std::nullopt);
  EXPECT_EQ(source.range().end(), 900);
}

TEST(SplitCoverage, SplitBehindTheReaderLandsOnTheFirstUnclaimedOffset) {
  TempPath path(".txt");
  WriteBytes(path.path(), kText);
  const int64_t size = static_cast<int64_t>(sizeof(kText) - 1);
  const std::vector<std::pair<int64_t, std::string>> all = LinesOf(kText);
  for (size_t keep = 1; keep < all.size(); ++keep) {
    OneItemSource source(Item(path.path(), 0, size), /*splittable=*/true);
    TextLineReader reader;
    absl::StatusOr<std::vector<Record>> head =
        reader.ReadUpTo(source, static_cast<int64_t>(keep));
    ASSERT_TRUE(head.ok()) << head.status();
    ASSERT_EQ(head->size(), keep);
    // Asked to split at the very start, the range ends just past the last
    // line returned: that line stays in the head, the next goes.
    const int64_t last = all[keep - 1].first;
    EXPECT_EQ(source.range().Split(0, 1), std::optional<int64_t>(last + 1))
        << "after " << keep << " lines";
    std::vector<std::pair<int64_t, std::string>> lines(all.begin(),
                                                      all.begin() + keep);
    // The head has nothing more; the residual holds exactly the rest.
    for (auto& line : ReadLines(reader, source)) lines.push_back(line);
    EXPECT_EQ(source.done, 1);
    OneItemSource residual(Item(path.path(), last + 1, size), /*splittable=*/true);
    TextLineReader residual_reader;
    for (auto& line : ReadLines(residual_reader, residual)) lines.push_back(line);
    EXPECT_EQ(lines, all) << "after " << keep << " lines";
  }
}

TEST(SplitCoverage, SplitTooCloseToTheEndIsRefusedAndTheReaderReadsToTheEnd) {
  TempPath path(".txt");
  WriteBytes(path.path(), kText);
  const int64_t size = static_cast<int64_t>(sizeof(kText) - 1);
  const std::vector<std::pair<int64_t, std::string>> all = LinesOf(kText);
  OneItemSource source(Item(path.path(), 0, size), /*splittable=*/true);
  TextLineReader reader;
  absl::StatusOr<std::vector<Record>> first = reader.ReadUpTo(source, 1);
  ASSERT_TRUE(first.ok()) << first.status();
  const int64_t point = size - 4;
  EXPECT_EQ(source.range().Split(point, 5), std::nullopt);  // 4 bytes left < 5
  EXPECT_EQ(source.range().Split(size, 0), std::nullopt);   // nothing left
  EXPECT_EQ(source.range().end(), size);
  std::vector<std::pair<int64_t, std::string>> lines = {{0, (*first)[0].value}};
  for (auto& line : ReadLines(reader, source)) lines.push_back(line);
  EXPECT_EQ(lines, all);
  EXPECT_EQ(source.done, 1);
}

TEST(SplitCoverage, SplitLeavingExactlyMinResidualCutsTheLastLineOff) {
  TempPath path(".txt");
  WriteBytes(path.path(), kText);
  const int64_t size = static_cast<int64_t>(sizeof(kText) - 1);
  std::vector<std::pair<int64_t, std::string>> all = LinesOf(kText);
  const int64_t last_line = all.back().first;
  OneItemSource source(Item(path.path(), 0, size), /*splittable=*/true);
  TextLineReader reader;
  ASSERT_TRUE(reader.ReadUpTo(source, 1).ok());
  EXPECT_EQ(source.range().Split(last_line, size - last_line),
            std::optional<int64_t>(last_line));
  std::vector<std::pair<int64_t, std::string>> lines = {all[0]};
  for (auto& line : ReadLines(reader, source)) lines.push_back(line);
  all.pop_back();
  EXPECT_EQ(lines, all);
  OneItemSource residual(Item(path.path(), last_line, size), /*splittable=*/true);
  TextLineReader residual_reader;
  const std::vector<std::pair<int64_t, std::string>> tail =
      ReadLines(residual_reader, residual);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].first, last_line);
  EXPECT_EQ(tail[0].second, "last line");
}

TEST(SplitCoverage, TFRecordSplitBehindTheReaderKeepsReturnedRecords) {
  std::mt19937_64 rng(77);
  std::vector<std::string> records;
  for (int i = 0; i < 12; ++i) records.push_back(RandomPayload(rng));
  TempPath path(".tfrecord");
  const std::string bytes = EncodeAll(records);
  WriteBytes(path.path(), bytes);
  const int64_t size = static_cast<int64_t>(bytes.size());
  const std::vector<int64_t> offsets = RecordOffsets(records);
  for (size_t keep = 1; keep < records.size(); ++keep) {
    OneItemSource source(Item(path.path(), 0, size), /*splittable=*/true);
    TFRecordReader reader;
    absl::StatusOr<std::vector<Record>> head =
        reader.ReadUpTo(source, static_cast<int64_t>(keep));
    ASSERT_TRUE(head.ok()) << head.status();
    ASSERT_EQ(head->size(), keep);
    EXPECT_EQ(source.range().Split(offsets[keep - 1] - 3, 1),
              std::optional<int64_t>(offsets[keep - 1] + 1));
    EXPECT_TRUE(absl::IsOutOfRange(reader.ReadUpTo(source, 100).status()));
    EXPECT_EQ(source.done, 1);
    // The residual starts one byte into the last returned record and
    // resynchronises at the next one.
    OneItemSource residual(Item(path.path(), offsets[keep - 1] + 1, size),
                           /*splittable=*/true);
    TFRecordReader residual_reader;
    std::vector<std::string> got;
    for (const Record& r : *head) got.push_back(r.value);
    while (true) {
      absl::StatusOr<std::vector<Record>> batch = residual_reader.ReadUpTo(residual, 3);
      if (absl::IsOutOfRange(batch.status())) break;
      ASSERT_TRUE(batch.ok()) << batch.status();
      for (const Record& r : *batch) got.push_back(r.value);
    }
    EXPECT_EQ(got, records) << "after " << keep << " records";
  }
}

TEST(SplitCoverage, TableSplitCountsRowsByRankNotRowid) {
  const std::vector<int64_t> kRowids = {-7, 3, 1000, 1001, 5000000000LL, 6000000000LL};
  TempPath path(".db");
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.path().c_str(), &db), SQLITE_OK);
    ExecSql(db, "CREATE TABLE t(v INTEGER)");
    for (int64_t rowid : kRowids) {
      ExecSql(db, absl::StrCat("INSERT INTO t(rowid, v) VALUES(", rowid, ", ", rowid, ")"));
    }
    sqlite3_close(db);
  }
  const std::string work = absl::StrCat("sqlite:", path.path(), "?table=t");
  OneItemSource source(absl::StrCat(work, "&start=0&end=6"), /*splittable=*/true);
  TableReader reader;
  absl::StatusOr<std::vector<Row>> head = reader.ReadUpTo(source, 2);
  ASSERT_TRUE(head.ok()) << head.status();
  ASSERT_EQ(head->size(), 2u);
  EXPECT_EQ(source.range().Split(0, 1), std::optional<int64_t>(2));
  EXPECT_TRUE(absl::IsOutOfRange(reader.ReadUpTo(source, 10).status()));
  SliceSpec residual_spec = *ParseItem(absl::StrCat(work, "&start=0&end=6"));
  residual_spec.start = 2;
  OneItemSource residual(FormatItem(residual_spec), /*splittable=*/true);
  TableReader residual_reader;
  absl::StatusOr<std::vector<Row>> tail = residual_reader.ReadUpTo(residual, 10);
  ASSERT_TRUE(tail.ok()) << tail.status();
  std::vector<int64_t> rowids;
  for (const Row& row : *head) rowids.push_back(row.rowid);
  for (const Row& row : *tail) rowids.push_back(row.rowid);
  EXPECT_EQ(rowids, kRowids);
}

}  // namespace
}  // namespace shardq
