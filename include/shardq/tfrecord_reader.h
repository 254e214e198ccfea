// Reads TFRecord records from the items of an ItemSource (a WorkQueue, an
// input producer, a list), as TextLineReader reads lines.
//
// Each item is a TFRecord file or a byte range of one
// ("path?start=S&end=E"). A record belongs to the range in which its header
// starts; a reader starting mid-file finds the next record boundary by
// validating candidate headers (length checksum, then data checksum), so the
// items of a plan yield every record of a file exactly once, in order, with
// no index file.
//
// GZIP and ZLIB compressed files (tf.io.TFRecordWriter with
// compression_type "GZIP" / "ZLIB") are read too. They cannot be cut: the
// planner gives each one whole item (the path with no range), and a reader
// reads the whole file for an item with no range, a range [0, E) with E
// the file's size in bytes, or [0, 1) (the item older planners gave a
// compressed file). A compressed record's offset is its offset in the
// decompressed stream, so its records are never claimed from the item's
// range: a compressed item is never split (tail rebalancing) and always
// read to its end. Any other range of a compressed file is
// INVALID_ARGUMENT naming the file.
//
// A file that changed since the plan was made: an item whose range ends
// past the file's current end is refused with FAILED_PRECONDITION ("FILE
// changed since the plan was made: size S, item ends at E"), and a record
// that runs past the end of the file inside the item is DATA_LOSS naming
// the file and the record's offset. A file that grew is not detected (the
// item does not carry the size its plan saw): records appended after the
// plan are not read by a ranged item.
#ifndef SHARDQ_TFRECORD_READER_H_
#define SHARDQ_TFRECORD_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shardq/item_source.h"
#include "shardq/text_line_reader.h"  // Record

namespace shardq {

struct TFRecordReaderOptions {
  enum class OnCorrupt {
    // DATA_LOSS naming the file and byte offset of the first corrupt record
    // (bad length or data checksum, truncated record, a length running past
    // the end of the file). Nothing is lost silently. The default.
    kFail,
    // Resynchronise at the next valid record. The skipped bytes and regions
    // are counted in stats(), and each item with skips is reported by one
    // line on stderr (see log_skips). Loses the damaged records.
    kSkip,
  };
  OnCorrupt on_corrupt = OnCorrupt::kFail;

  enum class Compression {
    // GZIP by its magic bytes, ZLIB by a ".zz"/".zlib" name and a valid
    // header (ZLIB has no magic); anything else is plain TFRecord.
    kAuto,
    kNone,
    kGzip,
    kZlib,
  };
  Compression compression = Compression::kAuto;

  // Bytes read (or decompressed) per step. Memory is about this plus the
  // largest record. Values below 64 are raised to 64.
  size_t buffer_bytes = 256 << 10;

  // Under kSkip, write one line to stderr for each item in which corrupt
  // regions were skipped (how many, how many bytes, which item).
  bool log_skips = true;
};

// Totals over every item a TFRecordReader has read.
struct TFRecordReaderStats {
  int64_t records = 0;          // records returned
  int64_t bytes = 0;            // data bytes of those records
  int64_t skipped_bytes = 0;    // kSkip: bytes of corrupt regions passed over
  int64_t corrupt_regions = 0;  // kSkip: runs of one or more bad records
  int64_t items_done = 0;       // items whose every record was returned
};

template <typename R>
class ReadLoop;

// Not thread-safe: one reader per consuming thread.
class TFRecordReader {
 public:
  explicit TFRecordReader(TFRecordReaderOptions options = {});
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // Returns up to `n` (>= 1) records, keyed "<item>:<byte offset of the
  // record>", taking new items from `source` as the current one runs out.
  // Calls source.ItemDone(item) only once every record of the item has been
  // returned (a crash before that re-reads the item). Fewer than n records
  // only at end of input; OUT_OF_RANGE when the source is exhausted and
  // nothing was read. On an error, the records read before it are returned
  // first and the error by the next call; the failing item stays held (not
  // done). Errors name the file: NOT_FOUND (missing at read time), DATA_LOSS
  // (corrupt record or compressed data, with the byte offset),
  // INVALID_ARGUMENT (bad item string, a cut compressed file),
  // FAILED_PRECONDITION (the file is shorter than the item's range).
  absl::StatusOr<std::vector<Record>> ReadUpTo(ItemSource& source, int64_t n);

  // The same, into a vector the caller owns (as TF's ReaderBase::ReadUpTo
  // fills the caller's tensors): on OK, *records holds the records read (1
  // to n); on an error or OUT_OF_RANGE it is empty. The Records already in
  // *records are overwritten in place, keeping their strings' capacity, so
  // a caller that passes the same vector back each time (and does not move
  // its strings out) allocates nothing per record once the strings have
  // grown to the records' sizes. Same records, errors and item accounting
  // as the call above.
  absl::Status ReadUpTo(ItemSource& source, int64_t n,
                        std::vector<Record>* records);

  const TFRecordReaderStats& stats() const { return stats_; }

 private:
  const TFRecordReaderOptions options_;
  std::unique_ptr<ReadLoop<Record>> loop_;
  // Counts the records of a call and refreshes stats_.
  void UpdateStats(const std::vector<Record>* records);

  TFRecordReaderStats stats_;
  TFRecordReaderStats finished_;  // skips in the items already done
};

}  // namespace shardq

#endif  // SHARDQ_TFRECORD_READER_H_
