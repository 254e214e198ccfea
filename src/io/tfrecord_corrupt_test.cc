// The TFRecord slice reader on damaged input: every kind of corruption is
// DATA_LOSS naming the file and offset (or skipped under the skip policy),
// wherever a slice boundary falls, and a huge length is never allocated.
#include "src/io/tfrecord.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/io/crc32c.h"
#include "src/io/largest_allocation_testing.h"
#include "src/io/record_test_util.h"
#include "src/io/tfrecord_test_util.h"

namespace shardq {
namespace {

using ::shardq::testing_util::EncodeAll;
using ::shardq::testing_util::WriteBytes;
using ::testing::HasSubstr;
using tfrecord_testing::kFraming;
using tfrecord_testing::ReadSlice;
using tfrecord_testing::Rec;
using tfrecord_testing::TempFile;
using tfrecord_testing::WithOffsets;

// ---------------------------------------------------------------------------
// Reader: corrupt input

enum class Damage {
  kLengthCrc,      // a bit of the stored length CRC flipped
  kLengthField,    // a bit of the length flipped
  kDataByte,       // a bit of the data flipped
  kDataCrc,        // a bit of the stored data CRC flipped
  kLengthPastEnd,  // a length (with a valid CRC) longer than the file
  kTruncated,      // the file cut inside the record (last record only)
};

const char* DamageName(Damage damage) {
  switch (damage) {
    case Damage::kLengthCrc: return "length crc";
    case Damage::kLengthField: return "length field";
    case Damage::kDataByte: return "data byte";
    case Damage::kDataCrc: return "data crc";
    case Damage::kLengthPastEnd: return "length past end";
    case Damage::kTruncated: return "truncated";
  }
  return "?";
}

const Damage kAllDamage[] = {Damage::kLengthCrc, Damage::kLengthField,
                             Damage::kDataByte,  Damage::kDataCrc,
                             Damage::kLengthPastEnd, Damage::kTruncated};

// Damages the record at `rec` (offset, data) inside `bytes`.
void Apply(Damage damage, const Rec& rec, std::string* bytes) {
  const size_t at = static_cast<size_t>(rec.offset);
  switch (damage) {
    case Damage::kLengthCrc:
      (*bytes)[at + 9] ^= 0x10;
      break;
    case Damage::kLengthField:
      (*bytes)[at] ^= 0x01;
      break;
    case Damage::kDataByte:
      (*bytes)[at + kTFRecordHeaderBytes + rec.data.size() / 2] ^= 0x40;
      break;
    case Damage::kDataCrc:
      (*bytes)[at + kTFRecordHeaderBytes + rec.data.size() + 1] ^= 0x02;
      break;
    case Damage::kLengthPastEnd: {
      const std::string header =
          EncodeTFRecord(std::string(bytes->size(), '\0'))
              .substr(0, kTFRecordHeaderBytes);
      bytes->replace(at, kTFRecordHeaderBytes, header);
      break;
    }
    case Damage::kTruncated:
      bytes->resize(at + kTFRecordHeaderBytes + rec.data.size() / 2);
      break;
  }
}

// Five records; each damage kind is tried on the first, a middle and the
// last one (truncation only on the last).
struct CorruptCase {
  Damage damage;
  size_t victim;
};

std::vector<CorruptCase> CorruptCases() {
  std::vector<CorruptCase> cases;
  for (Damage damage : kAllDamage) {
    for (size_t victim : {size_t{0}, size_t{2}, size_t{4}}) {
      if (damage == Damage::kTruncated && victim != 4) continue;
      cases.push_back({damage, victim});
    }
  }
  return cases;
}

const std::vector<std::string>& FiveRecords() {
  static const auto* records = new std::vector<std::string>{
      "first record data", "second", "the middle record", "fourth one",
      "the last record of the file"};
  return *records;
}

TEST(TFRecordSliceReader, EachCorruptionFailsWithDataLossNamingFileAndOffset) {
  const TempFile temp;
  const std::string& path = temp.path();
  const std::vector<Rec> all = WithOffsets(FiveRecords());
  for (const CorruptCase& c : CorruptCases()) {
    SCOPED_TRACE(absl::StrCat(DamageName(c.damage), " in record ", c.victim));
    std::string bytes = EncodeAll(FiveRecords());
    Apply(c.damage, all[c.victim], &bytes);
    WriteBytes(path, bytes);

    auto reader = TFRecordSliceReader::Open(path, 0, -1, {});
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::string data;
    int64_t offset;
    for (size_t i = 0; i < c.victim; ++i) {
      absl::StatusOr<bool> more = (*reader)->Next(&data, &offset);
      ASSERT_TRUE(more.ok()) << more.status();
      ASSERT_TRUE(*more);
      EXPECT_EQ(data, all[i].data);
    }
    absl::StatusOr<bool> more = (*reader)->Next(&data, &offset);
    ASSERT_FALSE(more.ok());
    EXPECT_EQ(more.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(more.status().message(), HasSubstr(path));
    EXPECT_THAT(more.status().message(),
                HasSubstr(absl::StrCat("byte offset ", all[c.victim].offset)));
    // The error sticks.
    EXPECT_EQ((*reader)->Next(&data, &offset).status(), more.status());
  }
}

TEST(TFRecordSliceReader, SkipPolicyRecoversTheRecordsAfterEachCorruption) {
  const TempFile temp;
  const std::string& path = temp.path();
  const std::vector<Rec> all = WithOffsets(FiveRecords());
  TFRecordReadOptions skip;
  skip.on_corrupt = TFRecordReadOptions::kSkip;
  for (const CorruptCase& c : CorruptCases()) {
    SCOPED_TRACE(absl::StrCat(DamageName(c.damage), " in record ", c.victim));
    std::string bytes = EncodeAll(FiveRecords());
    Apply(c.damage, all[c.victim], &bytes);
    WriteBytes(path, bytes);
    std::vector<Rec> expected = all;
    expected.erase(expected.begin() + static_cast<ptrdiff_t>(c.victim));
    const int64_t damaged_bytes =
        c.damage == Damage::kTruncated
            ? static_cast<int64_t>(bytes.size()) - all[c.victim].offset
            : kFraming + static_cast<int64_t>(all[c.victim].data.size());

    TFRecordReadStats stats;
    absl::StatusOr<std::vector<Rec>> got = ReadSlice(path, 0, -1, skip, &stats);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, expected);
    EXPECT_EQ(stats.corrupt_regions, 1);
    EXPECT_EQ(stats.skipped_bytes, damaged_bytes);
    EXPECT_EQ(stats.records, 4);
  }
}

// Wherever the slice boundary falls relative to a damaged record, under
// kFail some slice reports it, and under kSkip exactly one slice counts it
// while the others' records all come through.
TEST(TFRecordSliceReader, CorruptRecordIsCaughtWhereverTheSliceBoundaryFalls) {
  const TempFile temp;
  const std::string& path = temp.path();
  const std::vector<Rec> all = WithOffsets(FiveRecords());
  TFRecordReadOptions skip;
  skip.on_corrupt = TFRecordReadOptions::kSkip;
  for (Damage damage : {Damage::kLengthCrc, Damage::kDataByte,
                        Damage::kLengthPastEnd}) {
    const Rec& victim = all[2];
    std::string bytes = EncodeAll(FiveRecords());
    Apply(damage, victim, &bytes);
    WriteBytes(path, bytes);
    const int64_t size = static_cast<int64_t>(bytes.size());
    std::vector<Rec> expected = all;
    expected.erase(expected.begin() + 2);
    for (int64_t cut = all[1].offset - 1; cut <= all[3].offset + 1; ++cut) {
      SCOPED_TRACE(absl::StrCat(DamageName(damage), ", slices [0, ", cut,
                                ") [", cut, ", ", size, ")"));
      absl::StatusOr<std::vector<Rec>> first = ReadSlice(path, 0, cut);
      absl::StatusOr<std::vector<Rec>> second = ReadSlice(path, cut, size);
      const bool reported =
          (!first.ok() &&
           absl::StrContains(first.status().message(),
                             absl::StrCat("byte offset ", victim.offset))) ||
          (!second.ok() &&
           absl::StrContains(second.status().message(),
                             absl::StrCat("byte offset ", victim.offset)));
      EXPECT_TRUE(reported) << first.status() << " / " << second.status();

      TFRecordReadStats stats;
      std::vector<Rec> joined;
      for (auto [start, end] :
           {std::pair<int64_t, int64_t>{0, cut}, {cut, size}}) {
        absl::StatusOr<std::vector<Rec>> part =
            ReadSlice(path, start, end, skip, &stats);
        ASSERT_TRUE(part.ok()) << part.status();
        joined.insert(joined.end(), part->begin(), part->end());
      }
      EXPECT_EQ(joined, expected);
      EXPECT_EQ(stats.corrupt_regions, 1);
      EXPECT_EQ(stats.skipped_bytes,
                kFraming + static_cast<int64_t>(victim.data.size()));
    }
  }
}

TEST(TFRecordSliceReader, HugeLengthWithValidCrcIsRejectedWithoutAllocating) {
  std::string header(8, '\0');
  header[7] = 0x10;  // 2^60, little endian
  const uint32_t masked = MaskCrc(Crc32c(header));
  for (int i = 0; i < 4; ++i) header += static_cast<char>(masked >> (8 * i));
  const std::string bytes = header + std::string(100, 'z') + EncodeTFRecord("ok");
  const TempFile temp;
  const std::string& path = temp.path();
  WriteBytes(path, bytes);

  testing_util::ResetLargestAllocation();
  { std::string big(size_t{3} << 20, 'x'); }
  ASSERT_GE(testing_util::LargestAllocation(), size_t{3} << 20) << "tracking works";

  testing_util::ResetLargestAllocation();
  absl::StatusOr<std::vector<Rec>> got = ReadSlice(path, 0, -1);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("byte offset 0"));
  EXPECT_THAT(got.status().message(), HasSubstr("1152921504606846976"));
  EXPECT_LE(testing_util::LargestAllocation(), size_t{1} << 20);

  TFRecordReadOptions skip;
  skip.on_corrupt = TFRecordReadOptions::kSkip;
  TFRecordReadStats stats;
  testing_util::ResetLargestAllocation();
  got = ReadSlice(path, 0, -1, skip, &stats);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::vector<Rec>({{112, "ok"}}));
  EXPECT_EQ(stats.skipped_bytes, 112);
  EXPECT_LE(testing_util::LargestAllocation(), size_t{1} << 20);
}

TEST(TFRecordSliceReader, TruncatedHeaderIsDataLoss) {
  const TempFile temp;
  const std::string& path = temp.path();
  const std::string full = EncodeAll({"complete", "cut"});
  WriteBytes(path, full.substr(0, kFraming + 8 + 5));
  absl::StatusOr<std::vector<Rec>> got = ReadSlice(path, 0, -1);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(),
              HasSubstr(absl::StrCat("byte offset ", kFraming + 8)));
  EXPECT_THAT(got.status().message(), HasSubstr("truncated"));
}

TEST(TFRecordSliceReader, MissingFileIsNotFoundNamingThePath) {
  const TempFile base;
  const std::string path = base.path() + ".does_not_exist";
  auto reader = TFRecordSliceReader::Open(path, 0, -1, {});
  ASSERT_FALSE(reader.ok());
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(reader.status().message(), HasSubstr(path));
}

TEST(TFRecordSliceReader, BadByteRangeIsInvalidArgument) {
  const TempFile temp;
  const std::string& path = temp.path();
  WriteBytes(path, EncodeAll({"x"}));
  for (auto [start, end] : {std::pair<int64_t, int64_t>{-1, 10}, {5, 4},
                            {0, -2}}) {
    auto reader = TFRecordSliceReader::Open(path, start, end, {});
    ASSERT_FALSE(reader.ok()) << start << " " << end;
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(reader.status().message(), HasSubstr(path));
  }
}

}  // namespace
}  // namespace shardq
