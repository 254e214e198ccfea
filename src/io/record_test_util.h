// Helpers shared by the record-format tests: temporary files, random
// payloads, TFRecord streams. Test-only.
#ifndef SHARDQ_IO_RECORD_TEST_UTIL_H_
#define SHARDQ_IO_RECORD_TEST_UTIL_H_

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/item_source.h"
#include "shardq/slice.h"
#include "shardq/splittable_range.h"
#include "src/io/crc32c.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace testing_util {

// A path unique to the running test (and process), ending in `suffix`; the
// file is removed when the object goes out of scope.
class TempPath {
 public:
  explicit TempPath(const std::string& suffix) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string dir = ::testing::TempDir();
    if (dir.empty() || dir.back() != '/') dir += '/';
    path_ = absl::StrCat(dir, "shardq_", info->test_suite_name(), "_",
                         info->name(), "_", ::getpid(), "_", counter_++,
                         suffix);
    // Parameterized tests have '/' in their names.
    for (size_t i = dir.size(); i < path_.size(); ++i) {
      if (path_[i] == '/') path_[i] = '_';
    }
  }
  ~TempPath() { ::unlink(path_.c_str()); }
  TempPath(const TempPath&) = delete;
  TempPath& operator=(const TempPath&) = delete;
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::string RandomBytes(std::mt19937_64& rng, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(&s[i], &r, std::min<size_t>(8, n - i));
  }
  return s;
}

// Mostly small, sometimes up to 1 MiB; random bytes, text or zeros.
inline std::string RandomPayload(std::mt19937_64& rng) {
  const int size_class = static_cast<int>(rng() % 100);
  size_t n;
  if (size_class < 75) {
    n = rng() % 65;
  } else if (size_class < 97) {
    n = rng() % 4097;
  } else if (size_class < 99) {
    n = rng() % 65537;
  } else {
    n = rng() % ((1 << 20) + 1);
  }
  switch (rng() % 3) {
    case 0:
      return RandomBytes(rng, n);
    case 1: {
      std::string text;
      while (text.size() < n) absl::StrAppend(&text, "line ", rng() % 1000, "\n");
      text.resize(n);
      return text;
    }
    default:
      return std::string(n, '\0');
  }
}

inline std::string EncodeAll(const std::vector<std::string>& records) {
  std::string bytes;
  for (const std::string& data : records) bytes += EncodeTFRecord(data);
  return bytes;
}

// Offsets of the records of EncodeAll(records).
inline std::vector<int64_t> RecordOffsets(
    const std::vector<std::string>& records) {
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (const std::string& data : records) {
    offsets.push_back(offset);
    offset += kTFRecordHeaderBytes + kTFRecordFooterBytes +
              static_cast<int64_t>(data.size());
  }
  return offsets;
}

// A TFRecord header claiming `length` bytes, with a valid length checksum.
inline std::string HeaderClaiming(uint64_t length) {
  std::string header(8, '\0');
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(length >> (8 * i));
  const uint32_t masked = MaskCrc(Crc32c(header));
  for (int i = 0; i < 4; ++i) header += static_cast<char>(masked >> (8 * i));
  return header;
}

// The lines of `text` by their start offset, as TextLineReader returns them.
inline std::vector<std::pair<int64_t, std::string>> LinesOf(const std::string& text) {
  std::vector<std::pair<int64_t, std::string>> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t newline = text.find('\n', pos);
    const size_t stop = newline == std::string::npos ? text.size() : newline;
    std::string line = text.substr(pos, stop - pos);
    if (newline != std::string::npos && !line.empty() && line.back() == '\r') {
      line.pop_back();
    }
    lines.emplace_back(static_cast<int64_t>(pos), std::move(line));
    if (newline == std::string::npos) break;
    pos = newline + 1;
  }
  return lines;
}

// Hands out `item` once, then OUT_OF_RANGE, and counts ItemDone calls in
// `done`. With `splittable`, the item carries a SplittableRange over its
// parsed range (range()), for tests that split it as the coordinator would.
class OneItemSource final : public ItemSource {
 public:
  explicit OneItemSource(std::string item, bool splittable = false) : item_(std::move(item)) {
    if (!splittable) return;
    absl::StatusOr<SliceSpec> spec = ParseItem(item_);
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (spec.ok()) {
      range_ = std::make_shared<SplittableRange>(spec->start.value_or(0), spec->end.value_or(0));
    }
  }
  absl::StatusOr<WorkItem> NextItem() override {
    if (given_) return absl::OutOfRangeError("no more items");
    given_ = true;
    return WorkItem{item_, 0, 0, 1, range_, std::nullopt};
  }
  absl::Status ItemDone(const WorkItem&) override {
    ++done;
    return absl::OkStatus();
  }
  SplittableRange& range() { return *range_; }

  int done = 0;

 private:
  std::string item_;
  std::shared_ptr<SplittableRange> range_;
  bool given_ = false;
};

// Keys of the public readers are "<item>:<offset or rowid>".
inline bool SplitKey(const std::string& key, std::string* item, int64_t* number) {
  const size_t colon = key.rfind(':');
  if (colon == std::string::npos) return false;
  *item = key.substr(0, colon);
  return absl::SimpleAtoi(key.substr(colon + 1), number);
}

// Runs `sql` on `db`, failing the test with SQLite's message on an error.
inline void ExecSql(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << sql << ": " << (error != nullptr ? error : "");
  sqlite3_free(error);
}

}  // namespace testing_util
}  // namespace shardq

#endif  // SHARDQ_IO_RECORD_TEST_UTIL_H_
