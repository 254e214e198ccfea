#include "src/io/text_slice_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/io/file.h"
#include "src/io/format_sniff.h"

namespace shardq {
namespace {

constexpr size_t kBufferBytes = 256 << 10;

// A TFRecord or compressed file read as text yields binary "lines": refuse
// it, judging from the file's first bytes (one read per open).
absl::Status RefuseNonText(int fd, const std::string& path) {
  absl::StatusOr<SniffedFormat> format = SniffOpenFile(fd, path);
  if (!format.ok()) return format.status();
  switch (*format) {
    case SniffedFormat::kTFRecord:
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path,
          "' looks like a TFRecord file (it starts with a valid TFRecord "
          "header), not text; use TFRecordReader"));
    case SniffedFormat::kGzip:
    case SniffedFormat::kZlib:
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path, "' is ", SniffedFormatName(*format),
          "-compressed, not text: compressed text is not supported; "
          "decompress it, or use TFRecordReader if it holds TFRecords"));
    case SniffedFormat::kEmpty:
    case SniffedFormat::kOther:
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TextSliceReader>> TextSliceReader::Open(
    const std::string& path, int64_t start, int64_t end) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoToStatus(errno, "open", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return ErrnoToStatus(error, "stat", path);
  }
  const int64_t size = static_cast<int64_t>(st.st_size);
  if (start < 0 || (end >= 0 && start > end)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "': bad byte range [", start, ", ", end, ")"));
  }
  if (absl::Status s = CheckRangeInFile(path, size, start, end); !s.ok()) {
    ::close(fd);
    return s;
  }
  if (absl::Status s = RefuseNonText(fd, path); !s.ok()) {
    ::close(fd);
    return s;
  }
  if (end < 0) end = size;
  std::unique_ptr<TextSliceReader> reader(new TextSliceReader(path, fd, size, end));
  reader->position_ = std::min(start, size);
  if (start > 0 && start < size) {
    // The line at `start` belongs here only if a line starts exactly there,
    // i.e. the byte before it ends a line. Otherwise it is the previous
    // slice's: skip to the first line that starts after `start`.
    absl::StatusOr<bool> ok = reader->Fill(start - 1);
    if (!ok.ok()) return ok.status();
    if (reader->buffer_[static_cast<size_t>(start - 1 - reader->buffer_offset_)] != '\n') {
      if (absl::Status s = reader->SkipPastNewline(); !s.ok()) return s;
    }
  }
  return reader;
}

TextSliceReader::TextSliceReader(std::string path, int fd, int64_t file_size,
                                 int64_t end)
    : path_(std::move(path)),
      fd_(fd),
      file_size_(file_size),
      end_(end),
      buffer_(kBufferBytes) {}

TextSliceReader::~TextSliceReader() { ::close(fd_); }

absl::StatusOr<bool> TextSliceReader::Fill(int64_t offset) {
  if (offset >= buffer_offset_ && offset < buffer_offset_ + buffer_size_) return true;
  if (offset >= file_size_) return false;
  buffer_offset_ = offset;
  buffer_size_ = 0;
  while (true) {
    const ssize_t n = ::pread(fd_, buffer_.data(), buffer_.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoToStatus(errno, absl::StrCat("read at byte ", offset, " of"), path_);
    if (n == 0) {
      // Shorter than when it was opened: the rest of the item is gone.
      return absl::DataLossError(absl::StrCat(
          "'", path_, "' ends at byte offset ", offset, " but had ", file_size_,
          " bytes when opened (truncated while being read?)"));
    }
    buffer_size_ = n;
    return true;
  }
}

absl::Status TextSliceReader::SkipPastNewline() {
  while (true) {
    absl::StatusOr<bool> more = Fill(position_);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
    const char* begin = buffer_.data() + (position_ - buffer_offset_);
    const char* limit = buffer_.data() + buffer_size_;
    const char* nl = static_cast<const char*>(std::memchr(begin, '\n', limit - begin));
    if (nl != nullptr) {
      position_ += (nl - begin) + 1;
      return absl::OkStatus();
    }
    position_ += limit - begin;
  }
}

absl::StatusOr<bool> TextSliceReader::Next(std::string* line, int64_t* offset) {
  if (position_ >= end_ || position_ >= file_size_) return false;
  *offset = position_;
  line->clear();
  bool newline = false;
  while (!newline) {
    absl::StatusOr<bool> more = Fill(position_);
    if (!more.ok()) return more.status();
    if (!*more) break;  // last line without a newline
    const char* begin = buffer_.data() + (position_ - buffer_offset_);
    const char* limit = buffer_.data() + buffer_size_;
    const char* nl = static_cast<const char*>(std::memchr(begin, '\n', limit - begin));
    const char* stop = nl != nullptr ? nl : limit;
    line->append(begin, stop);
    position_ += stop - begin;
    if (nl != nullptr) {
      newline = true;
      ++position_;
    }
  }
  if (newline && !line->empty() && line->back() == '\r') line->pop_back();
  return true;
}

}  // namespace shardq
