#include "shardq/tfrecord_reader.h"

#include <zlib.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shardq/slice.h"
#include "shardq/splittable_range.h"
#include "src/core/slice_plan.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/record_test_util.h"

namespace shardq {
namespace {

using ::shardq::testing_util::EncodeAll;
using ::shardq::testing_util::OneItemSource;
using ::shardq::testing_util::RandomPayload;
using ::shardq::testing_util::RecordOffsets;
using ::shardq::testing_util::TempPath;
using ::shardq::testing_util::WriteBytes;
using ::testing::HasSubstr;

// Reads every item of `items` in batches of `batch`; fails on any error.
std::vector<Record> ReadAll(const std::vector<std::string>& items,
                            TFRecordReaderOptions options = {},
                            int64_t batch = 7,
                            TFRecordReaderStats* stats = nullptr) {
  ListItemSource source(items);
  TFRecordReader reader(options);
  std::vector<Record> out;
  while (true) {
    absl::StatusOr<std::vector<Record>> got = reader.ReadUpTo(source, batch);
    if (absl::IsOutOfRange(got.status())) break;
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) break;
    out.insert(out.end(), got->begin(), got->end());
  }
  if (stats != nullptr) *stats = reader.stats();
  return out;
}

std::string WriteRecordsFile(const std::string& path,
                             const std::vector<std::string>& records) {
  WriteBytes(path, EncodeAll(records));
  return path;
}

void WriteGzip(const std::string& path, const std::vector<std::string>& records) {
  auto writer = CompressedTFRecordWriter::Create(path, FileCompression::kGzip);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (const std::string& r : records) ASSERT_TRUE((*writer)->Write(r).ok());
  ASSERT_TRUE((*writer)->Close().ok());
}

TEST(TFRecordReader, RandomPlansYieldEveryRecordOnceInOrder) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 25; ++trial) {
    std::vector<std::string> records;
    const int count = static_cast<int>(rng() % 120);
    for (int i = 0; i < count; ++i) records.push_back(RandomPayload(rng));
    TempPath path(".tfrecord");
    WriteRecordsFile(path.path(), records);
    const int64_t size = static_cast<int64_t>(EncodeAll(records).size());
    const int64_t slices = 1 + static_cast<int64_t>(rng() % 50);
    absl::StatusOr<std::vector<std::string>> plan =
        PlanSlices({{path.path(), size}}, slices);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::vector<Record> got =
        ReadAll(*plan, {}, 1 + static_cast<int64_t>(rng() % 20));
    ASSERT_EQ(got.size(), records.size()) << "trial " << trial;
    const std::vector<int64_t> offsets = RecordOffsets(records);
    size_t next_item = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].value, records[i]) << "trial " << trial << " record " << i;
      // The key names the item holding the record and its offset.
      const std::string suffix = absl::StrCat(":", offsets[i]);
      ASSERT_TRUE(absl::EndsWith(got[i].key, suffix)) << got[i].key;
      const std::string item = got[i].key.substr(0, got[i].key.size() - suffix.size());
      while (next_item < plan->size() && (*plan)[next_item] != item) ++next_item;
      ASSERT_LT(next_item, plan->size()) << "keys out of plan order: " << item;
      absl::StatusOr<SliceSpec> spec = ParseItem(item);
      ASSERT_TRUE(spec.ok());
      EXPECT_GE(offsets[i], *spec->start);
      EXPECT_LT(offsets[i], *spec->end);
    }
  }
}

TEST(TFRecordReader, CompletesAnItemOnlyAfterItsLastRecord) {
  TempPath path(".tfrecord");
  OneItemSource source(WriteRecordsFile(path.path(), {"1", "2", "3"}));
  TFRecordReader reader;
  ASSERT_EQ(reader.ReadUpTo(source, 2)->size(), 2u);
  EXPECT_EQ(source.done, 0);
  ASSERT_EQ(reader.ReadUpTo(source, 2)->size(), 1u);
  EXPECT_EQ(source.done, 1);
  EXPECT_TRUE(absl::IsOutOfRange(reader.ReadUpTo(source, 2).status()));
  EXPECT_EQ(reader.stats().items_done, 1);
  EXPECT_EQ(reader.stats().records, 3);
}

TEST(TFRecordReader, RecordsBeforeAnErrorComeFirstThenTheError) {
  TempPath path(".tfrecord");
  const std::string missing = "/nonexistent/shardq/gone.tfrecord";
  ListItemSource source({WriteRecordsFile(path.path(), {"a", "b"}), missing});
  TFRecordReader reader;
  absl::StatusOr<std::vector<Record>> first = reader.ReadUpTo(source, 10);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), 2u);
  absl::Status error = reader.ReadUpTo(source, 10).status();
  EXPECT_EQ(error.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(error.message(), HasSubstr(missing));
}

// The ReadUpTo into a caller's vector: the same records and keys as the
// one returning a new vector, in place over what the vector held (longer
// and shorter values than before, a batch shorter than the vector).
TEST(TFRecordReader, ReadUpToIntoACallersVectorOverwritesItWithTheSameRecords) {
  std::mt19937_64 rng(3);
  std::vector<std::string> records;
  for (int i = 0; i < 200; ++i) {
    records.push_back(RandomPayload(rng));
  }
  TempPath a(".tfrecord");
  TempPath b(".tfrecord");
  const std::vector<std::string> items = {
      WriteRecordsFile(a.path(), records),
      WriteRecordsFile(b.path(), {"x", "yy"})};
  const std::vector<Record> expected = ReadAll(items, {}, 7);
  ASSERT_EQ(expected.size(), 202u);

  ListItemSource source(items);
  TFRecordReader reader;
  std::vector<Record> batch(3, Record{"stale key", std::string(2000, 's')});
  std::vector<Record> got;
  while (true) {
    absl::Status s = reader.ReadUpTo(source, 16, &batch);
    if (absl::IsOutOfRange(s)) {
      EXPECT_TRUE(batch.empty());
      break;
    }
    ASSERT_TRUE(s.ok()) << s;
    ASSERT_GE(batch.size(), 1u);
    ASSERT_LE(batch.size(), 16u);
    got.insert(got.end(), batch.begin(), batch.end());
  }
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].key, expected[i].key) << i;
    EXPECT_EQ(got[i].value, expected[i].value) << i;
  }
  EXPECT_EQ(reader.stats().records, 202);
  EXPECT_EQ(reader.stats().items_done, 2);
}

TEST(TFRecordReader, ReadUpToIntoACallersVectorGivesRecordsBeforeAnErrorThenTheError) {
  TempPath path(".tfrecord");
  std::string bytes = EncodeAll({"first", "second"});
  const int64_t second = RecordOffsets({"first", "second"})[1];
  bytes[static_cast<size_t>(second) + 14] ^= 0x01;  // data of "second"
  WriteBytes(path.path(), bytes);
  OneItemSource source(path.path());
  TFRecordReader reader;
  std::vector<Record> batch(5);
  ASSERT_TRUE(reader.ReadUpTo(source, 10, &batch).ok());
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0].value, "first");
  absl::Status error = reader.ReadUpTo(source, 10, &batch);
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(error.message(), HasSubstr(path.path()));
  EXPECT_THAT(error.message(), HasSubstr(absl::StrCat("byte offset ", second)));
  EXPECT_TRUE(batch.empty());
  EXPECT_EQ(source.done, 0);  // the failing item stays held
  EXPECT_EQ(reader.ReadUpTo(source, 10, &batch).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(reader.ReadUpTo(source, 0, &batch).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TFRecordReader, CorruptRecordFailsNamingFileAndOffsetOrIsSkippedAndCounted) {
  TempPath path(".tfrecord");
  std::string bytes = EncodeAll({"first", "second", "third"});
  const int64_t second = RecordOffsets({"first", "second"})[1];
  bytes[static_cast<size_t>(second) + 14] ^= 0x01;  // data of "second"
  WriteBytes(path.path(), bytes);

  ListItemSource source({path.path()});
  TFRecordReader reader;
  absl::StatusOr<std::vector<Record>> got = reader.ReadUpTo(source, 10);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 1u);  // "first", then the deferred error
  absl::Status error = reader.ReadUpTo(source, 10).status();
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(error.message(), HasSubstr(path.path()));
  EXPECT_THAT(error.message(), HasSubstr(absl::StrCat("byte offset ", second)));

  TFRecordReaderOptions skip;
  skip.on_corrupt = TFRecordReaderOptions::OnCorrupt::kSkip;
  TFRecordReaderStats stats;
  ::testing::internal::CaptureStderr();
  std::vector<Record> records = ReadAll({path.path()}, skip, 10, &stats);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].value, "first");
  EXPECT_EQ(records[1].value, "third");
  EXPECT_EQ(stats.corrupt_regions, 1);
  EXPECT_EQ(stats.skipped_bytes, 16 + 6);
  EXPECT_EQ(stats.items_done, 1);
  EXPECT_THAT(log, HasSubstr(absl::StrCat("skipped 1 corrupt region(s), 22 bytes, in '",
                                          path.path(), "'")));
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1);
}

TEST(TFRecordReader, GzipFileIsReadWholeForWholeRanges) {
  std::mt19937_64 rng(12);
  std::vector<std::string> records;
  for (int i = 0; i < 100; ++i) records.push_back(RandomPayload(rng));
  TempPath path(".tfrecord.gz");
  WriteGzip(path.path(), records);
  const int64_t size = static_cast<int64_t>(testing_util::ReadBytes(path.path()).size());
  // No range, the planner's one-unit slice, and the whole byte range.
  for (const std::string& item :
       {path.path(), absl::StrCat(path.path(), "?start=0&end=1"),
        absl::StrCat(path.path(), "?start=0&end=", size)}) {
    std::vector<Record> got = ReadAll({item});
    ASSERT_EQ(got.size(), records.size()) << item;
    const std::vector<int64_t> offsets = RecordOffsets(records);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].value, records[i]);
      EXPECT_EQ(got[i].key, absl::StrCat(item, ":", offsets[i]));
    }
  }
  // What the planner makes of it: one whole item, whatever num_slices says.
  absl::StatusOr<std::vector<std::string>> plan =
      PlanSlices({{path.path(), size, /*splittable=*/false}}, 40);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(*plan, std::vector<std::string>{path.path()});
  EXPECT_EQ(ReadAll(*plan).size(), records.size());
}

// Hands out each item once with a live range, as a WorkQueue does.
class RangedSource : public ItemSource {
 public:
  explicit RangedSource(std::string item) : item_(std::move(item)) {}
  absl::StatusOr<WorkItem> NextItem() override {
    if (given_) return absl::OutOfRangeError("end");
    given_ = true;
    WorkItem item{item_, 0, 0, 1, nullptr, std::nullopt};
    const absl::Status parsed = ParseWorkItem(&item);  // as WorkQueue::Take
    const std::optional<SliceSpec>& spec = item.spec;
    if (parsed.ok() && spec->start && spec->end) {
      item.range = std::make_shared<SplittableRange>(*spec->start, *spec->end);
    }
    range = item.range;
    return item;
  }
  absl::Status ItemDone(const WorkItem&) override {
    ++done;
    return absl::OkStatus();
  }
  int done = 0;
  std::shared_ptr<SplittableRange> range;

 private:
  std::string item_;
  bool given_ = false;
};

// Issue 15 item 1: a compressed file's records lie past its [0, 1) range in
// the decompressed stream; a reader claiming them from the live range read
// only the first record.
TEST(TFRecordReader, CompressedItemWithALiveRangeIsReadWholeAndNeverSplit) {
  std::vector<std::string> records;
  for (int i = 0; i < 500; ++i) records.push_back(absl::StrCat("gzip record ", i));
  TempPath path(".tfrecord.gz");
  WriteGzip(path.path(), records);
  const int64_t size = static_cast<int64_t>(testing_util::ReadBytes(path.path()).size());
  for (const std::string& item : {absl::StrCat(path.path(), "?start=0&end=1"),
                                  absl::StrCat(path.path(), "?start=0&end=", size)}) {
    RangedSource source(item);
    TFRecordReader reader;
    std::vector<Record> got;
    while (true) {
      absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(source, 64);
      if (absl::IsOutOfRange(batch.status())) break;
      ASSERT_TRUE(batch.ok()) << batch.status();
      got.insert(got.end(), batch->begin(), batch->end());
    }
    ASSERT_EQ(got.size(), records.size()) << item;
    EXPECT_EQ(got.back().value, records.back());
    EXPECT_EQ(source.done, 1);
    // No record was claimed, so the coordinator can never split it.
    ASSERT_NE(source.range, nullptr);
    EXPECT_FALSE(source.range->Split(size / 2, 1).has_value());
  }
}

TEST(TFRecordReader, CompressedItemEndingPastTheFileIsRefusedAsChanged) {
  TempPath path(".tfrecord.gz");
  WriteGzip(path.path(), {"a", "b", "c"});
  const int64_t size = static_cast<int64_t>(testing_util::ReadBytes(path.path()).size());
  ListItemSource source({absl::StrCat(path.path(), "?start=0&end=", size + 100)});
  TFRecordReader reader;
  absl::Status s = reader.ReadUpTo(source, 10).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("'", path.path(), "' changed since the plan "
                                                  "was made: size ", size, ", item ends at ",
                                                  size + 100)));
}

// Issue 15 item 4: a file cut shorter after planning is refused, not read
// short and completed.
TEST(TFRecordReader, ItemEndingPastTheEndOfTheFileIsRefusedAsChanged) {
  std::vector<std::string> records;
  for (int i = 0; i < 100; ++i) records.push_back(absl::StrCat("record ", 1000 + i));
  TempPath path(".tfrecord");
  WriteRecordsFile(path.path(), records);
  const int64_t size = static_cast<int64_t>(testing_util::ReadBytes(path.path()).size());
  const std::string whole = absl::StrCat(path.path(), "?start=0&end=", size);
  const int64_t cut = RecordOffsets(records)[40];
  WriteRecordsFile(path.path(), std::vector<std::string>(records.begin(), records.begin() + 40));
  ASSERT_EQ(static_cast<int64_t>(testing_util::ReadBytes(path.path()).size()), cut);
  for (const std::string& item :
       {whole, absl::StrCat(path.path(), "?start=2000&end=200000")}) {
    OneItemSource source(item);
    TFRecordReader reader;
    absl::Status s = reader.ReadUpTo(source, 1000).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << item << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("'", path.path(),
                                                    "' changed since the plan was made: size ",
                                                    cut, ", item ends at ")));
    EXPECT_EQ(source.done, 0);  // the item stays held
  }
}

TEST(TFRecordReader, RecordRunningPastTheEndInsideTheItemIsDataLossNamingFileAndOffset) {
  std::vector<std::string> records(20, std::string(100, 'r'));
  TempPath path(".tfrecord");
  WriteRecordsFile(path.path(), records);
  const std::vector<int64_t> offsets = RecordOffsets(records);
  const std::string bytes = testing_util::ReadBytes(path.path());
  const int64_t cut = offsets[12] + 50;  // inside record 12's data
  WriteBytes(path.path(), bytes.substr(0, static_cast<size_t>(cut)));
  OneItemSource source(absl::StrCat(path.path(), "?start=0&end=", cut));
  TFRecordReader reader;
  absl::Status error;
  int64_t read = 0;
  while (true) {
    absl::StatusOr<std::vector<Record>> got = reader.ReadUpTo(source, 5);
    if (!got.ok()) {
      error = got.status();
      break;
    }
    read += static_cast<int64_t>(got->size());
  }
  EXPECT_EQ(read, 12);
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss) << error;
  EXPECT_THAT(error.message(), HasSubstr(path.path()));
  EXPECT_THAT(error.message(), HasSubstr(absl::StrCat("byte offset ", offsets[12])));
  EXPECT_EQ(source.done, 0);
}

// Issue 15 item 5: a text file given to the TFRecord reader fails on its
// first header, and the message says what is most likely wrong.
TEST(TFRecordReader, TextFileIsDataLossSayingItIsNotATFRecordFile) {
  TempPath path(".tfrecord");
  WriteBytes(path.path(), "just some text\nand another line\n");
  ListItemSource source({path.path()});
  TFRecordReader reader;
  absl::Status s = reader.ReadUpTo(source, 10).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(path.path()));
  EXPECT_THAT(s.message(), HasSubstr("byte offset 0"));
  EXPECT_THAT(s.message(), HasSubstr("does not start with a TFRecord header"));
  EXPECT_THAT(s.message(), HasSubstr("TextLineReader"));
}

TEST(TFRecordReader, CuttingACompressedFileIsInvalidArgumentNamingIt) {
  TempPath path(".tfrecord.gz");
  WriteGzip(path.path(), {"a", "b", "c"});
  const int64_t size = static_cast<int64_t>(testing_util::ReadBytes(path.path()).size());
  for (const std::string& range :
       {std::string("?start=0&end=10"), absl::StrCat("?start=1&end=", size),
        std::string("?start=0&end=0")}) {
    ListItemSource source({path.path() + range});
    TFRecordReader reader;
    absl::Status s = reader.ReadUpTo(source, 10).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << range;
    EXPECT_THAT(s.message(), HasSubstr(path.path()));
    EXPECT_THAT(s.message(), HasSubstr("cannot be cut"));
  }
}

TEST(TFRecordReader, CompressionOptionOverridesDetection) {
  // A ZLIB file without a .zz name is only read as ZLIB when told so.
  TempPath path(".tfrecord");
  const std::string stream = EncodeAll({"zlib", "records"});
  uLongf size = compressBound(static_cast<uLong>(stream.size()));
  std::string compressed(size, '\0');
  ASSERT_EQ(compress2(reinterpret_cast<Bytef*>(compressed.data()), &size,
                      reinterpret_cast<const Bytef*>(stream.data()),
                      static_cast<uLong>(stream.size()), 6),
            Z_OK);
  compressed.resize(size);
  WriteBytes(path.path(), compressed);

  ListItemSource source({path.path()});
  TFRecordReader auto_reader;
  EXPECT_EQ(auto_reader.ReadUpTo(source, 10).status().code(),
            absl::StatusCode::kDataLoss);  // not a plain TFRecord file
  TFRecordReaderOptions zlib;
  zlib.compression = TFRecordReaderOptions::Compression::kZlib;
  std::vector<Record> got = ReadAll({path.path()}, zlib);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[1].value, "records");
}

TEST(TFRecordReader, CorruptGzipIsDataLossNamingTheFile) {
  TempPath path(".tfrecord.gz");
  std::vector<std::string> records(500, std::string(200, 'r'));
  WriteGzip(path.path(), records);
  std::string bytes = testing_util::ReadBytes(path.path());
  WriteBytes(path.path(), bytes.substr(0, bytes.size() - 10));  // truncated
  ListItemSource source({path.path()});
  TFRecordReader reader;
  absl::Status error;
  while (true) {
    absl::StatusOr<std::vector<Record>> got = reader.ReadUpTo(source, 64);
    if (!got.ok()) {
      error = got.status();
      break;
    }
  }
  EXPECT_EQ(error.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(error.message(), HasSubstr(path.path()));
  EXPECT_EQ(reader.stats().items_done, 0);  // the item stays held
}

TEST(TFRecordReader, RejectsNonPositiveBatch) {
  ListItemSource source({"whatever"});
  TFRecordReader reader;
  EXPECT_EQ(reader.ReadUpTo(source, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardq
