#include "shardq/pipeline/record_reader.h"

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/tfrecord.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline {
namespace {

using ::shardq::pipeline::testutil::ValueOrDie;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/record_reader_test-", name);
}

struct Read {
  std::vector<Record> records;
  std::vector<int64_t> resume_offsets;
};

Read ReadAll(const RecordReaderFactory& factory, const std::string& item) {
  std::unique_ptr<RecordReader> reader = ValueOrDie(factory(item));
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
      TextReaderFactory()(path);
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(reader.status().message(), HasSubstr(path));
}

TEST(TFRecordReaderFactory, ReadsRecordsKeyedByOffset) {
  std::vector<int64_t> offsets;
  const std::string path = WriteTFRecords("plain.tfrecord", 5, &offsets);
  Read read = ReadAll(TFRecordReaderFactory(), path);
  ASSERT_EQ(read.records.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(read.records[i].value, absl::StrCat("record ", i));
    EXPECT_EQ(read.records[i].key, absl::StrCat(path, ":", offsets[i]));
    EXPECT_EQ(read.resume_offsets[i], -1);  // not resumable
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
  std::unique_ptr<RecordReader> reader =
      ValueOrDie(TFRecordReaderFactory()(path));  // opens lazily
  Record record;
  absl::StatusOr<bool> more = reader->Next(&record);
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(more.status().message(), HasSubstr(path));
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

}  // namespace
}  // namespace shardq::pipeline
