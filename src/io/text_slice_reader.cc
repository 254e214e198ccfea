#include "src/io/text_slice_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/io/file.h"
#include "src/io/format_sniff.h"
#include "src/io/mapped_read.h"

namespace shardq {
namespace {

constexpr size_t kBufferBytes = 256 << 10;

// A TFRecord or compressed file read as text yields binary "lines": refuse
// it, judging from the file's first bytes (one read per open).
absl::Status RefuseNonText(RandomAccessFile& file) {
  const std::string& path = file.path();
  absl::StatusOr<SniffedFormat> format = SniffOpenFile(file);
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
    const std::string& path, int64_t start, int64_t end,
    FileSystem* file_system) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      OrDefault(file_system)->Open(path);
  if (!file.ok()) return file.status();
  return Open(*std::move(file), start, end);
}

absl::StatusOr<std::unique_ptr<TextSliceReader>> TextSliceReader::Open(
    std::unique_ptr<RandomAccessFile> file, int64_t start, int64_t end) {
  const std::string& path = file->path();
  const int64_t size = file->size();
  if (start < 0 || (end >= 0 && start > end)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "': bad byte range [", start, ", ", end, ")"));
  }
  if (absl::Status s = CheckRangeInFile(path, size, start, end); !s.ok()) {
    return s;
  }
  // The byte before `start` decides where the first line starts.
  file->WillRead(start > 0 ? start - 1 : 0, end);
  if (absl::Status s = RefuseNonText(*file); !s.ok()) return s;
  if (end < 0) end = size;
  std::unique_ptr<TextSliceReader> reader(
      new TextSliceReader(std::move(file), end));
  reader->position_ = std::min(start, size);
  if (start > 0 && start < size) {
    // The line at `start` belongs here only if a line starts exactly there,
    // i.e. the byte before it ends a line. Otherwise it is the previous
    // slice's: skip to the first line that starts after `start`.
    char before = '\n';
    if (reader->map_ != nullptr) {
      if (!GuardedCopy(reader->map_ + start - 1, 1, &before)) {
        return MappedReadFailure(*reader->file_, start - 1, 1);
      }
    } else {
      absl::StatusOr<bool> ok = reader->Fill(start - 1);
      if (!ok.ok()) return ok.status();
      before = reader->buffer_[static_cast<size_t>(start - 1 - reader->buffer_offset_)];
    }
    if (before != '\n') {
      if (absl::Status s = reader->SkipPastNewline(); !s.ok()) return s;
    }
  }
  return reader;
}

TextSliceReader::TextSliceReader(std::unique_ptr<RandomAccessFile> file,
                                 int64_t end)
    : file_(std::move(file)),
      file_size_(file_->size()),
      end_(end),
      map_(file_->Mapping()),
      storage_(kBufferBytes),
      buffer_(storage_.Window(0)) {}

TextSliceReader::~TextSliceReader() = default;

absl::StatusOr<bool> TextSliceReader::Fill(int64_t offset) {
  if (offset >= buffer_offset_ && offset < buffer_offset_ + buffer_size_) return true;
  if (offset >= file_size_) return false;
  buffer_offset_ = offset;
  buffer_size_ = 0;
  // A whole buffer, or the rest of the file as it was opened; a file cut
  // shorter meanwhile is DATA_LOSS (ReadFully), never a short item.
  const size_t want = static_cast<size_t>(
      std::min<int64_t>(static_cast<int64_t>(storage_.capacity()), file_size_ - offset));
  char* const window = storage_.Window(offset);
  buffer_ = window;
  if (absl::Status s = ReadFully(*file_, offset, want, window); !s.ok()) {
    return s;
  }
  buffer_size_ = static_cast<int64_t>(want);
  return true;
}

absl::Status TextSliceReader::SkipPastNewline() {
  if (map_ != nullptr && position_ < file_size_) {
    const size_t left = static_cast<size_t>(file_size_ - position_);
    const char* nl = nullptr;
    if (!GuardedFindNewline(map_ + position_, left, &nl)) {
      return MappedReadFailure(*file_, position_, left);
    }
    if (nl == nullptr) {
      // No line starts in the rest of the file: unless it was cut shorter
      // since it was opened (see NextMapped).
      if (absl::Status s = CheckLastByte(); !s.ok()) return s;
    }
    position_ = nl != nullptr ? nl - map_ + 1 : file_size_;
    return absl::OkStatus();
  }
  while (true) {
    absl::StatusOr<bool> more = Fill(position_);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
    const char* begin = buffer_ + (position_ - buffer_offset_);
    const char* limit = buffer_ + buffer_size_;
    const char* nl = static_cast<const char*>(std::memchr(begin, '\n', limit - begin));
    if (nl != nullptr) {
      position_ += (nl - begin) + 1;
      return absl::OkStatus();
    }
    position_ += limit - begin;
  }
}

absl::Status TextSliceReader::CheckLastByte() {
  char last;
  return ReadFully(*file_, file_size_ - 1, 1, &last);
}

absl::StatusOr<bool> TextSliceReader::NextMapped(std::string* line,
                                                 int64_t* offset) {
  const char* const begin = map_ + position_;
  const size_t left = static_cast<size_t>(file_size_ - position_);
  const char* nl = nullptr;
  if (!GuardedFindNewline(begin, left, &nl)) {
    return MappedReadFailure(*file_, position_, left);
  }
  const size_t n = nl != nullptr ? static_cast<size_t>(nl - begin) : left;
  if (nl == nullptr) {
    // The last line runs to the end of the file as opened.
    if (absl::Status s = CheckLastByte(); !s.ok()) return s;
  }
  // Appended into room reserved first: one write of each byte (no
  // zero-fill first), and no allocation inside the guard.
  line->clear();
  line->reserve(n);
  if (!RunMappedGuarded(begin, n, [&] { line->append(begin, n); })) {
    return MappedReadFailure(*file_, position_, n);
  }
  *offset = position_;
  position_ += static_cast<int64_t>(n) + (nl != nullptr ? 1 : 0);
  if (nl != nullptr && n > 0 && line->back() == '\r') line->pop_back();
  return true;
}

absl::StatusOr<bool> TextSliceReader::Next(std::string* line, int64_t* offset) {
  if (position_ >= end_ || position_ >= file_size_) return false;
  if (map_ != nullptr) return NextMapped(line, offset);
  *offset = position_;
  line->clear();
  bool newline = false;
  while (!newline) {
    absl::StatusOr<bool> more = Fill(position_);
    if (!more.ok()) return more.status();
    if (!*more) break;  // last line without a newline
    const char* begin = buffer_ + (position_ - buffer_offset_);
    const char* limit = buffer_ + buffer_size_;
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
