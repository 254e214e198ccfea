#include "src/io/format_sniff.h"

#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace {

TEST(SniffBytes, TellsTFRecordGzipZlibTextAndEmptyApart) {
  EXPECT_EQ(SniffBytes(EncodeTFRecord("payload"), "a.txt"), SniffedFormat::kTFRecord);
  EXPECT_EQ(SniffBytes(std::string("\x1f\x8b\x08\0\0\0\0\0\0\x03", 10), "a"),
            SniffedFormat::kGzip);
  // ZLIB has no magic: its header counts only under a .zz/.zlib name.
  const std::string zlib_header("\x78\x9c\x01\x02\x03", 5);
  EXPECT_EQ(SniffBytes(zlib_header, "a.tfrecord.zz"), SniffedFormat::kZlib);
  EXPECT_EQ(SniffBytes(zlib_header, "a.tfrecord"), SniffedFormat::kOther);
  EXPECT_EQ(SniffBytes("hello world\nsecond line\n", "a.tfrecord"),
            SniffedFormat::kOther);
  EXPECT_EQ(SniffBytes("", "a.tfrecord"), SniffedFormat::kEmpty);
  EXPECT_EQ(SniffBytes("short", "a"), SniffedFormat::kOther);
}

TEST(SniffBytes, PlainRecordWhoseLengthStartsLikeGzipIsTFRecord) {
  // A length of 0x08'8b1f bytes: its first bytes are the GZIP magic.
  const uint64_t length = 0x088b1f;
  std::string header(8, '\0');
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(length >> (8 * i));
  const std::string record = EncodeTFRecord(std::string(length, 'x'));
  ASSERT_EQ(record.substr(0, 3), std::string("\x1f\x8b\x08", 3));
  EXPECT_EQ(SniffBytes(record.substr(0, kSniffBytes), "x"), SniffedFormat::kTFRecord);
}

TEST(SniffFile, ReadsTheHeadOfTheFileAndNamesAMissingOne) {
  const std::string path = ::testing::TempDir() + "/sniff_file.bin";
  std::ofstream(path, std::ios::binary) << EncodeTFRecord("r") << "text after";
  absl::StatusOr<SniffedFormat> format = SniffFile(path);
  ASSERT_TRUE(format.ok()) << format.status();
  EXPECT_EQ(*format, SniffedFormat::kTFRecord);
  absl::StatusOr<SniffedFormat> missing = SniffFile("/no/such/shardq-sniff");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/no/such/shardq-sniff"), std::string::npos);
}

TEST(HasTFRecordName, KnowsPlainCompressedAndTfdsShardNames) {
  for (const char* name :
       {"a.tfrecord", "d/a.tfrecords", "a.tfrecord.gz", "a.tfrecords.zz", "a.tfrecord.zlib",
        "mnist-train.tfrecord-00000-of-00001", "x.tfrecord-00012-of-01024",
        "x.tfrecord-00000-of-00001.gz"}) {
    EXPECT_TRUE(HasTFRecordName(name)) << name;
  }
  for (const char* name :
       {"a.txt", "a.tfrecord.txt", "tfrecord", "a.tfrecord-0000", "a.tfrecord-00000-of-",
        "a.tfrecord-x-of-00001", "a.tfrecord00000-of-00001", "a.gz"}) {
    EXPECT_FALSE(HasTFRecordName(name)) << name;
  }
}

}  // namespace
}  // namespace shardq
