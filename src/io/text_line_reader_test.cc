#include "shardq/text_line_reader.h"

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "src/io/record_test_util.h"
#include "shardq/slice.h"
#include "src/core/rng.h"
#include "src/core/slice_plan.h"
#include "src/io/compression.h"
#include "src/io/text_slice_reader.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace {

std::string WriteFile(const std::string& name, const std::string& contents) {
  std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

// The records a plain reading of the file gives: split at '\n', drop a '\r'
// before it, a final line without newline counts, nothing after a final '\n'.
std::vector<std::string> Oracle(const std::string& contents) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < contents.size()) {
    size_t nl = contents.find('\n', pos);
    if (nl == std::string::npos) {
      lines.push_back(contents.substr(pos));
      break;
    }
    std::string line = contents.substr(pos, nl - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
    pos = nl + 1;
  }
  return lines;
}

std::vector<std::string> ReadItems(const std::vector<std::string>& items) {
  ListItemSource source(items);
  TextLineReader reader;
  std::vector<std::string> lines;
  while (true) {
    absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(source, 7);
    if (absl::IsOutOfRange(batch.status())) break;
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) break;
    for (Record& r : *batch) lines.push_back(r.value);
  }
  return lines;
}

std::string RandomContents(SplitMix64& rng) {
  std::string s;
  const int kind = static_cast<int>(rng.UniformBelow(6));
  if (kind == 0) return "";                                  // empty file
  if (kind == 1) return std::string(300000 + rng.UniformBelow(100000), 'L');  // one huge line
  const int lines = static_cast<int>(rng.UniformBelow(400));
  for (int i = 0; i < lines; ++i) {
    const int len = rng.UniformBelow(4) == 0 ? 0 : static_cast<int>(rng.UniformBelow(120));
    for (int j = 0; j < len; ++j) s.push_back(static_cast<char>('a' + rng.UniformBelow(26)));
    if (kind == 2) s += "\r\n";  // CRLF
    else s += "\n";
  }
  if (kind == 3 && !s.empty()) s.pop_back();  // no trailing newline
  if (kind == 4) s += "\n\n\n";               // empty lines at the end
  return s;
}

TEST(TextLineReader, SlicesTogetherYieldEveryLineExactlyOnce) {
  SplitMix64 rng(2026);
  for (int trial = 0; trial < 120; ++trial) {
    const std::string contents = RandomContents(rng);
    const std::string path = WriteFile("lines-" + std::to_string(trial), contents);
    const int64_t slices = 1 + static_cast<int64_t>(rng.UniformBelow(40));
    absl::StatusOr<std::vector<std::string>> plan =
        PlanSlices({{path, static_cast<int64_t>(contents.size())}}, slices);
    ASSERT_TRUE(plan.ok());
    EXPECT_EQ(ReadItems(*plan), Oracle(contents))
        << "trial " << trial << ", " << slices << " slices, " << contents.size() << " bytes";
  }
}

TEST(TextLineReader, EverySplitPointOfASmallFileCoversExactly) {
  const std::string contents = "a\n\nbc\r\nlonger line\nx";
  const std::string path = WriteFile("small", contents);
  const int64_t n = static_cast<int64_t>(contents.size());
  for (int64_t cut = 0; cut <= n; ++cut) {
    std::vector<std::string> items = {
        FormatItem({path, 0, cut, {}}), FormatItem({path, cut, n, {}})};
    EXPECT_EQ(ReadItems(items), Oracle(contents)) << "cut at " << cut;
  }
}

TEST(TextLineReader, KeysNameItemAndByteOffset) {
  const std::string path = WriteFile("keys", "ab\ncd\n");
  ListItemSource source({path});
  TextLineReader reader;
  absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(source, 10);
  ASSERT_TRUE(batch.ok());
  ASSERT_EQ(batch->size(), 2u);
  EXPECT_EQ((*batch)[0].key, path + ":0");
  EXPECT_EQ((*batch)[1].key, path + ":3");
  EXPECT_EQ((*batch)[1].value, "cd");
}

TEST(TextLineReader, MissingFileIsNotFoundWithItsPath) {
  ListItemSource source({"/nonexistent/shardq/file.txt?start=0&end=10"});
  TextLineReader reader;
  absl::Status s = reader.ReadUpTo(source, 1).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/nonexistent/shardq/file.txt"), std::string::npos);
}

TEST(TextLineReader, CompletesAnItemOnlyAfterItsLastLine) {
  testing_util::OneItemSource source(WriteFile("three", "1\n2\n3\n"));
  TextLineReader reader;
  ASSERT_EQ(reader.ReadUpTo(source, 2)->size(), 2u);
  EXPECT_EQ(source.done, 0);
  ASSERT_EQ(reader.ReadUpTo(source, 2)->size(), 1u);
  EXPECT_EQ(source.done, 1);
  EXPECT_TRUE(absl::IsOutOfRange(reader.ReadUpTo(source, 2).status()));
}

// The ReadUpTo into a caller's vector: the same lines and keys as the one
// returning a new vector, written over what the vector held.
TEST(TextLineReader, ReadUpToIntoACallersVectorOverwritesItWithTheSameRecords) {
  SplitMix64 rng(9);
  std::string contents;
  for (int i = 0; i < 3; ++i) contents += RandomContents(rng);
  const std::vector<std::string> items = {WriteFile("reuse-a", contents),
                                          WriteFile("reuse-b", "x\nyy\n")};
  ListItemSource reference_source(items);
  TextLineReader reference;
  std::vector<Record> expected;
  while (true) {
    absl::StatusOr<std::vector<Record>> batch = reference.ReadUpTo(reference_source, 5);
    if (absl::IsOutOfRange(batch.status())) break;
    ASSERT_TRUE(batch.ok()) << batch.status();
    expected.insert(expected.end(), batch->begin(), batch->end());
  }
  ListItemSource source(items);
  TextLineReader reader;
  std::vector<Record> batch(4, Record{"stale key", std::string(500, 's')});
  std::vector<Record> got;
  while (true) {
    absl::Status s = reader.ReadUpTo(source, 9, &batch);
    if (absl::IsOutOfRange(s)) {
      EXPECT_TRUE(batch.empty());
      break;
    }
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_GE(batch.size(), 1u);
    ASSERT_LE(batch.size(), 9u);
    got.insert(got.end(), batch.begin(), batch.end());
  }
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key, expected[i].key) << i;
    EXPECT_EQ(got[i].value, expected[i].value) << i;
  }
  EXPECT_EQ(reader.items_done(), 2);
  EXPECT_EQ(reader.records_read(), static_cast<int64_t>(expected.size()));
}

// Issue 15 item 4: a file that shrank since its plan is refused, not read
// short and completed.
TEST(TextLineReader, ItemEndingPastTheEndOfTheFileIsRefusedAsChanged) {
  std::string contents;
  for (int i = 0; i < 100; ++i) {
    contents += (i < 10 ? "line 0" : "line ") + std::to_string(i) + "\n";  // 8 bytes
  }
  const std::string path = WriteFile("shrunk.txt", contents);
  absl::StatusOr<std::vector<std::string>> plan =
      PlanSlices({{path, static_cast<int64_t>(contents.size())}}, 3);
  ASSERT_TRUE(plan.ok());
  const std::string last = plan->back();
  const int64_t end = *ParseItem(last)->end;
  std::filesystem::resize_file(path, 40 * 8);  // the file is cut after planning
  ListItemSource source({last});
  TextLineReader reader;
  absl::Status s = reader.ReadUpTo(source, 1000).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("'" + path + "' changed since the plan was made: size 320, "
                             "item ends at " + std::to_string(end)),
            std::string::npos)
      << s;
  EXPECT_EQ(reader.items_done(), 0);  // the item stays held

  // A range that starts past the end, with no end, is refused as well.
  ListItemSource open_ended({path + "?start=2000"});
  TextLineReader reader2;
  EXPECT_EQ(reader2.ReadUpTo(open_ended, 10).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // An item ending exactly at the end of the file is fine.
  ListItemSource exact({path + "?start=0&end=320"});
  TextLineReader reader3;
  absl::StatusOr<std::vector<Record>> got = reader3.ReadUpTo(exact, 1000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), 40u);
}

TEST(TextSliceReader, FileCutWhileBeingReadIsDataLossNamingIt) {
  std::string contents;
  for (int i = 0; i < 100000; ++i) contents += "a line of text number " + std::to_string(i) + "\n";
  const std::string path = WriteFile("cut-while-read.txt", contents);
  absl::StatusOr<std::unique_ptr<TextSliceReader>> reader = TextSliceReader::Open(path, 0, -1);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string line;
  int64_t offset = 0;
  ASSERT_TRUE(*(*reader)->Next(&line, &offset));
  std::filesystem::resize_file(path, 1000000);  // past the reader's buffer
  absl::Status error;
  int64_t lines = 1;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&line, &offset);
    if (!more.ok()) {
      error = more.status();
      break;
    }
    ASSERT_TRUE(*more) << "ended quietly after " << lines << " lines";
    ++lines;
  }
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss) << error;
  EXPECT_NE(error.message().find(path), std::string::npos) << error;
}

// Issue 15 item 5: the wrong reader is refused, not fed binary "lines".
TEST(TextLineReader, RefusesATFRecordFileNamingIt) {
  std::string records;
  for (int i = 0; i < 50; ++i) records += EncodeTFRecord("record\n" + std::to_string(i));
  const std::string path = WriteFile("really-records.txt", records);
  for (const std::string& item : {path, path + "?start=100&end=400"}) {
    ListItemSource source({item});
    TextLineReader reader;
    absl::Status s = reader.ReadUpTo(source, 10).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("'" + path + "' looks like a TFRecord file"), std::string::npos)
        << s;
    EXPECT_NE(s.message().find("use TFRecordReader"), std::string::npos) << s;
  }
}

TEST(TextLineReader, RefusesAGzipFileNamingIt) {
  const std::string path = testing::TempDir() + "/lines.txt.gz";
  auto writer = CompressedFileWriter::Create(path, FileCompression::kGzip);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Append("one\ntwo\nthree\n").ok());
  ASSERT_TRUE((*writer)->Close().ok());
  ListItemSource source({path});
  TextLineReader reader;
  absl::Status s = reader.ReadUpTo(source, 10).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'" + path + "' is gzip-compressed"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardq
