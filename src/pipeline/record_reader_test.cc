#include "shardq/pipeline/record_reader.h"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardq/splittable_range.h"
#include "sqlite3.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/tfrecord.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline {
namespace {

using ::shardq::pipeline::testutil::ValueOrDie;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/record_reader_test-", name);
}

// An item as a WorkQueue hands it out: its string parsed once.
WorkItem Item(const std::string& item,
              std::shared_ptr<SplittableRange> range = nullptr) {
  WorkItem work_item;
  work_item.item = item;
  work_item.range = std::move(range);
  EXPECT_TRUE(ParseWorkItem(&work_item).ok()) << item;
  return work_item;
}

struct Read {
  std::vector<Record> records;
  std::vector<int64_t> resume_offsets;
};

Read ReadAll(const RecordReaderFactory& factory, const std::string& item) {
  std::unique_ptr<RecordReader> reader = ValueOrDie(factory(Item(item)));
  Read read;
  Record record;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(&record);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    read.records.push_back(record);
    read.resume_offsets.push_back(reader->resume_offset());
  }
  return read;
}

std::string WriteTFRecords(const std::string& name, int n,
                           std::vector<int64_t>* offsets) {
  const std::string path = TempPath(name);
  std::unique_ptr<TFRecordWriter> writer =
      ValueOrDie(TFRecordWriter::Create(path));
  for (int i = 0; i < n; ++i) {
    if (offsets != nullptr) offsets->push_back(writer->size());
    EXPECT_TRUE(writer->Write(absl::StrCat("record ", i)).ok());
  }
  EXPECT_TRUE(writer->Close().ok());
  return path;
}

TEST(TextReaderFactory, ReadsLinesKeyedByOffsetWithResumeOffsets) {
  const std::string path = TempPath("lines.txt");
  std::ofstream(path, std::ios::binary) << "a\nbb\r\nccc";
  Read read = ReadAll(TextReaderFactory(), path);
  ASSERT_EQ(read.records.size(), 3u);
  EXPECT_EQ(read.records[0].value, "a");
  EXPECT_EQ(read.records[1].value, "bb");
  EXPECT_EQ(read.records[2].value, "ccc");
  EXPECT_EQ(read.records[0].key, path + ":0");
  EXPECT_EQ(read.records[1].key, path + ":2");
  EXPECT_EQ(read.records[2].key, path + ":6");
  EXPECT_EQ(read.resume_offsets, (std::vector<int64_t>{2, 6, 9}));
}

TEST(TextReaderFactory, ReadsOnlyTheLinesStartingInTheSlice) {
  const std::string path = TempPath("slice.txt");
  std::ofstream(path, std::ios::binary) << "a\nbb\r\nccc";
  const std::string item = path + "?start=1&end=6";
  Read read = ReadAll(TextReaderFactory(), item);
  ASSERT_EQ(read.records.size(), 1u);
  EXPECT_EQ(read.records[0].value, "bb");
  EXPECT_EQ(read.records[0].key, item + ":2");
}

TEST(TextReaderFactory, MissingFileIsNotFoundNamingThePath) {
  const std::string path = TempPath("no-such-file.txt");
  absl::StatusOr<std::unique_ptr<RecordReader>> reader =
      TextReaderFactory()(Item(path));
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(reader.status().message(), HasSubstr(path));
}

// Issue 16: the pipeline reads TFRecord items through the same per-item
// reader as TFRecordReader, so it reports the same progress: the offset
// after each record returned (before, -1: not resumable).
TEST(TFRecordReaderFactory, ReadsRecordsKeyedByOffsetWithResumeOffsets) {
  std::vector<int64_t> offsets;
  const std::string path = WriteTFRecords("plain.tfrecord", 5, &offsets);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  offsets.push_back(static_cast<int64_t>(in.tellg()));
  Read read = ReadAll(TFRecordReaderFactory(), path);
  ASSERT_EQ(read.records.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(read.records[i].value, absl::StrCat("record ", i));
    EXPECT_EQ(read.records[i].key, absl::StrCat(path, ":", offsets[i]));
    EXPECT_EQ(read.resume_offsets[i], offsets[i + 1]);
  }
}

// RecordKeys::kSkip: the same records, values and progress, with every
// key empty, also in a record that held a key before (a reused one).
TEST(RecordKeys, SkipLeavesKeysEmptyAndChangesNothingElse) {
  const std::string text = TempPath("keys.txt");
  std::ofstream(text, std::ios::binary) << "a\nbb\r\nccc";
  const std::string tfrecord = WriteTFRecords("keys.tfrecord", 5, nullptr);
  for (const auto& [path, fill, skip] :
       {std::make_tuple(text, TextReaderFactory(), TextReaderFactory(RecordKeys::kSkip)),
        std::make_tuple(tfrecord, TFRecordReaderFactory(),
                        TFRecordReaderFactory({}, RecordKeys::kSkip))}) {
    SCOPED_TRACE(path);
    const Read with_keys = ReadAll(fill, path);
    const Read without = ReadAll(skip, path);
    ASSERT_EQ(without.records.size(), with_keys.records.size());
    ASSERT_FALSE(with_keys.records.empty());
    for (size_t i = 0; i < without.records.size(); ++i) {
      EXPECT_EQ(without.records[i].value, with_keys.records[i].value);
      EXPECT_FALSE(with_keys.records[i].key.empty());
      EXPECT_EQ(without.records[i].key, "");
    }
    EXPECT_EQ(without.resume_offsets, with_keys.resume_offsets);

    std::unique_ptr<RecordReader> reader = ValueOrDie(skip(Item(path)));
    Record reused{"a key from before", "a value from before"};
    ASSERT_TRUE(ValueOrDie(reader->Next(&reused)));
    EXPECT_EQ(reused.key, "");
    EXPECT_EQ(reused.value, with_keys.records[0].value);
  }
}

TEST(TFRecordReaderFactory, SlicesTogetherYieldEveryRecordOnce) {
  const std::string path = WriteTFRecords("sliced.tfrecord", 40, nullptr);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const int64_t size = static_cast<int64_t>(in.tellg());
  std::vector<std::string> values;
  for (int k = 0; k < 3; ++k) {
    const std::string item = absl::StrCat(path, "?start=", size * k / 3,
                                          "&end=", size * (k + 1) / 3);
    for (const Record& r : ReadAll(TFRecordReaderFactory(), item).records) {
      values.push_back(r.value);
    }
  }
  ASSERT_EQ(values.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(values[i], absl::StrCat("record ", i));
}

TEST(TFRecordReaderFactory, MissingFileIsNotFoundNamingThePath) {
  const std::string path = TempPath("no-such-file.tfrecord");
  // The file is opened once, by the factory (the contract allows the
  // first Next too).
  absl::StatusOr<std::unique_ptr<RecordReader>> reader =
      TFRecordReaderFactory()(Item(path));
  absl::Status status = reader.status();
  if (reader.ok()) {
    Record record;
    status = (*reader)->Next(&record).status();
  }
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST(ReaderFactoryFor, ChoosesTheFormat) {
  const std::string text = TempPath("choose.txt");
  std::ofstream(text, std::ios::binary) << "x\ny\n";
  EXPECT_EQ(ReadAll(ReaderFactoryFor(RecordFormat::kText), text).records.size(),
            2u);
  const std::string tfrecord = WriteTFRecords("choose.tfrecord", 3, nullptr);
  EXPECT_EQ(
      ReadAll(ReaderFactoryFor(RecordFormat::kTFRecord), tfrecord).records.size(),
      3u);
}

// Issue 15 item 1: the pipeline (shardq.data.from_queue) gives a compressed
// item's reader the item's live range; its records lie past offset 1 of the
// decompressed stream, and claiming them there stopped after the first.
TEST(TFRecordReaderFactory, CompressedItemWithALiveRangeIsReadWhole) {
  const std::string path = TempPath("live-range.tfrecord.gz");
  std::unique_ptr<CompressedTFRecordWriter> writer =
      ValueOrDie(CompressedTFRecordWriter::Create(path, FileCompression::kGzip));
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(writer->Write(absl::StrCat("record ", i)).ok());
  }
  ASSERT_TRUE(writer->Close().ok());
  const std::string item = path + "?start=0&end=1";  // the item older plans made
  std::unique_ptr<RecordReader> reader = ValueOrDie(
      TFRecordReaderFactory()(Item(item, std::make_shared<SplittableRange>(0, 1))));
  int64_t records = 0;
  Record record;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(&record);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ++records;
  }
  EXPECT_EQ(records, 500);
}

// Issue 15 items 4 and 5 through the pipeline's readers.
TEST(TextReaderFactory, RefusesATFRecordFileAndAFileShorterThanTheItem) {
  const std::string tfrecord = WriteTFRecords("as-text.tfrecord", 20, nullptr);
  absl::StatusOr<std::unique_ptr<RecordReader>> reader = TextReaderFactory()(Item(tfrecord));
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reader.status().message(), HasSubstr("looks like a TFRecord file"));

  const std::string text = TempPath("short.txt");
  std::ofstream(text, std::ios::binary) << "x\ny\n";
  reader = TextReaderFactory()(Item(text + "?start=0&end=100"));
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reader.status().message(),
              HasSubstr("changed since the plan was made: size 4, item ends at 100"));
}

}  // namespace
// A table t(v) holding v = rowid for rowids 1..rows.
std::string MakeTable(const std::string& name, int rows) {
  const std::string path = TempPath(name);
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  std::string sql = "CREATE TABLE t(v INTEGER); BEGIN;";
  for (int i = 1; i <= rows; ++i) absl::StrAppend(&sql, "INSERT INTO t(v) VALUES(", i, ");");
  absl::StrAppend(&sql, "COMMIT;");
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  return path;
}

std::vector<int64_t> ReadValues(ItemReader<Row>& reader, int64_t limit) {
  std::vector<int64_t> values;
  Row row;
  while (static_cast<int64_t>(values.size()) < limit) {
    absl::StatusOr<bool> more = reader.Next(&row);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    values.push_back(std::get<int64_t>(row.values.at(0)));
  }
  return values;
}

TEST(TableReaderFactory, ReadsEachSliceOnceAndLendsReadersOnlyWhenDone) {
  const std::string path = MakeTable("slices.db", 100);
  const std::string first = absl::StrCat("sqlite:", path, "?table=t&start=0&end=40");
  const std::string second = absl::StrCat("sqlite:", path, "?table=t&start=40&end=100");
  ItemReaderFactory<Row> factory = TableReaderFactory();
  {
    // Stopped mid-item: its reader must not carry the rest into the next.
    std::unique_ptr<ItemReader<Row>> abandoned = ValueOrDie(factory(Item(first)));
    EXPECT_EQ(ReadValues(*abandoned, 5), (std::vector<int64_t>{1, 2, 3, 4, 5}));
    EXPECT_EQ(abandoned->resume_offset(), 5);  // the rank of the next row
  }
  std::vector<int64_t> all;
  for (const std::string& item : {first, second}) {
    std::unique_ptr<ItemReader<Row>> reader = ValueOrDie(factory(Item(item)));
    Row row;
    ASSERT_TRUE(*reader->Next(&row));
    EXPECT_EQ(row.key, absl::StrCat(item, ":", row.rowid));
    all.push_back(std::get<int64_t>(row.values.at(0)));
    for (int64_t v : ReadValues(*reader, 1000)) all.push_back(v);
  }
  std::vector<int64_t> expected(100);
  for (int i = 0; i < 100; ++i) expected[static_cast<size_t>(i)] = i + 1;
  EXPECT_EQ(all, expected);
}

TEST(TableReaderFactory, MissingDatabaseIsNamed) {
  ItemReaderFactory<Row> factory = TableReaderFactory();
  std::unique_ptr<ItemReader<Row>> reader =
      ValueOrDie(factory(Item("sqlite:/nonexistent/shardq.db?table=t")));
  Row row;
  absl::StatusOr<bool> more = reader->Next(&row);
  EXPECT_TRUE(absl::IsNotFound(more.status())) << more.status();
  EXPECT_THAT(more.status().message(), HasSubstr("/nonexistent/shardq.db"));
}

}  // namespace shardq::pipeline
