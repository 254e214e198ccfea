#include "src/io/format_sniff.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "src/io/crc32c.h"
#include "src/io/file.h"

namespace shardq {
namespace {

bool HasValidTFRecordHeader(absl::string_view head) {
  return head.size() >= kSniffBytes && TFRecordLengthCrcMatches(head.data());
}

bool IsZlibHeader(absl::string_view head) {
  if (head.size() < 2) return false;
  const unsigned cmf = static_cast<unsigned char>(head[0]);
  const unsigned flg = static_cast<unsigned char>(head[1]);
  return (cmf & 0x0f) == 8 && (cmf >> 4) <= 7 && (cmf * 256 + flg) % 31 == 0 &&
         (flg & 0x20) == 0;
}

// Strips a trailing "-NNNNN-of-NNNNN" (TFDS shard suffix); false if absent.
bool StripShardSuffix(absl::string_view* name) {
  absl::string_view s = *name;
  auto strip_digits = [&s]() {
    size_t n = 0;
    while (n < s.size() && absl::ascii_isdigit(s[s.size() - 1 - n])) ++n;
    s.remove_suffix(n);
    return n > 0;
  };
  if (!strip_digits() || !absl::ConsumeSuffix(&s, "-of-") || !strip_digits() ||
      !absl::ConsumeSuffix(&s, "-")) {
    return false;
  }
  *name = s;
  return true;
}

}  // namespace

absl::string_view SniffedFormatName(SniffedFormat format) {
  switch (format) {
    case SniffedFormat::kEmpty:
      return "empty";
    case SniffedFormat::kTFRecord:
      return "TFRecord";
    case SniffedFormat::kGzip:
      return "gzip";
    case SniffedFormat::kZlib:
      return "zlib";
    case SniffedFormat::kOther:
      return "other";
  }
  return "unknown";
}

SniffedFormat SniffBytes(absl::string_view head, absl::string_view path) {
  if (head.empty()) return SniffedFormat::kEmpty;
  if (HasValidTFRecordHeader(head)) return SniffedFormat::kTFRecord;
  if (head.size() >= 3 && head[0] == '\x1f' && head[1] == '\x8b' &&
      head[2] == '\x08') {
    return SniffedFormat::kGzip;
  }
  if ((absl::EndsWith(path, ".zz") || absl::EndsWith(path, ".zlib")) &&
      IsZlibHeader(head)) {
    return SniffedFormat::kZlib;
  }
  return SniffedFormat::kOther;
}

absl::StatusOr<SniffedFormat> SniffOpenFile(RandomAccessFile& file) {
  char head[kSniffBytes];
  absl::StatusOr<size_t> n = ReadUpTo(file, 0, sizeof(head), head);
  if (!n.ok()) return n.status();
  return SniffBytes(absl::string_view(head, *n), file.path());
}

absl::StatusOr<SniffedFormat> SniffFile(const std::string& path) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      FileSystem::Default()->Open(path);
  if (!file.ok()) return file.status();
  return SniffOpenFile(**file);
}

bool HasTFRecordName(absl::string_view path) {
  absl::string_view name = path;
  for (absl::string_view compressed : {".gz", ".zz", ".zlib"}) {
    if (absl::ConsumeSuffix(&name, compressed)) break;
  }
  StripShardSuffix(&name);
  return absl::EndsWith(name, ".tfrecord") || absl::EndsWith(name, ".tfrecords");
}

}  // namespace shardq
