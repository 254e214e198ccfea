// GZIP/ZLIB compressed TFRecord files (as tf.io.TFRecordWriter writes with
// compression_type "GZIP" or "ZLIB"): the decompressed stream is a plain
// TFRecord stream. Such files cannot be cut, so they are read whole; a
// record's offset is its offset in the decompressed stream.
#ifndef SHARDQ_IO_COMPRESSED_TFRECORD_H_
#define SHARDQ_IO_COMPRESSED_TFRECORD_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/io/compression.h"
#include "src/io/tfrecord.h"

namespace shardq {

// Reads every record of a compressed TFRecord file, in order. Memory is
// bounded by options.buffer_bytes plus the largest record: a record's data
// is appended as it is decompressed, never allocated from its length field,
// so a corrupt length cannot allocate more than the stream holds.
//
// Corruption inside the decompressed stream (a bad length or data checksum,
// a record cut off by the end of the stream) is handled as in
// TFRecordSliceReader: DATA_LOSS naming the file and the decompressed byte
// offset under kFail; under kSkip a scan for the next valid record, counted
// in stats(). Corrupt compressed data (deflate errors, a truncated file) is
// DATA_LOSS under both policies: nothing after it can be decompressed.
// Not thread-safe.
class CompressedTFRecordReader {
 public:
  // compression must be kGzip or kZlib. NOT_FOUND names a missing file.
  static absl::StatusOr<std::unique_ptr<CompressedTFRecordReader>> Open(
      const std::string& path, FileCompression compression,
      TFRecordReadOptions options = {});
  // As above, reading `file`, already open.
  static absl::StatusOr<std::unique_ptr<CompressedTFRecordReader>> Open(
      std::unique_ptr<RandomAccessFile> file, FileCompression compression,
      TFRecordReadOptions options = {});

  // As TFRecordSliceReader::Next: false after the last record; *offset is
  // the record's offset in the decompressed stream. After an error every
  // later call returns the same error.
  absl::StatusOr<bool> Next(std::string* record, int64_t* offset);

  const TFRecordReadStats& stats() const { return stats_; }
  // Restarts of decompression (each a rescan from the start of the file),
  // caused by kSkip resynchronisation after a long false candidate.
  int64_t restarts() const { return stream_->restarts(); }

 private:
  using Check = tfrecord_internal::RecordCheck;
  using Probe = tfrecord_internal::RecordProbe;

  CompressedTFRecordReader(std::unique_ptr<InflateStream> stream,
                           TFRecordReadOptions options);
  // Validates the record at `offset`, reading its data into *data unless
  // data is null. Errors are decompression and I/O errors only.
  absl::StatusOr<Probe> ProbeAt(int64_t offset, std::string* data);
  // Offset of the first complete valid record at or after `from`, or the
  // end of the stream if there is none.
  absl::StatusOr<int64_t> Scan(int64_t from);
  absl::Status HandleCorrupt(const Probe& probe);
  absl::StatusOr<bool> NextImpl(std::string* record, int64_t* offset);

  std::unique_ptr<InflateStream> stream_;
  const TFRecordReadOptions options_;
  int64_t position_ = 0;
  bool done_ = false;
  TFRecordReadStats stats_;
  absl::Status error_;  // sticky
};

// Writes TFRecord files compressed with GZIP or ZLIB, readable by
// tf.data.TFRecordDataset(..., compression_type="GZIP"/"ZLIB") and by
// CompressedTFRecordReader. Not thread-safe.
class CompressedTFRecordWriter {
 public:
  static absl::StatusOr<std::unique_ptr<CompressedTFRecordWriter>> Create(
      const std::string& path, FileCompression compression);
  absl::Status Write(absl::string_view record);
  // Must be called to end the stream; errors name the file.
  absl::Status Close();

 private:
  explicit CompressedTFRecordWriter(std::unique_ptr<CompressedFileWriter> file)
      : file_(std::move(file)) {}
  std::unique_ptr<CompressedFileWriter> file_;
};

}  // namespace shardq

#endif  // SHARDQ_IO_COMPRESSED_TFRECORD_H_
