// Reads the lines of one byte range of a text file. A line belongs to the
// range in which its first byte lies, so the ranges of a plan together
// yield every line of the file exactly once. Lines end at '\n'; a '\r'
// before it is dropped; the last line may lack a newline; lines may be
// longer than any buffer. Not thread-safe.
#ifndef SHARDQ_IO_TEXT_SLICE_READER_H_
#define SHARDQ_IO_TEXT_SLICE_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/io/file.h"

namespace shardq {

class TextSliceReader {
 public:
  // Opens `path` to read the lines starting in [start, end); end < 0 means
  // the end of the file. NOT_FOUND names a missing file. Refuses, naming
  // the file: a range that ends (or, with end < 0, starts) past the end of
  // the file with FAILED_PRECONDITION (it changed since the plan was made,
  // see CheckRangeInFile in src/io/file.h); a file that starts like a
  // TFRecord file or a GZIP/ZLIB stream with INVALID_ARGUMENT (see
  // format_sniff.h; one 12-byte read per open). A file cut shorter while it
  // is read is DATA_LOSS from Next().
  // Files are opened through `file_system` (null: the operating system's).
  static absl::StatusOr<std::unique_ptr<TextSliceReader>> Open(
      const std::string& path, int64_t start, int64_t end,
      FileSystem* file_system = nullptr);
  // As above, reading `file`, already open.
  static absl::StatusOr<std::unique_ptr<TextSliceReader>> Open(
      std::unique_ptr<RandomAccessFile> file, int64_t start, int64_t end);
  ~TextSliceReader();

  // Reads the next line into *line and its starting byte offset into
  // *offset. Returns false at the end of the range.
  absl::StatusOr<bool> Next(std::string* line, int64_t* offset);

  // Byte offset of the next line (the consumed position).
  int64_t position() const { return position_; }

 private:
  TextSliceReader(std::unique_ptr<RandomAccessFile> file, int64_t end);
  // Makes buffer hold the byte at `offset`; false at end of file.
  absl::StatusOr<bool> Fill(int64_t offset);
  // Advances position_ past the next '\n' (or to the end of the file).
  absl::Status SkipPastNewline();
  // Next() of a mapped file: each line found and copied straight out of
  // the mapping (src/io/mapped_read.h).
  absl::StatusOr<bool> NextMapped(std::string* line, int64_t* offset);
  // A mapped file cut shorter since it was opened reads as zeros up to the
  // end of its last page, with no SIGBUS to tell: a mapped read that runs
  // to the end of the file checks with a pread that its last byte is still
  // there (DATA_LOSS "... (truncated while being read?)" if not).
  absl::Status CheckLastByte();

  const std::unique_ptr<RandomAccessFile> file_;
  const int64_t file_size_;
  const int64_t end_;
  int64_t position_ = 0;
  const char* const map_;  // the file's mapping, or null: read with pread
  AlignedReadBuffer storage_;
  const char* buffer_;         // the current window of storage_
  int64_t buffer_offset_ = 0;  // file offset of buffer_[0]
  int64_t buffer_size_ = 0;    // valid bytes in buffer_
};

}  // namespace shardq

#endif  // SHARDQ_IO_TEXT_SLICE_READER_H_
