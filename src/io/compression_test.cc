#include "src/io/compression.h"

#include <zlib.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/largest_allocation_testing.h"
#include "src/io/record_test_util.h"

namespace shardq {

namespace {

using ::shardq::testing_util::EncodeAll;
using ::shardq::testing_util::HeaderClaiming;
using ::shardq::testing_util::RandomBytes;
using ::shardq::testing_util::RandomPayload;
using ::shardq::testing_util::ReadBytes;
using ::shardq::testing_util::RecordOffsets;
using ::shardq::testing_util::TempPath;
using ::shardq::testing_util::WriteBytes;
using ::testing::HasSubstr;

// GZIP with zlib's gz* API: a writer independent of CompressedFileWriter.
void WriteGzipWithGzApi(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(file), Z_OK);
}

// ZLIB with compress2: also independent of CompressedFileWriter.
std::string ZlibCompress(const std::string& bytes) {
  uLongf size = compressBound(static_cast<uLong>(bytes.size()));
  std::string out(size, '\0');
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &size,
                      reinterpret_cast<const Bytef*>(bytes.data()),
                      static_cast<uLong>(bytes.size()), 6),
            Z_OK);
  out.resize(size);
  return out;
}

struct Read {
  std::vector<std::string> records;
  std::vector<int64_t> offsets;
  TFRecordReadStats stats;
};

absl::StatusOr<Read> ReadCompressed(const std::string& path,
                                    FileCompression compression,
                                    TFRecordReadOptions options = {}) {
  absl::StatusOr<std::unique_ptr<CompressedTFRecordReader>> reader =
      CompressedTFRecordReader::Open(path, compression, options);
  if (!reader.ok()) return reader.status();
  Read out;
  std::string record;
  int64_t offset = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&record, &offset);
    if (!more.ok()) return more.status();
    if (!*more) break;
    out.records.push_back(record);
    out.offsets.push_back(offset);
  }
  out.stats = (*reader)->stats();
  return out;
}

std::vector<std::string> RandomRecords(std::mt19937_64& rng, int count) {
  std::vector<std::string> records;
  for (int i = 0; i < count; ++i) records.push_back(RandomPayload(rng));
  return records;
}

TEST(DetectCompression, TellsGzipZlibAndPlainApart) {
  const std::string tfrecords = EncodeAll({"a", "bc"});
  TempPath gz(".tfrecord.gz"), zz(".tfrecord.zz"), zlib_unnamed(".tfrecord"),
      plain(".tfrecord"), text(".txt"), empty(".tfrecord");
  WriteGzipWithGzApi(gz.path(), tfrecords);
  WriteBytes(zz.path(), ZlibCompress(tfrecords));
  WriteBytes(zlib_unnamed.path(), ZlibCompress(tfrecords));
  WriteBytes(plain.path(), tfrecords);
  WriteBytes(text.path(), "x marks the spot\n");  // "x " passes ZLIB's check
  WriteBytes(empty.path(), "");
  EXPECT_EQ(*DetectCompression(gz.path()), FileCompression::kGzip);
  EXPECT_EQ(*DetectCompression(zz.path()), FileCompression::kZlib);
  EXPECT_EQ(*DetectCompression(zlib_unnamed.path()), FileCompression::kNone);
  EXPECT_EQ(*DetectCompression(plain.path()), FileCompression::kNone);
  EXPECT_EQ(*DetectCompression(text.path()), FileCompression::kNone);
  EXPECT_EQ(*DetectCompression(empty.path()), FileCompression::kNone);
}

TEST(DetectCompression, PlainRecordWhoseLengthStartsLikeGzipIsPlain) {
  // 0x088b1f = 559903: the length's first bytes are 1f 8b 08.
  const std::string bytes = EncodeAll({std::string(0x088b1f, 'q')});
  ASSERT_EQ(bytes.substr(0, 3), "\x1f\x8b\x08");
  TempPath path(".tfrecord");
  WriteBytes(path.path(), bytes);
  EXPECT_EQ(*DetectCompression(path.path()), FileCompression::kNone);
}

TEST(DetectCompression, MissingFileIsNotFoundNamingThePath) {
  absl::StatusOr<FileCompression> got =
      DetectCompression("/nonexistent/shardq/x.tfrecord.gz");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr("/nonexistent/shardq/x.tfrecord.gz"));
}

TEST(CompressedTFRecord, GzipAndZlibRoundTripRandomRecords) {
  std::mt19937_64 rng(5);
  for (FileCompression compression :
       {FileCompression::kGzip, FileCompression::kZlib}) {
    for (int trial = 0; trial < 6; ++trial) {
      const std::vector<std::string> records =
          RandomRecords(rng, static_cast<int>(rng() % 200));
      TempPath path(".tfrecord.gz");
      {
        auto writer = CompressedTFRecordWriter::Create(path.path(), compression);
        ASSERT_TRUE(writer.ok()) << writer.status();
        for (const std::string& r : records) ASSERT_TRUE((*writer)->Write(r).ok());
        ASSERT_TRUE((*writer)->Close().ok());
      }
      // A tiny window forces every record across many refills.
      for (size_t window : {size_t{64}, size_t{256} << 10}) {
        TFRecordReadOptions options;
        options.buffer_bytes = window;
        absl::StatusOr<Read> got = ReadCompressed(path.path(), compression, options);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(got->records, records) << CompressionName(compression);
        EXPECT_EQ(got->offsets, RecordOffsets(records));
      }
    }
  }
}

TEST(CompressedTFRecord, ReadsFilesOfAnIndependentWriter) {
  std::mt19937_64 rng(6);
  const std::vector<std::string> records = RandomRecords(rng, 300);
  TempPath gz(".tfrecord.gz"), zz(".tfrecord.zz");
  WriteGzipWithGzApi(gz.path(), EncodeAll(records));
  WriteBytes(zz.path(), ZlibCompress(EncodeAll(records)));
  absl::StatusOr<Read> got = ReadCompressed(gz.path(), FileCompression::kGzip);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->records, records);
  got = ReadCompressed(zz.path(), FileCompression::kZlib);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->records, records);
}

TEST(CompressedTFRecord, ConcatenatedGzipMembersReadAsOneStream) {
  TempPath a(".gz"), b(".gz"), both(".tfrecord.gz");
  WriteGzipWithGzApi(a.path(), EncodeAll({"one", "two"}));
  WriteGzipWithGzApi(b.path(), EncodeAll({"three"}));
  WriteBytes(both.path(), ReadBytes(a.path()) + ReadBytes(b.path()));
  absl::StatusOr<Read> got = ReadCompressed(both.path(), FileCompression::kGzip);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->records, std::vector<std::string>({"one", "two", "three"}));
}

TEST(CompressedTFRecord, EmptyStreamAndEmptyFileHaveNoRecords) {
  TempPath stream(".tfrecord.gz"), file(".tfrecord.gz");
  WriteGzipWithGzApi(stream.path(), "");
  WriteBytes(file.path(), "");
  for (const std::string& path : {stream.path(), file.path()}) {
    absl::StatusOr<Read> got = ReadCompressed(path, FileCompression::kGzip);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->records.empty());
  }
}

TEST(CompressedTFRecord, CorruptCompressedDataIsDataLossNamingTheFile) {
  std::mt19937_64 rng(7);
  std::vector<std::string> records;
  for (int i = 0; i < 2000; ++i) records.push_back(RandomBytes(rng, 100));
  TempPath good(".tfrecord.gz");
  WriteGzipWithGzApi(good.path(), EncodeAll(records));
  const std::string compressed = ReadBytes(good.path());
  ASSERT_GT(compressed.size(), 10000u);

  // A flipped byte in the middle, a cut-off file, a damaged trailer.
  TempPath flipped(".tfrecord.gz"), truncated(".tfrecord.gz"),
      trailer(".tfrecord.gz");
  std::string bytes = compressed;
  bytes[bytes.size() / 2] ^= 0x55;
  WriteBytes(flipped.path(), bytes);
  WriteBytes(truncated.path(), compressed.substr(0, compressed.size() / 2));
  bytes = compressed;
  bytes[bytes.size() - 6] ^= 0x01;  // inside the CRC32 of the gzip trailer
  WriteBytes(trailer.path(), bytes);
  for (const std::string& path :
       {flipped.path(), truncated.path(), trailer.path()}) {
    for (auto policy : {TFRecordReadOptions::kFail, TFRecordReadOptions::kSkip}) {
      TFRecordReadOptions options;
      options.on_corrupt = policy;
      absl::StatusOr<Read> got = ReadCompressed(path, FileCompression::kGzip, options);
      ASSERT_FALSE(got.ok()) << path;
      EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
      EXPECT_THAT(got.status().message(), HasSubstr(path));
      EXPECT_THAT(got.status().message(), HasSubstr("gzip"));
    }
  }
}

TEST(CompressedTFRecord, NotGzipAtAllIsDataLoss) {
  TempPath path(".tfrecord.gz");
  WriteBytes(path.path(), "this is not gzip data at all");
  absl::StatusOr<Read> got = ReadCompressed(path.path(), FileCompression::kGzip);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr(path.path()));
}

// A stream whose records are damaged although the compression is intact.
std::string StreamWithBadRecord(const std::vector<std::string>& records,
                                size_t victim, int64_t* victim_offset) {
  std::string stream;
  for (size_t i = 0; i < records.size(); ++i) {
    if (i == victim) *victim_offset = static_cast<int64_t>(stream.size());
    std::string framed = EncodeTFRecord(records[i]);
    if (i == victim) framed[framed.size() - 1] ^= 0x20;  // data checksum
    stream += framed;
  }
  return stream;
}

TEST(CompressedTFRecord, CorruptRecordInsideValidStreamFollowsThePolicy) {
  std::mt19937_64 rng(8);
  std::vector<std::string> records;
  for (int i = 0; i < 50; ++i) records.push_back(RandomBytes(rng, rng() % 3000));
  for (size_t victim : {size_t{0}, size_t{25}, size_t{49}}) {
    int64_t victim_offset = -1;
    TempPath path(".tfrecord.gz");
    WriteGzipWithGzApi(path.path(), StreamWithBadRecord(records, victim, &victim_offset));

    absl::StatusOr<Read> got = ReadCompressed(path.path(), FileCompression::kGzip);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(got.status().message(),
                HasSubstr(absl::StrCat("decompressed byte offset ", victim_offset)));
    EXPECT_THAT(got.status().message(), HasSubstr(path.path()));

    TFRecordReadOptions skip;
    skip.on_corrupt = TFRecordReadOptions::kSkip;
    skip.buffer_bytes = 1024;  // smaller than some records: exercises restarts
    got = ReadCompressed(path.path(), FileCompression::kGzip, skip);
    ASSERT_TRUE(got.ok()) << got.status();
    std::vector<std::string> expected = records;
    expected.erase(expected.begin() + static_cast<std::ptrdiff_t>(victim));
    EXPECT_EQ(got->records, expected) << "victim " << victim;
    EXPECT_EQ(got->stats.corrupt_regions, 1);
    EXPECT_EQ(got->stats.skipped_bytes,
              static_cast<int64_t>(records[victim].size()) + 16);
  }
}

TEST(CompressedTFRecord, TruncatedStreamAndHugeLengthAreDataLossWithoutAllocating) {
  const std::string full = EncodeAll({"complete", "cut short"});
  const std::string huge = HeaderClaiming(uint64_t{1} << 60) + std::string(100, 'z');
  for (const std::string& stream : {full.substr(0, full.size() - 3),
                                    full.substr(0, 24 + 12 + 3), huge}) {
    TempPath path(".tfrecord.gz");
    WriteGzipWithGzApi(path.path(), stream);
    testing_util::ResetLargestAllocation();
    absl::StatusOr<Read> got = ReadCompressed(path.path(), FileCompression::kGzip);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(got.status().message(), HasSubstr("past the end of the stream"));
    EXPECT_LE(testing_util::LargestAllocation(), size_t{1} << 20);
  }
}

TEST(CompressedFileWriter, RefusesNoneAndNamesMissingDirectories) {
  EXPECT_EQ(CompressedFileWriter::Create("/tmp/x", FileCompression::kNone)
                .status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status s = CompressedTFRecordWriter::Create("/nonexistent/dir/x.gz",
                                                    FileCompression::kGzip)
                       .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/dir/x.gz"));
}

}  // namespace
}  // namespace shardq
