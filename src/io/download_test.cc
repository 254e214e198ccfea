#include "src/io/download.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/compression.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

WorkItem Item(const std::string& s) {
  WorkItem item;
  item.item = s;
  EXPECT_TRUE(ParseWorkItem(&item).ok());
  return item;
}

std::vector<std::string> TFRecords(const std::string& path) {
  std::vector<std::string> out;
  auto reader = TFRecordSliceReader::Open(path, 0, -1);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::string record;
  int64_t offset = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&record, &offset);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    out.push_back(record);
  }
  return out;
}

TEST(DownloadItem, TextSlicesHoldExactlyTheirLines) {
  const std::string path = ::testing::TempDir() + "/download_lines.txt";
  std::string all;
  for (int i = 0; i < 500; ++i) absl::StrAppend(&all, "line ", i, "\n");
  std::ofstream(path, std::ios::binary) << all;
  std::string joined;
  const int64_t size = static_cast<int64_t>(all.size());
  for (int k = 0; k < 3; ++k) {
    const std::string dest = absl::StrCat(::testing::TempDir(), "/download_slice", k);
    absl::StatusOr<int64_t> bytes = DownloadItem(
        Item(absl::StrCat(path, "?start=", size * k / 3, "&end=", size * (k + 1) / 3)), dest);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    const std::string got = Slurp(dest);
    EXPECT_EQ(*bytes, static_cast<int64_t>(got.size()));
    joined += got;
  }
  EXPECT_EQ(joined, all);
}

TEST(DownloadItem, TFRecordSlicesHoldExactlyTheirRecords) {
  const std::string path = ::testing::TempDir() + "/download_records.tfrecord";
  std::vector<std::string> all;
  {
    auto writer = TFRecordWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    for (int i = 0; i < 300; ++i) {
      all.push_back(std::string(static_cast<size_t>(i % 17), 'x') + absl::StrCat(i));
      ASSERT_TRUE((*writer)->Write(all.back()).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
  const int64_t size = static_cast<int64_t>(Slurp(path).size());
  std::vector<std::string> joined;
  for (int k = 0; k < 4; ++k) {
    const std::string dest = absl::StrCat(::testing::TempDir(), "/download_rec", k);
    ASSERT_TRUE(DownloadItem(Item(absl::StrCat(path, "?start=", size * k / 4, "&end=",
                                               size * (k + 1) / 4)),
                             dest)
                    .ok());
    for (std::string& r : TFRecords(dest)) joined.push_back(std::move(r));
  }
  EXPECT_EQ(joined, all);
}

TEST(DownloadItem, WholeWorkIsCopiedByteForByte) {
  const std::string path = ::testing::TempDir() + "/download_whole.tfrecord.gz";
  {
    auto writer = CompressedTFRecordWriter::Create(path, FileCompression::kGzip);
    ASSERT_TRUE(writer.ok());
    for (int i = 0; i < 100; ++i) ASSERT_TRUE((*writer)->Write(absl::StrCat("r", i)).ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  const std::string dest = ::testing::TempDir() + "/download_whole.copy";
  ASSERT_TRUE(DownloadItem(Item(path), dest).ok());
  EXPECT_EQ(Slurp(dest), Slurp(path));
}

TEST(DownloadItem, RefusesTablesAndNamesMissingWorks) {
  EXPECT_EQ(DownloadItem(Item("sqlite:x.db?table=t"), ::testing::TempDir() + "/t").status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status missing =
      DownloadItem(Item("/no/such/file.txt"), ::testing::TempDir() + "/m").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("/no/such/file.txt"));
  std::ifstream partial(::testing::TempDir() + "/m.part");
  EXPECT_FALSE(partial.good());
}

}  // namespace
}  // namespace shardq
