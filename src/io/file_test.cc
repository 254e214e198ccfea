// The file interface and its faults: every reader's I/O goes through
// RandomAccessFile, and an I/O fault is a clear error naming the file and
// byte offset (the code errno implies), or, for short reads, no change at
// all: never silently fewer records.
#include "src/io/file.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <memory>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/faulty_file.h"
#include "src/io/record_test_util.h"
#include "src/io/text_slice_reader.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace {

using ::shardq::testing_util::TempPath;
using ::testing::HasSubstr;

constexpr int kRecords = 300;

std::string Payload(int i) { return absl::StrCat("record number ", i, "!"); }

void WriteTFRecordFile(const std::string& path) {
  auto writer = TFRecordWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (int i = 0; i < kRecords; ++i) ASSERT_TRUE((*writer)->Write(Payload(i)).ok());
  ASSERT_TRUE((*writer)->Close().ok());
}

void WriteTextFile(const std::string& path) {
  std::string text;
  for (int i = 0; i < kRecords; ++i) absl::StrAppend(&text, Payload(i), "\n");
  testing_util::WriteBytes(path, text);
}

// Appends every record `reader` returns to *out.
template <typename Reader>
absl::Status Drain(Reader& reader, std::vector<std::string>* out) {
  std::string record;
  int64_t offset = 0;
  while (true) {
    absl::StatusOr<bool> more = reader.Next(&record, &offset);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
    out->push_back(record);
  }
}

// Reads every record of `path` through `fs` with the reader of `format`
// ("text", "tfrecord", "gzip"); small buffers, so that there are many reads.
absl::Status ReadAll(const std::string& format, const std::string& path,
                     FileSystem* fs, std::vector<std::string>* out) {
  TFRecordReadOptions options;
  options.buffer_bytes = 100;
  options.file_system = fs;
  if (format == "text") {
    auto reader = TextSliceReader::Open(path, 0, -1, fs);
    return reader.ok() ? Drain(**reader, out) : reader.status();
  }
  if (format == "gzip") {
    auto reader = CompressedTFRecordReader::Open(path, FileCompression::kGzip, options);
    return reader.ok() ? Drain(**reader, out) : reader.status();
  }
  auto reader = TFRecordSliceReader::Open(path, 0, -1, options);
  return reader.ok() ? Drain(**reader, out) : reader.status();
}

class FileFaultTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "text") {
      WriteTextFile(path_.path());
    } else if (GetParam() == "tfrecord") {
      WriteTFRecordFile(path_.path());
    } else {
      auto writer = CompressedTFRecordWriter::Create(path_.path(), FileCompression::kGzip);
      ASSERT_TRUE(writer.ok()) << writer.status();
      for (int i = 0; i < kRecords; ++i) {
        ASSERT_TRUE((*writer)->Write(Payload(i)).ok());
      }
      ASSERT_TRUE((*writer)->Close().ok());
    }
    size_ = *FileSize(path_.path());
  }

  TempPath path_{".data"};
  int64_t size_ = 0;
};

TEST_P(FileFaultTest, ShortReadsYieldEveryRecord) {
  FaultyFileSystem fs;
  FileFaults faults;
  faults.max_read_bytes = 7;
  fs.SetFaults(path_.path(), faults);
  std::vector<std::string> records;
  ASSERT_TRUE(ReadAll(GetParam(), path_.path(), &fs, &records).ok());
  ASSERT_EQ(records.size(), static_cast<size_t>(kRecords));
  for (int i = 0; i < kRecords; ++i) EXPECT_EQ(records[static_cast<size_t>(i)], Payload(i));
  EXPECT_GT(faults.reads->load(), size_ / 7);
}

TEST_P(FileFaultTest, EioIsDataLossNamingTheFileAndOffset) {
  FaultyFileSystem fs;
  FileFaults faults;
  faults.error_at = size_ / 2;
  faults.read_errno = EIO;
  fs.SetFaults(path_.path(), faults);
  std::vector<std::string> records;
  absl::Status s = ReadAll(GetParam(), path_.path(), &fs, &records);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("read '", path_.path(), "' at byte offset ",
                                                  size_ / 2)));
  EXPECT_THAT(s.message(), HasSubstr("Input/output error"));
  EXPECT_LT(records.size(), static_cast<size_t>(kRecords));
}

TEST_P(FileFaultTest, EnospcIsResourceExhaustedNamingTheFile) {
  FaultyFileSystem fs;
  FileFaults faults;
  faults.error_at = 0;
  faults.read_errno = ENOSPC;
  fs.SetFaults(path_.path(), faults);
  std::vector<std::string> records;
  absl::Status s = ReadAll(GetParam(), path_.path(), &fs, &records);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("'", path_.path(), "' at byte offset 0")));
  EXPECT_TRUE(records.empty());
}

TEST_P(FileFaultTest, FileTruncatedWhileReadIsDataLoss) {
  FaultyFileSystem fs;
  FileFaults faults;
  faults.truncate_at = size_ / 3;
  fs.SetFaults(path_.path(), faults);
  std::vector<std::string> records;
  absl::Status s = ReadAll(GetParam(), path_.path(), &fs, &records);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr(path_.path()));
  EXPECT_LT(records.size(), static_cast<size_t>(kRecords));
}

INSTANTIATE_TEST_SUITE_P(Formats, FileFaultTest,
                         ::testing::Values("text", "tfrecord", "gzip"));

TEST(FileSystem, MissingFileIsNotFoundAndADirectoryIsInvalid) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      FileSystem::Default()->Open("/nonexistent/shardq-file");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("/nonexistent/shardq-file"));
  file = FileSystem::Default()->Open(::testing::TempDir());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FileSystem, AFifoIsRefusedWithoutWaitingForAWriter) {
  TempPath fifo(".fifo");
  ::unlink(fifo.path().c_str());
  ASSERT_EQ(::mkfifo(fifo.path().c_str(), 0600), 0) << std::strerror(errno);
  // A blocking open would wait here forever (no writer ever comes).
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      FileSystem::Default()->Open(fifo.path());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(file.status().message(), HasSubstr("not a regular file"));
  EXPECT_EQ(FileSize(fifo.path()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FileSystem, AFileThatReportsSizeZeroButHasContentIsRefused) {
  // /proc files report st_size 0 and read their content: planned and
  // opened by their size, they would read as empty.
  const std::string proc = "/proc/self/status";
  if (::access(proc.c_str(), R_OK) != 0) GTEST_SKIP() << "no " << proc;
  for (const absl::Status& status :
       {FileSystem::Default()->Open(proc).status(), FileSize(proc).status()}) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(proc));
    EXPECT_THAT(status.message(), HasSubstr("size of 0 but has content"));
  }
  // A truly empty file is fine, and its size is 0.
  TempPath empty(".txt");
  testing_util::WriteBytes(empty.path(), "");
  EXPECT_EQ(FileSize(empty.path()).value_or(-1), 0);
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> opened =
      FileSystem::Default()->Open(empty.path());
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->size(), 0);
}

TEST(ReadFully, FileEndingEarlyNamesTheOffsetAndTheSizeAtOpen) {
  TempPath path(".bin");
  testing_util::WriteBytes(path.path(), std::string(100, 'x'));
  FaultyFileSystem fs;
  FileFaults faults;
  faults.truncate_at = 40;
  fs.SetFaults(path.path(), faults);
  std::unique_ptr<RandomAccessFile> file = *fs.Open(path.path());
  char buffer[100];
  absl::Status s = ReadFully(*file, 10, 90, buffer);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("ends at byte offset 40 but had 100 bytes when opened"));
}

TEST(AlignedReadBuffer, WindowHoldsEachOffsetAtItsAddressModuloAPage) {
  AlignedReadBuffer buffer(10000);
  EXPECT_EQ(buffer.capacity(), 10000u);
  for (int64_t offset : {int64_t{0}, int64_t{1}, int64_t{16}, int64_t{4095},
                         int64_t{4096}, int64_t{262144 + 17}, int64_t{1} << 40}) {
    char* window = buffer.Window(offset);
    EXPECT_EQ((reinterpret_cast<uintptr_t>(window) - static_cast<uint64_t>(offset)) %
                  AlignedReadBuffer::kPageBytes,
              0u)
        << offset;
    std::memset(window, 'x', buffer.capacity());  // all of it is the buffer's (ASan)
  }
  // A capacity whose slack would wrap around is refused, not allocated short.
  EXPECT_THROW(AlignedReadBuffer(std::numeric_limits<size_t>::max() - 10), std::bad_alloc);
}

// Records, for every read of a buffer's worth (64 bytes or more), where its
// destination lies relative to its file offset modulo 4 KiB (see
// AlignedReadBuffer). The format sniff's 12-byte read into a stack array is
// left out: its skew is wherever the stack is (under ASan, whatever its
// fake stack holds), and a copy that short is never slow.
class SkewRecordingFile final : public RandomAccessFile {
 public:
  SkewRecordingFile(std::unique_ptr<RandomAccessFile> file, std::vector<size_t>* skews)
      : RandomAccessFile(file->path(), file->size()), file_(std::move(file)), skews_(skews) {}
  absl::StatusOr<size_t> ReadSome(int64_t offset, size_t n, char* dst) override {
    if (n < 64) return file_->ReadSome(offset, n, dst);
    skews_->push_back((reinterpret_cast<uintptr_t>(dst) - static_cast<uint64_t>(offset)) %
                      AlignedReadBuffer::kPageBytes);
    return file_->ReadSome(offset, n, dst);
  }

 private:
  const std::unique_ptr<RandomAccessFile> file_;
  std::vector<size_t>* const skews_;
};

class SkewRecordingFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = FileSystem::Default()->Open(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<RandomAccessFile>(new SkewRecordingFile(*std::move(file), &skews));
  }
  // The reads whose destination lies 1-63 bytes past their offset.
  std::vector<size_t> SlowReads() const {
    std::vector<size_t> slow;
    for (size_t skew : skews) {
      if (skew > 0 && skew < 64) slow.push_back(skew);
    }
    return slow;
  }
  std::vector<size_t> skews;
};

// No reader reads into memory that lies just past the file offset modulo
// 4 KiB, where the kernel's copy is several times slower on some CPUs:
// neither through its buffer (at page-aligned and at odd offsets, from
// slices that start anywhere) nor straight into a record's string.
TEST(AlignedReadBuffer, ReadersNeverReadJustPastTheOffsetModuloAPage) {
  // TFRecord: records larger than the buffer are read straight into the
  // caller's string, one string reused for all of them. Data offsets move
  // by 63 modulo 4 KiB from record to record (length + framing = 3 pages +
  // 63), so over 70 records the string's skew lands in every run of 63
  // residues, 1-63 among them, wherever the allocator put the string.
  TempPath tfrecord(".tfrecord");
  std::vector<std::string> written;
  {
    auto writer = TFRecordWriter::Create(tfrecord.path());
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (int i = 0; i < 70; ++i) {
      const size_t length = 3 * 4096 + 63 - 16;
      written.push_back(std::string(length, static_cast<char>('a' + i % 26)));
      ASSERT_TRUE((*writer)->Write(written.back()).ok());
    }
    ASSERT_TRUE((*writer)->Close().ok());
  }
  SkewRecordingFileSystem fs;
  TFRecordReadOptions options;
  options.buffer_bytes = 8192;
  options.file_system = &fs;
  auto reader = TFRecordSliceReader::Open(tfrecord.path(), 0, -1, options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<std::string> read;
  ASSERT_TRUE(Drain(**reader, &read).ok());
  EXPECT_EQ(read, written);
  EXPECT_GT(fs.skews.size(), 70u);
  EXPECT_THAT(fs.SlowReads(), ::testing::IsEmpty());

  // Text, through the default buffer, whole and in slices.
  TempPath text(".txt");
  std::string bytes;
  for (int i = 0; i < 40000; ++i) absl::StrAppend(&bytes, std::string(i % 97, 'x'), i, "\n");
  testing_util::WriteBytes(text.path(), bytes);
  const auto size = static_cast<int64_t>(bytes.size());
  fs.skews.clear();
  for (int64_t start : {int64_t{0}, int64_t{4096}, int64_t{262144}, int64_t{12345}, size / 3}) {
    auto lines = TextSliceReader::Open(text.path(), start, -1, &fs);
    ASSERT_TRUE(lines.ok()) << lines.status();
    std::vector<std::string> out;
    ASSERT_TRUE(Drain(**lines, &out).ok());
    EXPECT_FALSE(out.empty());
  }
  // The buffer's reads have no skew at all (the format sniff reads a few
  // bytes into a small buffer of its own).
  EXPECT_GT(fs.skews.size(), 10u);
  EXPECT_THAT(fs.SlowReads(), ::testing::IsEmpty());
  EXPECT_GE(std::count(fs.skews.begin(), fs.skews.end(), 0u), 10);
}

}  // namespace
}  // namespace shardq
