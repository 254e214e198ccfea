// What a file holds, judged from its first bytes (and, where the bytes
// cannot tell, its name). Used once per file or item open, never per
// record: it costs one read of kSniffBytes at offset 0.
//
// Readers use it to refuse a file of the wrong format (TextLineReader over
// a TFRecord or gzip file) instead of returning garbage, and `shardq
// count`/`cat` use it to pick the reader. Thread-safe.
#ifndef SHARDQ_IO_FORMAT_SNIFF_H_
#define SHARDQ_IO_FORMAT_SNIFF_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/io/file.h"

namespace shardq {

// Bytes of the start of a file that SniffBytes looks at.
inline constexpr size_t kSniffBytes = 12;

enum class SniffedFormat {
  kEmpty,     // no byte at all
  kTFRecord,  // a plain TFRecord header whose length checksum matches
  kGzip,      // 1f 8b 08: the GZIP magic and the deflate method
  kZlib,      // a valid ZLIB header, in a file named *.zz or *.zlib
  kOther,     // anything else (text, say)
};

// "empty", "TFRecord", "gzip", "zlib" or "other".
absl::string_view SniffedFormatName(SniffedFormat format);

// Judges `head`, the first min(kSniffBytes, size) bytes of the file at
// `path`, in this order:
//  - a valid TFRecord header (the masked CRC32C of its 8 length bytes
//    matches) is kTFRecord, whatever follows, so a plain TFRecord file
//    whose first length happens to begin 1f 8b is never taken for GZIP;
//    text passes this check with probability about 2^-32;
//  - 1f 8b 08 is kGzip;
//  - a valid ZLIB header (deflate, window <= 32 KiB, check bits right, no
//    preset dictionary) is kZlib only when `path` ends in .zz or .zlib:
//    ZLIB has no magic, and two bytes as common as "x " pass its check;
//  - no byte is kEmpty, anything else kOther.
SniffedFormat SniffBytes(absl::string_view head, absl::string_view path);

// Reads the head of `path` and sniffs it. NOT_FOUND / PERMISSION_DENIED
// name the path.
absl::StatusOr<SniffedFormat> SniffFile(const std::string& path);

// Same, reading the head of an open file (one read at offset 0).
absl::StatusOr<SniffedFormat> SniffOpenFile(RandomAccessFile& file);

// True for names that say "TFRecord": *.tfrecord, *.tfrecords, those
// followed by .gz, .zz or .zlib, and the sharded names TensorFlow Datasets
// writes, *.tfrecord-NNNNN-of-NNNNN (digits of any count, optionally
// followed by a compression suffix too).
bool HasTFRecordName(absl::string_view path);

}  // namespace shardq

#endif  // SHARDQ_IO_FORMAT_SNIFF_H_
