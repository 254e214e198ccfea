// The per-item readers of each record format (shardq/item_reader.h): open
// one item, return its records until its range ends, claiming each record
// for splits. TextLineReader, TFRecordReader and TableReader are one loop
// over them (src/io/read_loop.h); the pipeline's reading stage uses them
// directly (src/pipeline/record_reader.cc). Items come parsed (WorkItem::
// spec, see SpecOf); files are opened once, through a FileSystem (null: the
// operating system's; tests inject faults through it).
#ifndef SHARDQ_IO_ITEM_READERS_H_
#define SHARDQ_IO_ITEM_READERS_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "shardq/item_reader.h"
#include "shardq/splittable_range.h"
#include "shardq/table_reader.h"
#include "shardq/text_line_reader.h"
#include "shardq/tfrecord_reader.h"
#include "shardq/work_item.h"
#include "src/io/file.h"
#include "src/io/tfrecord.h"

namespace shardq {

// Sets *key to "<item>:<offset>" given prefix "<item>:", reusing the key's
// capacity when the caller reuses the record. One allocation at most: room
// for any int64 is reserved up front. Written by hand (two copies into the
// string's buffer): it runs once per record, and assign + StrAppend cost
// readers about a third of their time on small records
// (bench/results/read_throughput.md).
inline void SetRecordKey(const std::string& prefix, int64_t offset,
                         std::string* key) {
  char digits[20];  // a sign and the 19 digits of the largest int64
  char* const end = digits + sizeof(digits);
  char* p = end;
  uint64_t v = offset < 0 ? 0 - static_cast<uint64_t>(offset)
                          : static_cast<uint64_t>(offset);
  // Two digits a step (one division by 100), from a table of "00".."99".
  static constexpr char kPairs[] =
      "0001020304050607080910111213141516171819"
      "2021222324252627282930313233343536373839"
      "4041424344454647484950515253545556575859"
      "6061626364656667686970717273747576777879"
      "8081828384858687888990919293949596979899";
  while (v >= 100) {
    const size_t pair = static_cast<size_t>(v % 100) * 2;
    v /= 100;
    *--p = kPairs[pair + 1];
    *--p = kPairs[pair];
  }
  if (v >= 10) {
    const size_t pair = static_cast<size_t>(v) * 2;
    *--p = kPairs[pair + 1];
    *--p = kPairs[pair];
  } else {
    *--p = static_cast<char>('0' + v);
  }
  if (offset < 0) *--p = '-';
  const size_t n = static_cast<size_t>(end - p);
  if (key->capacity() < prefix.size() + sizeof(digits)) {
    key->reserve(prefix.size() + sizeof(digits));
  }
  key->resize(prefix.size() + n);
  char* out = key->data();
  std::memcpy(out, prefix.data(), prefix.size());
  std::memcpy(out + prefix.size(), p, n);
}

// The version of its work an item was planned on (its etag parameter, set
// by the planner for s3:// objects), "" when it has none. Readers refuse a
// file whose version() differs (CheckPlannedVersion).
inline std::string PlannedVersion(const SliceSpec& spec) {
  auto it = spec.params.find("etag");
  return it == spec.params.end() ? std::string() : it->second;
}

// Tell the file system that a reader opens `item` soon
// (FileSystem::WillOpen of the range that reader's open asks for: the
// item's range for TFRecordItemReader::Open, from the byte before it for
// OpenTextItem). A ReadLoop's OpenAhead, and the pipeline's
// (InterleaveOptions::open_ahead). Nothing for local files.
void OpenTFRecordItemAhead(const WorkItem& item, FileSystem* file_system = nullptr);
void OpenTextItemAhead(const WorkItem& item, FileSystem* file_system = nullptr);

// Text lines of an item (see TextLineReader for keys and errors).
// resume_offset() is the byte offset of the next line.
absl::StatusOr<std::unique_ptr<ItemReader<Record>>> OpenTextItem(
    const WorkItem& item, FileSystem* file_system = nullptr,
    RecordKeys keys = RecordKeys::kFill);

// TFRecord records of an item (see TFRecordReader for the slice rules,
// compression and errors). Under kSkip with log_skips, the item's skipped
// regions are reported by one stderr line when it ends.
class TFRecordItemReader final : public ItemReader<Record> {
 public:
  static absl::StatusOr<std::unique_ptr<TFRecordItemReader>> Open(
      const WorkItem& item, const TFRecordReaderOptions& options,
      FileSystem* file_system = nullptr, RecordKeys keys = RecordKeys::kFill);
  ~TFRecordItemReader() override;

  absl::StatusOr<bool> Next(Record* record) override;
  // The byte offset after the last record returned; -1 before the first
  // and for a compressed file (offsets in its decompressed stream).
  int64_t resume_offset() const override { return consumed_; }

  // Skipped bytes and corrupt regions of the item so far (kSkip).
  const TFRecordReadStats& stats() const;
  ItemSkips skips() const override {
    return ItemSkips{stats().corrupt_regions, stats().skipped_bytes};
  }

 private:
  class Records;
  TFRecordItemReader(const WorkItem& item, bool log_skips, RecordKeys keys,
                     std::unique_ptr<Records> records);
  void EndItem();

  const WorkItem item_;
  const std::string key_prefix_;  // "<item>:"
  const bool log_skips_;
  const RecordKeys keys_;
  std::unique_ptr<Records> records_;
  int64_t consumed_ = -1;
  bool ended_ = false;
};

namespace table_internal {
class SqliteTable;
}  // namespace table_internal

// The SQLite tables a reader has open, with their rank indexes, by
// (database path, table name); the oldest is closed when more than
// max_open_tables would be open. Not thread-safe.
class TableCache {
 public:
  explicit TableCache(int64_t max_open_tables);
  ~TableCache();
  // The open table; opens it (closing the oldest first if needed) when it
  // is not. Must not be called while a reader of another table of this
  // cache is open. Errors as SqliteTable::Open.
  absl::StatusOr<table_internal::SqliteTable*> Get(const std::string& db_path,
                                                   const std::string& table);

 private:
  const int64_t max_open_tables_;
  std::map<std::pair<std::string, std::string>,
           std::unique_ptr<table_internal::SqliteTable>>
      tables_;
  std::vector<std::pair<std::string, std::string>> open_order_;
};

// Rows of a table item (see TableReader for keys and errors), read
// through a table of `tables`, which must outlive the reader.
// resume_offset() is the rank of the next row in the table.
absl::StatusOr<std::unique_ptr<ItemReader<Row>>> OpenTableItem(
    const WorkItem& item, TableCache* tables, int64_t batch_rows);

}  // namespace shardq

#endif  // SHARDQ_IO_ITEM_READERS_H_
