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
  if (head.size() < kSniffBytes) return false;
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) {
    stored |= uint32_t{static_cast<unsigned char>(head[8 + i])} << (8 * i);
  }
  return UnmaskCrc(stored) == Crc32c(head.substr(0, 8));
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

absl::StatusOr<SniffedFormat> SniffOpenFile(int fd, const std::string& path) {
  char head[kSniffBytes];
  size_t n = 0;
  while (n < sizeof(head)) {
    const ssize_t got =
        ::pread(fd, head + n, sizeof(head) - n, static_cast<off_t>(n));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoToStatus(errno, "read", path);
    if (got == 0) break;
    n += static_cast<size_t>(got);
  }
  return SniffBytes(absl::string_view(head, n), path);
}

absl::StatusOr<SniffedFormat> SniffFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open", path);
  absl::StatusOr<SniffedFormat> format = SniffOpenFile(fd, path);
  ::close(fd);
  return format;
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
