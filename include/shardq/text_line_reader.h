// Reads text lines from the items of an ItemSource (a WorkQueue, an input
// producer, a list). Each item is a file or a byte range of one
// ("path?start=S&end=E"); a line belongs to the item in which its first byte
// lies, so the items of a plan yield every line exactly once.
#ifndef SHARDQ_TEXT_LINE_READER_H_
#define SHARDQ_TEXT_LINE_READER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shardq/item_source.h"

namespace shardq {

template <typename R>
class ReadLoop;

// One record: key "<item>:<byte offset of the line>", value the line
// without its "\n" or "\r\n".
struct Record {
  std::string key;
  std::string value;
};

// Not thread-safe: one reader per consuming thread.
class TextLineReader {
 public:
  TextLineReader();
  ~TextLineReader();
  TextLineReader(const TextLineReader&) = delete;
  TextLineReader& operator=(const TextLineReader&) = delete;

  // Returns up to `n` (>= 1) records, taking new items from `source` as the
  // current one runs out. Calls source.ItemDone(item) once every line of an
  // item has been returned. Fewer than n records only at end of input;
  // OUT_OF_RANGE when the source is exhausted and nothing was read. Errors
  // name the file: NOT_FOUND for a missing file; INVALID_ARGUMENT for a
  // file that is not text (it starts with a valid TFRecord header: "looks
  // like a TFRecord file; use TFRecordReader", or it is GZIP/ZLIB
  // compressed), judged once per item from the file's first 12 bytes;
  // FAILED_PRECONDITION for an item whose range ends past the end of the
  // file ("changed since the plan was made: size S, item ends at E");
  // DATA_LOSS for a file cut shorter while it is read. A failing item stays
  // held, not done.
  absl::StatusOr<std::vector<Record>> ReadUpTo(ItemSource& source, int64_t n);

  // The same, into a vector the caller owns: on OK, *records holds the
  // records read (1 to n); on an error or OUT_OF_RANGE it is empty. The
  // Records already in *records are overwritten in place, keeping their
  // strings' capacity, so a caller that passes the same vector back each
  // time (and does not move its strings out) allocates nothing per record
  // once the strings have grown to the lines' sizes. Same records, errors
  // and item accounting as the call above.
  absl::Status ReadUpTo(ItemSource& source, int64_t n,
                        std::vector<Record>* records);

  int64_t records_read() const;
  int64_t items_done() const;

 private:
  std::unique_ptr<ReadLoop<Record>> loop_;
};

}  // namespace shardq

#endif  // SHARDQ_TEXT_LINE_READER_H_
