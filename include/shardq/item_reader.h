// Reading one work item: the per-item reader every record format provides
// (text lines, TFRecord records, table rows). The public readers
// (TextLineReader, TFRecordReader, TableReader) are a loop over it that
// takes items from an ItemSource, and the pipeline's reading stage
// (shardq/pipeline/dataset.h) uses it directly.
#ifndef SHARDQ_ITEM_READER_H_
#define SHARDQ_ITEM_READER_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace shardq {

// Whether the reader of an item of (key, value) Records fills each
// record's key ("<item>:<offset>"). Building it costs about a quarter of
// reading a 200-byte TFRecord record (bench/results/pipeline.md), so a
// consumer that uses only values (shardq.data's datasets hand Python the
// values) skips it; the keys are then empty.
enum class RecordKeys { kFill, kSkip };

// What a reader passed over on purpose (TFRecord's on_corrupt = skip):
// corrupt regions resynchronised past, and their bytes. Zero otherwise.
struct ItemSkips {
  int64_t corrupt_regions = 0;
  int64_t skipped_bytes = 0;
};

// Reads the records of one work item, in order, until its range ends. A
// reader of an item that can be split (WorkItem::range set) claims each
// record's start offset before returning it and stops where a split ended
// the item (shardq/splittable_range.h). Not thread-safe: one thread at a
// time.
template <typename R>
class ItemReader {
 public:
  virtual ~ItemReader() = default;

  // Reads the next record into *record (not null). Returns false after the
  // item's last record. Errors name the file (and the byte offset where the
  // format has one); after an error the reader is not called again.
  virtual absl::StatusOr<bool> Next(R* record) = 0;

  // Where the unread rest of the item starts, after the records returned so
  // far, in the item's units and absolute like the item's start/end (bytes
  // of a file, rows of a table): the offset ItemSource::NoteProgress takes.
  // -1 when it is not known (nothing returned yet, or a format that cannot
  // resume an item in the middle: a compressed file); no progress is then
  // reported.
  virtual int64_t resume_offset() const = 0;

  // What the reader skipped in the item so far (see ItemSkips).
  virtual ItemSkips skips() const { return {}; }
};

}  // namespace shardq

#endif  // SHARDQ_ITEM_READER_H_
