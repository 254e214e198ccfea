// TFRecord files, and byte-range slices of them.
//
// A TFRecord file is a sequence of records, each laid out as
//   uint64  length            little endian
//   uint32  MaskCrc(Crc32c(the 8 length bytes))   little endian
//   byte    data[length]
//   uint32  MaskCrc(Crc32c(data))                 little endian
// with nothing before, between or after the records. This is the format of
// tf.io.TFRecordWriter without compression.
//
// Slices. A record belongs to the byte range [start, end) in which its
// header (its first byte) starts, wherever its data ends. The reader of
// [0, end) walks the records from offset 0. A reader whose range starts
// mid-file has no index: it scans forward from `start`, byte by byte, for
// the first offset that holds a complete valid record (the length CRC
// matches, the record fits in the file, the data CRC matches), and walks on
// from there. The ranges [S*k/K, S*(k+1)/K) of a file of S bytes therefore
// yield every record of the file exactly once, in order.
//
// Guarantee and residual risk. A scan can land off the true record
// boundaries only if the tail of the record that straddles `start` contains,
// at an offset >= start, a complete valid record (a payload that embeds
// TFRecord bytes). Random bytes pass both 32-bit checks with probability
// about 2^-64 per offset, and a payload that embeds only part of a record
// (a header without its data, data without its CRC, ...) never passes. Even
// then the false boundary is almost always caught: walking on from it soon
// reaches a header that does not validate (where the embedded bytes end),
// which is reported as DATA_LOSS (kFail) or counted as corrupt (kSkip),
// never silently. It goes unnoticed only if the embedded records run on,
// valid, past the end of the slice and the record after them validates too.
// Files whose records embed whole TFRecord streams should be read as one
// slice per file.
//
// Cost. A scan checks the length CRC at each offset (after a cheap "does it
// fit in the file" test that rejects almost all random and text bytes) and
// streams the data CRC only for offsets that pass it. A file crafted to hold
// many valid-looking headers with long lengths can make a scan slow (CRC
// work up to the slice size times the file size), never make it allocate.
//
// Corruption. No corrupt record is passed over silently under kFail, even at
// a slice boundary: after its last record the reader also validates the
// record that follows its range (which the next slice's scan would skip over
// if it were damaged). Under kSkip, every corrupt region is counted by
// exactly one reader: the one whose walk runs into it.
#ifndef SHARDQ_IO_TFRECORD_H_
#define SHARDQ_IO_TFRECORD_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/io/crc32c.h"
#include "src/io/file.h"
#include "src/io/little_endian.h"

namespace shardq {

// Bytes of framing around each record's data.
inline constexpr int64_t kTFRecordHeaderBytes = 12;  // length + length CRC
inline constexpr int64_t kTFRecordFooterBytes = 4;   // data CRC
inline constexpr int64_t kTFRecordFramingBytes =
    kTFRecordHeaderBytes + kTFRecordFooterBytes;

// Returns `data` framed as one TFRecord (header, data, footer).
std::string EncodeTFRecord(absl::string_view data);

// Writes a TFRecord file. Not thread-safe: one writer per file, used by one
// thread at a time.
class TFRecordWriter {
 public:
  // Creates (or truncates) `path`. NOT_FOUND when its directory does not
  // exist, PERMISSION_DENIED when it may not be written; errors name the path.
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> Create(
      const std::string& path);

  // Closes the file if Close() was not called; an error is then lost, so
  // call Close() to learn whether everything reached the file.
  ~TFRecordWriter();

  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  // Appends one record (possibly empty). Data is buffered; it reaches the
  // file on Flush(), Close() or when the buffer fills. After a failed write
  // every later call returns the same error (the file's tail is unknown).
  // FAILED_PRECONDITION after Close().
  absl::Status Write(absl::string_view record);

  // Hands the buffered records to the operating system (no fsync).
  absl::Status Flush();

  // Flushes and closes the file. Later calls to Write/Flush fail with
  // FAILED_PRECONDITION; a second Close() returns OK.
  absl::Status Close();

  // Bytes written so far, buffered or not: the offset of the next record.
  int64_t size() const {
    return flushed_ + static_cast<int64_t>(buffer_.size());
  }

 private:
  TFRecordWriter(std::string path, int fd);
  absl::Status WriteToFile(const char* data, size_t n);

  const std::string path_;
  int fd_;                 // -1 once closed
  std::string buffer_;     // framed records not yet written to fd_
  int64_t flushed_ = 0;    // bytes handed to fd_
  absl::Status error_;     // first write error; sticky
};

// Options of TFRecordSliceReader. Defaults suit normal use.
struct TFRecordReadOptions {
  enum OnCorrupt {
    // Stop with DATA_LOSS naming the file and the byte offset of the first
    // corrupt record. Nothing is lost silently; the default.
    kFail,
    // Skip to the next valid record (found as a mid-file start finds one)
    // and count the skipped bytes in stats(). Loses the damaged records.
    kSkip,
  };
  OnCorrupt on_corrupt = kFail;

  // Bytes read from the file per system call. Records larger than this are
  // read straight into the caller's string. Memory use is about
  // buffer_bytes plus the largest record. Values below 64 are raised to 64.
  size_t buffer_bytes = 256 << 10;

  // Where files are opened; null: the operating system's
  // (FileSystem::Default()). Tests inject faults through it.
  FileSystem* file_system = nullptr;
};

// What a TFRecordSliceReader has read so far.
struct TFRecordReadStats {
  int64_t records = 0;          // records returned by Next()
  int64_t bytes = 0;            // data bytes of those records
  int64_t skipped_bytes = 0;    // kSkip: bytes of corrupt regions passed over
  int64_t corrupt_regions = 0;  // kSkip: runs of one or more bad records
};

namespace tfrecord_internal {
class ReadBuffer;

// How a record checked out, in a plain file (TFRecordSliceReader) or in a
// decompressed stream (CompressedTFRecordReader).
enum class RecordCheck {
  kValid,
  kEnd,  // no byte left: the clean end of a stream (compressed reader only)
  kTruncatedHeader,
  kBadLengthCrc,
  kLengthPastEnd,
  kBadDataCrc,
};

// What validating the record at `offset` found.
struct RecordProbe {
  RecordCheck check = RecordCheck::kValid;
  int64_t offset = 0;
  uint64_t length = 0;
  // Bytes of the file or stream from `offset` on, where the check needs it
  // (kTruncatedHeader, kLengthPastEnd).
  int64_t available = 0;
  uint32_t stored_crc = 0;  // unmasked
  uint32_t computed_crc = 0;
};

// The DATA_LOSS message of a corrupt record (probe.check not kValid or
// kEnd): "<source>: corrupt TFRecord at <offset_label> <offset>: <what is
// wrong>", where `source` names the file ("'path'"), `container` ("file",
// "stream") names what the record lies in, and `hint_at_start` is appended
// when the very first record's header is bad (most often: not a TFRecord
// file at all). One wording for the plain and the compressed reader.
std::string CorruptRecordMessage(const RecordProbe& probe,
                                 absl::string_view source,
                                 absl::string_view offset_label,
                                 absl::string_view container,
                                 absl::string_view hint_at_start);

// Decodes the record header `header` (kTFRecordHeaderBytes) into
// probe->length and its stored and computed CRCs; false, with probe->check
// set to kBadLengthCrc, when the length's checksum does not match.
// Inline: it runs once per record.
inline bool DecodeRecordHeader(absl::string_view header, RecordProbe* probe) {
  probe->length = DecodeLittleEndian64(header.data());
  probe->stored_crc = UnmaskCrc(DecodeLittleEndian32(header.data() + 8));
  probe->computed_crc = Crc32cOf8(header.data());
  if (probe->stored_crc == probe->computed_crc) return true;
  probe->check = RecordCheck::kBadLengthCrc;
  return false;
}

// The sticky error of a record reader's Next: runs `next` (returning
// absl::StatusOr<bool>) unless an earlier call failed, and keeps the first
// error in *error, so that every later call returns that same error.
template <typename NextFn>
absl::StatusOr<bool> StickyNext(absl::Status* error, NextFn next) {
  if (!error->ok()) return *error;
  absl::StatusOr<bool> more = next();
  if (!more.ok()) *error = more.status();
  return more;
}
}  // namespace tfrecord_internal

// Reads the records of one byte range of a TFRecord file (see the top of
// this file for the slice semantics). Memory is bounded: the file is read in
// buffer_bytes pieces, and a record's length is trusted only after its CRC
// matched and it fits in the bytes left in the file.
// Not thread-safe; any number of readers may read the same file at once.
class TFRecordSliceReader {
 public:
  // Opens `path` to read the records that start in [start, end). end == -1
  // means the end of the file (as for text slices). NOT_FOUND names a
  // missing file; INVALID_ARGUMENT a range with start < 0, end < -1 or
  // start > end; FAILED_PRECONDITION a range that ends past the end of the
  // file ("changed since the plan was made", see CheckRangeInFile in
  // src/io/file.h): a file that shrank since it was planned is refused, not
  // read short. Nothing is read before the first Next().
  static absl::StatusOr<std::unique_ptr<TFRecordSliceReader>> Open(
      const std::string& path, int64_t start, int64_t end,
      TFRecordReadOptions options = {});

  // As above, reading `file`, already open (its size is the size at open).
  static absl::StatusOr<std::unique_ptr<TFRecordSliceReader>> Open(
      std::unique_ptr<RandomAccessFile> file, int64_t start, int64_t end,
      TFRecordReadOptions options = {});

  ~TFRecordSliceReader();
  TFRecordSliceReader(const TFRecordSliceReader&) = delete;
  TFRecordSliceReader& operator=(const TFRecordSliceReader&) = delete;

  // Reads the next record of the slice into *record (not null) and, when
  // `offset` is not null, the byte offset of its header into *offset.
  // Returns false at the end of the slice. DATA_LOSS (kFail) names the file,
  // the byte offset of the bad record and what is wrong with it; this may be
  // the first record after the slice, which the last call checks (see
  // "Corruption" above). I/O errors name the file. After an error every
  // later call returns the same error.
  // When it returns false or an error, *record's contents are unspecified.
  absl::StatusOr<bool> Next(std::string* record, int64_t* offset);

  const TFRecordReadStats& stats() const { return stats_; }

 private:
  using Check = tfrecord_internal::RecordCheck;
  using Probe = tfrecord_internal::RecordProbe;
  enum class State { kUnpositioned, kWalking, kDone };

  TFRecordSliceReader(std::unique_ptr<RandomAccessFile> file, int64_t start,
                      int64_t end, TFRecordReadOptions options);

  // Validates the record at `offset`; reads its data into *data, or only
  // checksums it when data is null. Errors are I/O errors only.
  absl::StatusOr<Probe> ProbeAt(int64_t offset, std::string* data);
  // First offset in [from, limit) holding a complete valid record; -1 if
  // there is none.
  absl::StatusOr<int64_t> Scan(int64_t from, int64_t limit);
  // Handles the bad record at position_: DATA_LOSS under kFail; under kSkip
  // moves position_ to the next valid record and counts the region.
  absl::Status HandleCorrupt(const Probe& probe, bool after_slice);
  // Runs at the end of the slice: validates the record after it.
  absl::Status CheckRecordAfterSlice();
  absl::StatusOr<bool> NextImpl(std::string* record, int64_t* offset);

  const std::unique_ptr<RandomAccessFile> file_;
  const std::string path_;
  const int64_t file_size_;
  const int64_t start_;
  const int64_t end_;
  const TFRecordReadOptions options_;
  std::unique_ptr<tfrecord_internal::ReadBuffer> buffer_;
  State state_ = State::kUnpositioned;
  int64_t position_ = 0;  // offset of the next record header
  // True when position_ was found by Scan, so it already passed every check.
  bool position_validated_ = false;
  TFRecordReadStats stats_;
  absl::Status error_;  // sticky
};

}  // namespace shardq

#endif  // SHARDQ_IO_TFRECORD_H_
