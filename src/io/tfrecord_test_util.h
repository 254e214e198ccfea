// Test-only helpers of the TFRecord slice reader tests (tfrecord_test.cc,
// tfrecord_corrupt_test.cc): a record with its offset, a temporary
// .tfrecord path, and reads of one slice or of a file cut into K slices.
#ifndef SHARDQ_IO_TFRECORD_TEST_UTIL_H_
#define SHARDQ_IO_TFRECORD_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "src/io/record_test_util.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace tfrecord_testing {


inline constexpr int64_t kFraming = kTFRecordHeaderBytes + kTFRecordFooterBytes;

struct Rec {
  int64_t offset;
  std::string data;
  bool operator==(const Rec& other) const {
    return offset == other.offset && data == other.data;
  }
};

inline std::ostream& operator<<(std::ostream& os, const Rec& rec) {
  return os << "{offset " << rec.offset << ", " << rec.data.size()
            << " bytes}";
}

// A .tfrecord path removed when the test ends.
class TempFile : public testing_util::TempPath {
 public:
  TempFile() : TempPath(".tfrecord") {}
};

inline std::vector<Rec> WithOffsets(const std::vector<std::string>& records) {
  std::vector<Rec> out;
  int64_t offset = 0;
  for (const std::string& data : records) {
    out.push_back({offset, data});
    offset += kFraming + static_cast<int64_t>(data.size());
  }
  return out;
}

inline absl::StatusOr<std::vector<Rec>> ReadSlice(
    const std::string& path, int64_t start, int64_t end,
    TFRecordReadOptions options = {}, TFRecordReadStats* stats = nullptr) {
  absl::StatusOr<std::unique_ptr<TFRecordSliceReader>> reader =
      TFRecordSliceReader::Open(path, start, end, options);
  if (!reader.ok()) return reader.status();
  std::vector<Rec> out;
  while (true) {
    Rec rec;
    absl::StatusOr<bool> more = (*reader)->Next(&rec.data, &rec.offset);
    if (!more.ok()) return more.status();
    if (!*more) break;
    out.push_back(std::move(rec));
  }
  if (stats != nullptr) {
    stats->records += (*reader)->stats().records;
    stats->bytes += (*reader)->stats().bytes;
    stats->skipped_bytes += (*reader)->stats().skipped_bytes;
    stats->corrupt_regions += (*reader)->stats().corrupt_regions;
  }
  return out;
}

// Reads the K slices [S*k/K, S*(k+1)/K) of a file of S bytes, in order.
inline absl::StatusOr<std::vector<Rec>> ReadAllSlices(
    const std::string& path, int64_t size, int64_t k_slices,
    TFRecordReadOptions options = {}, TFRecordReadStats* stats = nullptr) {
  std::vector<Rec> out;
  for (int64_t k = 0; k < k_slices; ++k) {
    absl::StatusOr<std::vector<Rec>> slice =
        ReadSlice(path, size * k / k_slices, size * (k + 1) / k_slices,
                  options, stats);
    if (!slice.ok()) return slice.status();
    out.insert(out.end(), slice->begin(), slice->end());
  }
  return out;
}

}  // namespace tfrecord_testing
}  // namespace shardq

#endif  // SHARDQ_IO_TFRECORD_TEST_UTIL_H_
