// Reads out of mapped files: a page that vanishes under a guarded read is a
// false return (the reader's DATA_LOSS), never a dead process; a SIGBUS
// anywhere else still reaches the handler installed before ours, or the
// default action. And the TFRecord and text readers return the same records
// and the same errors whether they read the mapping or call pread.
#include "src/io/mapped_read.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/faulty_file.h"
#include "src/io/file.h"
#include "src/io/record_test_util.h"
#include "src/io/text_slice_reader.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace {

using ::shardq::testing_util::TempPath;
using ::shardq::testing_util::WriteBytes;
using ::testing::HasSubstr;

constexpr size_t kPage = 4096;

// A ThreadSanitizer build neither maps files nor survives a SIGBUS under
// the guard (src/io/file.cc): the tests of the mapping itself skip there.
#if defined(__SANITIZE_THREAD__)
#define SKIP_WITHOUT_MAPPING() GTEST_SKIP() << "a TSan build does not map files"
#else
#define SKIP_WITHOUT_MAPPING() (void)0
#endif

// A file of `pages` pages mapped read only; Cut() truncates the file to
// nothing, so that touching any mapped page raises SIGBUS.
class MappedScratch {
 public:
  explicit MappedScratch(size_t pages) : path_(".map"), size_(pages * kPage) {
    WriteBytes(path_.path(), std::string(size_, 'm'));
    fd_ = ::open(path_.path().c_str(), O_RDWR);
    map_ = static_cast<char*>(::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0));
  }
  ~MappedScratch() {
    ::munmap(map_, size_);
    ::close(fd_);
  }
  bool ok() const { return fd_ >= 0 && map_ != MAP_FAILED; }
  const char* data() const { return map_; }
  size_t size() const { return size_; }
  void Cut() { ASSERT_EQ(::ftruncate(fd_, 0), 0); }

 private:
  TempPath path_;
  size_t size_;
  int fd_ = -1;
  char* map_ = nullptr;
};

TEST(MappedRead, GuardedCopyOfAVanishedPageReturnsFalse) {
  SKIP_WITHOUT_MAPPING();
  InstallMappedReadGuard();
  MappedScratch scratch(4);
  ASSERT_TRUE(scratch.ok());
  std::string out(scratch.size(), '\0');
  ASSERT_TRUE(GuardedCopy(scratch.data(), scratch.size(), out.data()));
  EXPECT_EQ(out, std::string(scratch.size(), 'm'));
  scratch.Cut();
  EXPECT_FALSE(GuardedCopy(scratch.data() + kPage, 10, out.data()));
  const char* newline = nullptr;
  EXPECT_FALSE(GuardedFindNewline(scratch.data(), scratch.size(), &newline));
  // The guard is whole again afterwards: another vanished page, same answer.
  EXPECT_FALSE(GuardedCopy(scratch.data() + 3 * kPage, 1, out.data()));
}

TEST(MappedRead, FindNewlineFindsTheFirstOne) {
  const std::string text = "abc\ndef\n";
  const char* found = nullptr;
  ASSERT_TRUE(GuardedFindNewline(text.data(), text.size(), &found));
  EXPECT_EQ(found, text.data() + 3);
  ASSERT_TRUE(GuardedFindNewline(text.data(), 3, &found));
  EXPECT_EQ(found, nullptr);
}

// A handler another library installed: it records the signal and jumps
// back into the test.
sigjmp_buf g_other_env;
volatile sig_atomic_t g_other_calls = 0;
void OtherHandler(int, siginfo_t*, void*) {
  g_other_calls = g_other_calls + 1;
  siglongjmp(g_other_env, 1);
}

TEST(MappedRead, ASigbusOutsideTheGuardReachesTheHandlerItReplaced) {
  SKIP_WITHOUT_MAPPING();
  struct sigaction other;
  std::memset(&other, 0, sizeof other);
  sigemptyset(&other.sa_mask);
  other.sa_sigaction = &OtherHandler;
  other.sa_flags = SA_SIGINFO | SA_NODEFER;
  ASSERT_EQ(sigaction(SIGBUS, &other, nullptr), 0);
  // Installed over the other handler (as when a library set one after
  // shardq's first mapped read: each new mapping installs ours again).
  InstallMappedReadGuard();
  struct sigaction now;
  ASSERT_EQ(sigaction(SIGBUS, nullptr, &now), 0);
  EXPECT_NE(now.sa_sigaction, &OtherHandler);

  MappedScratch scratch(2);
  ASSERT_TRUE(scratch.ok());
  scratch.Cut();
  g_other_calls = 0;
  if (sigsetjmp(g_other_env, 0) == 0) {
    volatile char c = scratch.data()[kPage];  // unguarded: not ours to handle
    (void)c;
    ADD_FAILURE() << "reading a vanished page did not raise SIGBUS";
  }
  EXPECT_EQ(g_other_calls, 1);
  // Guarded reads still come back false, without the other handler.
  char byte;
  EXPECT_FALSE(GuardedCopy(scratch.data(), 1, &byte));
  EXPECT_EQ(g_other_calls, 1);
  // Leave no handler behind that jumps into this test's finished frame:
  // ours again, chained to the default action.
  signal(SIGBUS, SIG_DFL);
  InstallMappedReadGuard();
}

TEST(MappedReadDeathTest, AnUnguardedSigbusStillEndsTheProcess) {
  SKIP_WITHOUT_MAPPING();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        signal(SIGBUS, SIG_DFL);
        InstallMappedReadGuard();
        MappedScratch scratch(2);
        scratch.Cut();
        volatile char c = scratch.data()[0];
        (void)c;
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

// ---------------------------------------------------------------------------
// The TFRecord reader over a mapping and over pread

// About 600 KiB of records of random sizes (over kMinMappedBytes, so the
// default file system maps it).
std::vector<std::string> ManyRecords(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> records;
  size_t total = 0;
  while (total < (600u << 10)) {
    records.push_back(testing_util::RandomBytes(rng, rng() % 6000));
    total += records.back().size() + 16;
  }
  return records;
}

// What reading `path`'s slices (k of them) gives: the records, or the
// error. Each record into a new string, or (reuse) all into one string,
// which the reader then overwrites or grows.
std::string Outcome(const std::string& path, int64_t k,
                    TFRecordReadOptions options, bool reuse) {
  const int64_t size = *FileSize(path);
  std::string out;
  int64_t records = 0, skipped = 0, regions = 0;
  std::string reused;
  for (int64_t i = 0; i < k; ++i) {
    auto reader = TFRecordSliceReader::Open(path, size * i / k, size * (i + 1) / k, options);
    if (!reader.ok()) return reader.status().ToString();
    while (true) {
      std::string fresh;
      std::string& record = reuse ? reused : fresh;
      int64_t offset = 0;
      absl::StatusOr<bool> more = (*reader)->Next(&record, &offset);
      if (!more.ok()) return more.status().ToString();
      if (!*more) break;
      absl::StrAppend(&out, offset, ":", record.size(), ":", Crc32c(record), "\n");
    }
    records += (*reader)->stats().records;
    skipped += (*reader)->stats().skipped_bytes;
    regions += (*reader)->stats().corrupt_regions;
  }
  return absl::StrCat(records, " records, skipped ", skipped, " in ", regions, "\n", out);
}

TEST(MappedTFRecordReader, ALargeLocalFileIsReadThroughItsMapping) {
  SKIP_WITHOUT_MAPPING();
  TempPath path(".tfrecord");
  WriteBytes(path.path(), testing_util::EncodeAll(ManyRecords(1)));
  std::unique_ptr<RandomAccessFile> file = *FileSystem::Default()->Open(path.path());
  EXPECT_NE(file->Mapping(), nullptr);
  TempPath small(".tfrecord");
  WriteBytes(small.path(), EncodeTFRecord("small"));
  EXPECT_EQ((*FileSystem::Default()->Open(small.path()))->Mapping(), nullptr);
}

TEST(MappedTFRecordReader, FilesPastTheBoundOnMappingsAreReadWithPread) {
  SKIP_WITHOUT_MAPPING();
  TempPath path(".tfrecord");
  const std::vector<std::string> records = ManyRecords(7);
  WriteBytes(path.path(), testing_util::EncodeAll(records));
  const int64_t before = LiveFileMappings();
  SetMaxFileMappingsForTesting(before + 2);
  absl::Cleanup restore = [] { SetMaxFileMappingsForTesting(kMaxFileMappings); };
  std::vector<std::unique_ptr<TFRecordSliceReader>> readers;
  for (int i = 0; i < 4; ++i) {
    readers.push_back(*TFRecordSliceReader::Open(path.path(), 0, -1));
  }
  EXPECT_EQ(LiveFileMappings(), before + 2);  // two mapped, two with pread
  for (auto& reader : readers) {  // every one reads the whole file all the same
    std::string record;
    int64_t offset = 0;
    size_t n = 0;
    while (*reader->Next(&record, &offset)) ASSERT_EQ(record, records[n++]);
    EXPECT_EQ(n, records.size());
  }
  readers.clear();
  EXPECT_EQ(LiveFileMappings(), before);  // closing gives the places back
}

TEST(MappedTFRecordReader, SameRecordsAndErrorsAsPread) {
  const std::vector<std::string> records = ManyRecords(2);
  const std::string clean = testing_util::EncodeAll(records);
  std::mt19937_64 rng(3);
  TempPath path(".tfrecord");
  FaultyFileSystem pread_fs;  // a FaultyFile is never mapped
  pread_fs.SetFaults(path.path(), FileFaults{});
  int damaged_cases = 0;
  for (int round = 0; round < 24; ++round) {
    std::string bytes = clean;
    if (round % 4 == 1) {
      bytes[rng() % bytes.size()] ^= static_cast<char>(1 << (rng() % 8));
    } else if (round % 4 == 2) {
      // Cut inside a record: inside its footer, or anywhere.
      bytes.resize(bytes.size() - 1 - rng() % (round % 8 == 2 ? 3 : 5000));
    } else if (round % 4 == 3) {
      // A run of garbage over a record boundary.
      const size_t at = rng() % (bytes.size() - 100);
      for (size_t i = 0; i < 64; ++i) bytes[at + i] = static_cast<char>(rng());
    }
    WriteBytes(path.path(), bytes);
    for (const int64_t k : {int64_t{1}, int64_t{7}}) {
      for (const auto policy :
           {TFRecordReadOptions::kFail, TFRecordReadOptions::kSkip}) {
        TFRecordReadOptions mapped;
        mapped.on_corrupt = policy;
        TFRecordReadOptions pread = mapped;
        pread.file_system = &pread_fs;
        const bool reuse = (round / 4) % 2 == 0;
        const std::string expected = Outcome(path.path(), k, pread, reuse);
        SCOPED_TRACE(absl::StrCat("round ", round, ", ", k, " slices, policy ",
                                  policy, reuse ? ", one reused string" : ""));
        EXPECT_EQ(Outcome(path.path(), k, mapped, reuse), expected);
        if (expected.find("DATA_LOSS") != std::string::npos) ++damaged_cases;
      }
    }
  }
  EXPECT_GT(damaged_cases, 10);  // the damage was seen, not only clean reads
}

TEST(MappedTFRecordReader, AFileCutShorterWhileReadIsDataLossNotACrash) {
  const std::vector<std::string> records = ManyRecords(4);
  TempPath path(".tfrecord");
  WriteBytes(path.path(), testing_util::EncodeAll(records));
  const int64_t size = *FileSize(path.path());
  auto reader = TFRecordSliceReader::Open(path.path(), 0, -1);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string record;
  int64_t offset = 0;
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(*(*reader)->Next(&record, &offset));
    EXPECT_EQ(record, records[i]);
  }
  ASSERT_EQ(::truncate(path.path().c_str(), 100 << 10), 0);
  absl::StatusOr<bool> more = true;
  size_t read = 5;
  while (more.ok() && *more) {
    more = (*reader)->Next(&record, &offset);
    if (more.ok() && *more) {
      ASSERT_LT(read, records.size());
      EXPECT_EQ(record, records[read]);
      ++read;
    }
  }
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), absl::StatusCode::kDataLoss) << more.status();
  EXPECT_THAT(more.status().message(), HasSubstr(path.path()));
  EXPECT_THAT(more.status().message(),
              HasSubstr(absl::StrCat("but had ", size,
                                     " bytes when opened (truncated while being read?)")));
  EXPECT_LT(read, records.size());
}

// ---------------------------------------------------------------------------
// The text reader over a mapping and over pread

// About 600 KiB of lines: empty ones, "\r\n" endings, one line longer than
// the pread reader's buffer, and no newline after the last line.
std::string ManyLines(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string text;
  while (text.size() < (600u << 10)) {
    const uint64_t kind = rng() % 10;
    if (kind == 0) {
      text += "\n";
    } else if (kind == 1) {
      text += std::string(rng() % 200, 'r') + "\r\n";
    } else {
      text += std::string(rng() % 3000, static_cast<char>('a' + kind)) + "\n";
    }
    if (text.size() > (100u << 10) && text.size() < (110u << 10)) {
      text += std::string(300u << 10, 'L') + "\n";
    }
  }
  text += "the last line, without a newline";
  return text;
}

std::string TextOutcome(const std::string& path, int64_t k, FileSystem* fs) {
  const int64_t size = *FileSize(path);
  std::string out;
  for (int64_t i = 0; i < k; ++i) {
    auto reader = TextSliceReader::Open(path, size * i / k, size * (i + 1) / k, fs);
    if (!reader.ok()) return reader.status().ToString();
    std::string line;
    int64_t offset = 0;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&line, &offset);
      if (!more.ok()) return more.status().ToString();
      if (!*more) break;
      absl::StrAppend(&out, offset, ":", line.size(), ":", Crc32c(line), "\n");
    }
  }
  return out;
}

TEST(MappedTextReader, SameLinesAsPreadForEverySlicing) {
  SKIP_WITHOUT_MAPPING();
  TempPath path(".txt");
  const std::string text = ManyLines(5);
  WriteBytes(path.path(), text);
  EXPECT_NE((*FileSystem::Default()->Open(path.path()))->Mapping(), nullptr);
  FaultyFileSystem pread_fs;  // a FaultyFile is never mapped
  pread_fs.SetFaults(path.path(), FileFaults{});
  for (const int64_t k : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{64}}) {
    SCOPED_TRACE(absl::StrCat(k, " slices"));
    const std::string expected = TextOutcome(path.path(), k, &pread_fs);
    EXPECT_EQ(TextOutcome(path.path(), k, nullptr), expected);
    if (k == 1) {
      EXPECT_EQ(std::count(expected.begin(), expected.end(), '\n'),
                std::count(text.begin(), text.end(), '\n') + 1);
    }
  }
}

TEST(MappedTextReader, AFileCutShorterWhileReadIsDataLossNotACrash) {
  SKIP_WITHOUT_MAPPING();  // pread returns what its buffer read before the cut
  TempPath path(".txt");
  WriteBytes(path.path(), ManyLines(6));
  auto reader = TextSliceReader::Open(path.path(), 0, -1);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string line;
  int64_t offset = 0;
  ASSERT_TRUE(*(*reader)->Next(&line, &offset));
  ASSERT_EQ(::truncate(path.path().c_str(), 50 << 10), 0);
  absl::StatusOr<bool> more = true;
  while (more.ok() && *more) {
    more = (*reader)->Next(&line, &offset);
    if (more.ok() && *more) {
      EXPECT_LT(offset, 50 << 10);
    }
  }
  ASSERT_FALSE(more.ok());
  EXPECT_EQ(more.status().code(), absl::StatusCode::kDataLoss) << more.status();
  EXPECT_THAT(more.status().message(),
              HasSubstr("bytes when opened (truncated while being read?)"));
}

TEST(MappedTextReader, ALastLineCutInsideItsPageIsDataLossNotZeros) {
  SKIP_WITHOUT_MAPPING();  // pread returns what its buffer read before the cut
  // Cut inside the file's last page: the mapping then reads zeros where the
  // lost bytes were, with no SIGBUS, and the last line (no newline) would
  // come back padded with them.
  TempPath path(".txt");
  std::string text(300u << 10, 'a');
  text.back() = '\n';
  text += std::string(3000, 'z');  // the last line, without a newline
  ASSERT_NE(text.size() % kPage, 0u);
  WriteBytes(path.path(), text);
  auto reader = TextSliceReader::Open(path.path(), 0, -1);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string line;
  int64_t offset = 0;
  ASSERT_TRUE(*(*reader)->Next(&line, &offset));
  ASSERT_EQ(::truncate(path.path().c_str(), static_cast<off_t>(text.size() - 500)), 0);
  absl::StatusOr<bool> more = (*reader)->Next(&line, &offset);
  ASSERT_FALSE(more.ok()) << "a line of " << line.size() << " bytes came back";
  EXPECT_EQ(more.status().code(), absl::StatusCode::kDataLoss) << more.status();
  EXPECT_THAT(more.status().message(), HasSubstr("truncated while being read?"));
}

TEST(MappedTextReader, ASliceStartingWhereTheFileWasCutIsDataLossNotEmpty) {
  // The file shrinks between its open and the reader's: the slice's start
  // then lies in the zeros a mapping reads past the new end of the file.
  TempPath path(".txt");
  std::string text(300u << 10, 'a');
  text.back() = '\n';
  text += std::string(3000, 'z') + "\n" + std::string(500, 'y') + "\n";
  ASSERT_NE(text.size() % kPage, 0u);
  WriteBytes(path.path(), text);
  std::unique_ptr<RandomAccessFile> file = *FileSystem::Default()->Open(path.path());
  ASSERT_EQ(::truncate(path.path().c_str(), static_cast<off_t>(text.size() - 2000)), 0);
  const int64_t start = static_cast<int64_t>(text.size()) - 1000;
  auto reader = TextSliceReader::Open(std::move(file), start, -1);
  absl::Status status = reader.status();
  if (reader.ok()) {
    std::string line;
    int64_t offset = 0;
    status = (*reader)->Next(&line, &offset).status();
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr("truncated while being read?"));
}

}  // namespace
}  // namespace shardq
