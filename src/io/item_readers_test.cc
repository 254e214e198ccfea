// The per-item readers and the one ReadUpTo loop over them (issue 16).
#include "src/io/item_readers.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardq/item_source.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/faulty_file.h"
#include "src/io/read_loop.h"
#include "src/io/record_test_util.h"

namespace shardq {
namespace {

using ::shardq::testing_util::TempPath;
using ::testing::HasSubstr;

WorkItem Parsed(const std::string& item) {
  WorkItem work_item;
  work_item.item = item;
  EXPECT_TRUE(ParseWorkItem(&work_item).ok());
  return work_item;
}

void WriteRecords(const std::string& path, FileCompression compression, int n) {
  if (compression == FileCompression::kNone) {
    auto writer = TFRecordWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    for (int i = 0; i < n; ++i) ASSERT_TRUE((*writer)->Write(absl::StrCat("r", i)).ok());
    ASSERT_TRUE((*writer)->Close().ok());
    return;
  }
  auto writer = CompressedTFRecordWriter::Create(path, compression);
  ASSERT_TRUE(writer.ok());
  for (int i = 0; i < n; ++i) ASSERT_TRUE((*writer)->Write(absl::StrCat("r", i)).ok());
  ASSERT_TRUE((*writer)->Close().ok());
}

// Auto-detected compression is judged from the same open file that is
// then read: one open per item, plain or compressed.
TEST(SetRecordKey, WritesPrefixAndOffsetOverWhatTheKeyHeld) {
  const std::string prefix = "/data/some/rather/long/path/part-00001.tfrecord:";
  std::string key = std::string(200, 'x');  // a longer stale key
  for (int64_t offset :
       {int64_t{0}, int64_t{7}, int64_t{10}, int64_t{1234567890123}, int64_t{-5},
        std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
        int64_t{42}}) {
    SetRecordKey(prefix, offset, &key);
    EXPECT_EQ(key, absl::StrCat(prefix, offset));
  }
  // Every digit count, at both ends of it (the digits go two at a time).
  for (int64_t ten = 1; ten <= std::numeric_limits<int64_t>::max() / 10; ten *= 10) {
    for (int64_t offset : {ten - 1, ten, ten * 10 - 1, -ten, 1 - ten}) {
      SetRecordKey(prefix, offset, &key);
      EXPECT_EQ(key, absl::StrCat(prefix, offset));
    }
  }
  std::string fresh;  // and an empty one
  SetRecordKey("t:", 99, &fresh);
  EXPECT_EQ(fresh, "t:99");
}

TEST(TFRecordItemReader, OpensTheFileOncePerItem) {
  for (FileCompression compression : {FileCompression::kNone, FileCompression::kGzip}) {
    TempPath path(".tfrecord");
    WriteRecords(path.path(), compression, 50);
    FaultyFileSystem fs;
    auto reader = TFRecordItemReader::Open(Parsed(path.path()), {}, &fs);
    ASSERT_TRUE(reader.ok()) << reader.status();
    Record record;
    int records = 0;
    while (*(*reader)->Next(&record)) ++records;
    EXPECT_EQ(records, 50);
    EXPECT_EQ(fs.opens(), 1) << CompressionName(compression);
  }
}

// An item whose work's planned size (WorkItem::work_size) is not the
// file's size now is refused naming the file, by both item readers: a file
// that grew since planning would have its new records read by no item.
TEST(ItemReaders, RefuseAFileWhoseSizeIsNotThePlannedOne) {
  TempPath tfrecord(".tfrecord");
  WriteRecords(tfrecord.path(), FileCompression::kNone, 10);
  TempPath text(".txt");
  {
    std::FILE* f = std::fopen(text.path().c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("a\nb\nc\n", f);
    std::fclose(f);
  }
  const int64_t tfrecord_size = 10 * (16 + 2);  // "r0".."r9": 2 bytes each
  for (int64_t planned : {tfrecord_size - 1, tfrecord_size + 5}) {
    WorkItem item = Parsed(absl::StrCat(tfrecord.path(), "?start=0&end=", tfrecord_size - 1));
    item.work_size = planned;
    auto reader = TFRecordItemReader::Open(item, {}, nullptr);
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(reader.status().message(),
                HasSubstr(absl::StrCat("'", tfrecord.path(),
                                       "' changed since the plan was made: size now ",
                                       tfrecord_size, ", planned ", planned)));
  }
  WorkItem grown = Parsed(absl::StrCat(text.path(), "?start=2&end=4"));
  grown.work_size = 4;
  auto text_reader = OpenTextItem(grown, nullptr, RecordKeys::kFill);
  ASSERT_FALSE(text_reader.ok());
  EXPECT_EQ(text_reader.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(text_reader.status().message(), HasSubstr("records appended since"));
  // The planned size, or none known: read as before.
  grown.work_size = 6;
  EXPECT_TRUE(OpenTextItem(grown, nullptr, RecordKeys::kFill).ok());
  grown.work_size = -1;
  EXPECT_TRUE(OpenTextItem(grown, nullptr, RecordKeys::kFill).ok());
  WorkItem whole = Parsed(tfrecord.path());
  EXPECT_TRUE(TFRecordItemReader::Open(whole, {}, nullptr).ok());
  // A compressed file is read whole whatever its item's range: the [0, 1)
  // of planners before issue 15 (work size 1) still reads.
  TempPath gz(".tfrecord.gz");
  WriteRecords(gz.path(), FileCompression::kGzip, 10);
  WorkItem legacy = Parsed(absl::StrCat(gz.path(), "?start=0&end=1"));
  legacy.work_size = 1;
  auto compressed = TFRecordItemReader::Open(legacy, {}, nullptr);
  ASSERT_TRUE(compressed.ok()) << compressed.status();
  Record record;
  int records = 0;
  while (*(*compressed)->Next(&record)) ++records;
  EXPECT_EQ(records, 10);
}

TEST(TFRecordItemReader, ResumeOffsetIsAfterTheLastRecordReturned) {
  TempPath path(".tfrecord");
  WriteRecords(path.path(), FileCompression::kNone, 3);
  auto reader = TFRecordItemReader::Open(Parsed(path.path()), {});
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->resume_offset(), -1);
  Record record;
  ASSERT_TRUE(*(*reader)->Next(&record));
  EXPECT_EQ(record.key, path.path() + ":0");
  EXPECT_EQ((*reader)->resume_offset(), 16 + 2);  // framing + "r0"
}

// Files as the operating system has them, except that each says it is of
// version "v7" (as an object's ETag would) and writes down the read-ahead
// hints it is given.
class HintRecordingFileSystem final : public FileSystem {
 public:
  using Hint = std::pair<int64_t, int64_t>;

  std::vector<Hint> hints() const {
    absl::MutexLock lock(&mu_);
    return hints_;
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path) override {
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
        FileSystem::Default()->Open(path);
    if (!file.ok()) return file.status();
    return std::unique_ptr<RandomAccessFile>(new File(*std::move(file), this));
  }

 private:
  class File final : public RandomAccessFile {
   public:
    File(std::unique_ptr<RandomAccessFile> file, HintRecordingFileSystem* fs)
        : RandomAccessFile(file->path(), file->size()), file_(std::move(file)), fs_(fs) {}
    absl::StatusOr<size_t> ReadSome(int64_t offset, size_t n, char* dst) override {
      return file_->ReadSome(offset, n, dst);
    }
    std::string version() const override { return "v7"; }
    void WillRead(int64_t start, int64_t end) override {
      absl::MutexLock lock(&fs_->mu_);
      fs_->hints_.emplace_back(start, end);
    }

   private:
    const std::unique_ptr<RandomAccessFile> file_;
    HintRecordingFileSystem* const fs_;
  };

  mutable absl::Mutex mu_;
  std::vector<Hint> hints_ ABSL_GUARDED_BY(mu_);
};

// A FaultyFile is the file it wraps but for its faults: the range a reader
// announces reaches the wrapped file (a remote one fetches it ahead).
TEST(FaultyFile, PassesAReadersRangeHintToTheWrappedFile) {
  TempPath path(".tfrecord");
  WriteRecords(path.path(), FileCompression::kNone, 1000);
  const int64_t size = *FileSize(path.path());
  const int64_t start = size / 3;
  const int64_t end = 2 * size / 3;
  HintRecordingFileSystem recording;
  FaultyFileSystem fs(&recording);
  FileFaults faults;
  faults.max_read_bytes = 7;  // some fault, so that the file is a FaultyFile
  fs.SetFaults(path.path(), faults);

  auto reader = TFRecordItemReader::Open(
      Parsed(absl::StrCat(path.path(), "?start=", start, "&end=", end)), {}, &fs);
  ASSERT_TRUE(reader.ok()) << reader.status();
  Record record;
  int records = 0;
  while (*(*reader)->Next(&record)) ++records;
  EXPECT_GT(records, 0);
  EXPECT_LT(records, 1000);
  EXPECT_GT(faults.reads->load(), 0);
  EXPECT_THAT(recording.hints(), ::testing::AllOf(::testing::Not(::testing::IsEmpty()),
                                                  ::testing::Each(::testing::Pair(start, end))));
}

// ... and so does the question of its version: a plan's ETag is checked
// against the wrapped file's.
TEST(FaultyFile, HasTheVersionOfTheWrappedFile) {
  TempPath path(".tfrecord");
  WriteRecords(path.path(), FileCompression::kNone, 10);
  HintRecordingFileSystem recording;
  FaultyFileSystem fs(&recording);
  FileFaults faults;
  faults.max_read_bytes = 7;
  fs.SetFaults(path.path(), faults);

  auto reader = TFRecordItemReader::Open(Parsed(path.path() + "?etag=v7"), {}, &fs);
  ASSERT_TRUE(reader.ok()) << reader.status();
  auto replaced = TFRecordItemReader::Open(Parsed(path.path() + "?etag=v6"), {}, &fs);
  EXPECT_EQ(replaced.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(replaced.status().message(), HasSubstr("ETag now v7, planned v6"));
}

// Hands out the given items once each; counts completions. With `peek`,
// says which item comes next (PeekNextItem), as a WorkQueue with items
// taken ahead does.
class Items final : public ItemSource {
 public:
  explicit Items(std::vector<std::string> items, bool peek = false)
      : items_(std::move(items)), peek_(peek) {}
  absl::StatusOr<WorkItem> NextItem() override {
    if (next_ == items_.size()) return absl::OutOfRangeError("end");
    return Parsed(items_[next_++]);
  }
  std::optional<WorkItem> PeekNextItem() override {
    if (!peek_ || next_ == items_.size()) return std::nullopt;
    return Parsed(items_[next_]);
  }
  absl::Status ItemDone(const WorkItem&) override {
    ++done;
    return absl::OkStatus();
  }
  int done = 0;

 private:
  std::vector<std::string> items_;
  const bool peek_;
  size_t next_ = 0;
};

// The local file system, writing down the opens it was told of (WillOpen).
class HintedFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(const std::string& path) override {
    return FileSystem::Default()->Open(path);
  }
  void WillOpen(const std::string& path, int64_t start, int64_t end) override {
    hints.push_back(absl::StrCat(path, " [", start, ", ", end, ")"));
  }
  std::vector<std::string> hints;
};

// An I/O fault inside an item: the records before it come first, then the
// error, again on every later call; the item is never completed.
TEST(ReadLoop, ReadErrorComesAfterTheRecordsBeforeItAndStays) {
  TempPath path(".tfrecord");
  WriteRecords(path.path(), FileCompression::kNone, 1000);
  FaultyFileSystem fs;
  FileFaults faults;
  faults.error_at = 5000;
  faults.read_errno = EIO;
  fs.SetFaults(path.path(), faults);
  TFRecordReaderOptions options;
  options.buffer_bytes = 1024;
  ReadLoop<Record> loop([&](const WorkItem& item)
                            -> absl::StatusOr<std::unique_ptr<ItemReader<Record>>> {
    auto reader = TFRecordItemReader::Open(item, options, &fs);
    if (!reader.ok()) return reader.status();
    return std::unique_ptr<ItemReader<Record>>(*std::move(reader));
  });
  Items source({path.path()});
  absl::StatusOr<std::vector<Record>> got = loop.ReadUpTo(source, 100000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GT(got->size(), 0u);
  EXPECT_LT(got->size(), 1000u);
  for (int call = 0; call < 2; ++call) {
    got = loop.ReadUpTo(source, 10);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(got.status().message(), HasSubstr(path.path()));
  }
  EXPECT_EQ(source.done, 0);
}

TEST(ReadLoop, CompletesEachItemAfterItsLastRecord) {
  TempPath a(".tfrecord");
  TempPath b(".tfrecord");
  WriteRecords(a.path(), FileCompression::kNone, 3);
  WriteRecords(b.path(), FileCompression::kGzip, 4);
  ReadLoop<Record> loop([](const WorkItem& item)
                            -> absl::StatusOr<std::unique_ptr<ItemReader<Record>>> {
    auto reader = TFRecordItemReader::Open(item, {});
    if (!reader.ok()) return reader.status();
    return std::unique_ptr<ItemReader<Record>>(*std::move(reader));
  });
  Items source({a.path(), b.path()});
  absl::StatusOr<std::vector<Record>> got = loop.ReadUpTo(source, 3);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), 3u);
  EXPECT_EQ(source.done, 0);  // its end is seen only by the next read
  got = loop.ReadUpTo(source, 100);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), 4u);
  EXPECT_EQ(source.done, 2);
  EXPECT_EQ(loop.ReadUpTo(source, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(loop.records(), 7);
  EXPECT_EQ(loop.items_done(), 2);
}

// A TFRecord ReadLoop over `fs` that announces the next item to it.
std::unique_ptr<ReadLoop<Record>> HintingLoop(HintedFileSystem& fs) {
  return std::make_unique<ReadLoop<Record>>(
      [&fs](const WorkItem& item) -> absl::StatusOr<std::unique_ptr<ItemReader<Record>>> {
        auto reader = TFRecordItemReader::Open(item, {}, &fs);
        if (!reader.ok()) return reader.status();
        return std::unique_ptr<ItemReader<Record>>(*std::move(reader));
      },
      nullptr, [&fs](const WorkItem& item) { OpenTFRecordItemAhead(item, &fs); });
}

// The item after the one being read is announced to the file system once,
// while the one before is read.
TEST(ReadLoop, AnnouncesTheNextItemOnceWhileTheOneBeforeIsRead) {
  TempPath a(".tfrecord");
  WriteRecords(a.path(), FileCompression::kNone, 30);
  const std::string first = a.path() + "?start=0&end=100";
  const std::string second = a.path() + "?start=100&end=250";
  const std::string third = a.path() + "?start=250";
  HintedFileSystem fs;
  std::unique_ptr<ReadLoop<Record>> loop = HintingLoop(fs);
  Items source({first, second, third}, /*peek=*/true);
  ASSERT_TRUE(loop->ReadUpTo(source, 1).ok());
  EXPECT_THAT(fs.hints, ::testing::ElementsAre(a.path() + " [100, 250)"));
  ASSERT_TRUE(loop->ReadUpTo(source, 1).ok());  // the same item: no new hint
  EXPECT_EQ(fs.hints.size(), 1u);
  int64_t records = 2;
  while (true) {
    absl::StatusOr<std::vector<Record>> got = loop->ReadUpTo(source, 1);
    if (absl::IsOutOfRange(got.status())) break;
    ASSERT_TRUE(got.ok()) << got.status();
    records += static_cast<int64_t>(got->size());
  }
  EXPECT_EQ(records, 30);
  // The last item has none after it.
  EXPECT_THAT(fs.hints, ::testing::ElementsAre(a.path() + " [100, 250)",
                                                a.path() + " [250, -1)"));
}

// Each hint names the range its reader's open asks for: a TFRecord item's
// own, a text item's from the byte before it (which decides where its
// first line starts).
TEST(ReadLoop, AnItemIsAnnouncedWithTheRangeItsReaderOpens) {
  HintedFileSystem fs;
  OpenTextItemAhead(Parsed("/data/x.txt?start=40&end=90"), &fs);
  OpenTextItemAhead(Parsed("/data/x.txt?start=0&end=90"), &fs);
  OpenTFRecordItemAhead(Parsed("/data/x.tfrecord?start=40&end=90"), &fs);
  OpenTFRecordItemAhead(Parsed("/data/x.tfrecord"), &fs);
  EXPECT_THAT(fs.hints, ::testing::ElementsAre("/data/x.txt [39, 90)", "/data/x.txt [0, 90)",
                                               "/data/x.tfrecord [40, 90)",
                                               "/data/x.tfrecord [0, -1)"));
}

// A source that never says what comes next gets no hints.
TEST(ReadLoop, ASourceWithoutPeeksGetsNoHints) {
  TempPath a(".tfrecord");
  WriteRecords(a.path(), FileCompression::kNone, 5);
  HintedFileSystem fs;
  std::unique_ptr<ReadLoop<Record>> loop = HintingLoop(fs);
  Items source({a.path() + "?start=0&end=30", a.path() + "?start=30"});
  absl::StatusOr<std::vector<Record>> got = loop->ReadUpTo(source, 100);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->size(), 5u);
  EXPECT_TRUE(fs.hints.empty());
}

}  // namespace
}  // namespace shardq
