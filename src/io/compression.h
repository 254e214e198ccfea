// GZIP and ZLIB compressed files (zlib): detecting them, reading their
// decompressed bytes through a bounded window, and writing them.
//
// A compressed file cannot be entered anywhere but at its first byte, so it
// is never cut into byte ranges: the planner gives it one slice and readers
// read it whole (see tfrecord_reader.h).
#ifndef SHARDQ_IO_COMPRESSION_H_
#define SHARDQ_IO_COMPRESSION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/io/file.h"

namespace shardq {

enum class FileCompression { kNone, kGzip, kZlib };

// "none", "gzip" or "zlib".
absl::string_view CompressionName(FileCompression compression);

// How `path` is compressed, judged from its first 12 bytes (and, for ZLIB,
// its name):
//  - bytes that start a valid TFRecord (the length checksum matches) mean
//    kNone, whatever follows, so a plain TFRecord file whose first length
//    happens to begin 1f 8b is never taken for GZIP;
//  - otherwise 1f 8b 08 (the GZIP magic and deflate method) means kGzip;
//  - otherwise a valid ZLIB header (deflate, window <= 32 KiB, check bits
//    right, no preset dictionary) in a file named *.zz or *.zlib means
//    kZlib. ZLIB has no magic: two bytes as common as "x " pass its header
//    check, so without the suffix a ZLIB file must be named explicitly
//    (TFRecordReaderOptions::compression).
//  - anything else (text, an empty file) is kNone.
// NOT_FOUND / PERMISSION_DENIED name the path. Thread-safe.
absl::StatusOr<FileCompression> DetectCompression(const std::string& path);
// Same, for an open file (one read at offset 0).
absl::StatusOr<FileCompression> DetectCompression(RandomAccessFile& file);

// The decompressed bytes of a GZIP or ZLIB file, read through a window of
// `window_bytes`. Concatenated members (as `cat a.gz b.gz` makes) are read
// as one stream. Reading forward is streaming; an offset before the window
// restarts decompression from the start of the file (correct, but costs
// re-inflating everything before it; readers go backwards only rarely).
// Memory: window_bytes plus 64 KiB of compressed input plus zlib's state.
// Not thread-safe.
class InflateStream {
 public:
  // NOT_FOUND names a missing file. compression must not be kNone.
  static absl::StatusOr<std::unique_ptr<InflateStream>> Open(
      const std::string& path, FileCompression compression,
      size_t window_bytes);
  // As above, reading `file`, already open.
  static absl::StatusOr<std::unique_ptr<InflateStream>> Open(
      std::unique_ptr<RandomAccessFile> file, FileCompression compression,
      size_t window_bytes);
  ~InflateStream();
  InflateStream(const InflateStream&) = delete;
  InflateStream& operator=(const InflateStream&) = delete;

  // Returns the decompressed bytes [offset, offset + n), n <= window_bytes;
  // fewer only where the stream ends (empty at or past its end). The view
  // is valid until the next call. Corrupt or truncated compressed data is
  // DATA_LOSS naming the file, its compression and the compressed byte
  // offset; I/O errors name the file. After an error every later call
  // returns the same error.
  absl::StatusOr<absl::string_view> Peek(int64_t offset, size_t n);

  size_t window_bytes() const { return window_bytes_; }
  // How many times decompression restarted from the start of the file.
  int64_t restarts() const { return restarts_; }
  const std::string& path() const { return path_; }
  FileCompression compression() const { return compression_; }

 private:
  struct Zlib;
  InflateStream(std::unique_ptr<RandomAccessFile> file,
                FileCompression compression, size_t window_bytes);
  absl::Status Restart();
  // Reads the next piece of the file into input_.
  absl::Status FillInput();
  // Decompresses more bytes after the window's end, into the window.
  absl::Status InflateMore();
  absl::Status CorruptError(absl::string_view what) const;

  const std::unique_ptr<RandomAccessFile> file_;
  const std::string path_;
  const FileCompression compression_;
  const size_t window_bytes_;
  std::unique_ptr<Zlib> zlib_;
  AlignedReadBuffer input_;         // compressed bytes not yet inflated
  std::unique_ptr<char[]> window_;  // decompressed bytes [start_, start_ + size_)
  int64_t start_ = 0;
  size_t size_ = 0;
  int64_t input_offset_ = 0;  // file offset after the bytes read into input_
  bool input_eof_ = false;
  bool stream_end_ = false;  // the last member ended and no input remains
  int64_t restarts_ = 0;
  absl::Status error_;  // sticky
};

// Writes a GZIP or ZLIB file. Not thread-safe.
class CompressedFileWriter {
 public:
  // Creates (or truncates) `path`; errors name it. compression must not be
  // kNone.
  static absl::StatusOr<std::unique_ptr<CompressedFileWriter>> Create(
      const std::string& path, FileCompression compression);
  // Closes the file if Close() was not called (an error is then lost).
  ~CompressedFileWriter();
  CompressedFileWriter(const CompressedFileWriter&) = delete;
  CompressedFileWriter& operator=(const CompressedFileWriter&) = delete;

  // Compresses `bytes` onto the end of the stream. After an error every
  // later call returns it; FAILED_PRECONDITION after Close().
  absl::Status Append(absl::string_view bytes);
  // Ends the stream (trailer included) and closes the file. A second
  // Close() returns OK.
  absl::Status Close();

 private:
  struct Zlib;
  CompressedFileWriter(std::string path, int fd);
  absl::Status Deflate(absl::string_view bytes, bool finish);
  absl::Status WriteOut(const char* data, size_t n);

  const std::string path_;
  int fd_;  // -1 once closed
  std::unique_ptr<Zlib> zlib_;
  std::unique_ptr<char[]> output_;
  absl::Status error_;
};

}  // namespace shardq

#endif  // SHARDQ_IO_COMPRESSION_H_
