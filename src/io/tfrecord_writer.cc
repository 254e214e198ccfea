// TFRecordWriter and EncodeTFRecord (src/io/tfrecord.h): the writing half
// of the TFRecord format; tfrecord.cc holds the readers.
#include "src/io/tfrecord.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/io/crc32c.h"
#include "src/io/little_endian.h"

namespace shardq {
namespace {

constexpr size_t kWriteBufferBytes = 256 << 10;

void AppendHeader(uint64_t length, std::string* out) {
  char bytes[8];
  EncodeLittleEndian64(length, bytes);
  out->append(bytes, sizeof(bytes));
  AppendLittleEndian32(MaskCrc(Crc32c(absl::string_view(bytes, sizeof(bytes)))),
                       out);
}

// "op 'path' at byte offset N: strerror", with the code that errno implies.
absl::Status IoError(int error, absl::string_view op, const std::string& path,
                     int64_t offset) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat(op, " '", path, "' at byte offset ", offset,
                                   ": ", std::strerror(error)));
}

absl::Status OpenError(int error, absl::string_view op,
                       const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat(op, " '", path, "': ", std::strerror(error)));
}

}  // namespace

std::string EncodeTFRecord(absl::string_view data) {
  std::string out;
  out.reserve(data.size() + kTFRecordFramingBytes);
  AppendHeader(data.size(), &out);
  out.append(data.data(), data.size());
  AppendLittleEndian32(MaskCrc(Crc32c(data)), &out);
  return out;
}

// ---------------------------------------------------------------------------
// TFRecordWriter

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Create(
    const std::string& path) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return OpenError(errno, "create", path);
  return std::unique_ptr<TFRecordWriter>(new TFRecordWriter(path, fd));
}

TFRecordWriter::TFRecordWriter(std::string path, int fd)
    : path_(std::move(path)), fd_(fd) {
  buffer_.reserve(kWriteBufferBytes + 4096);
}

TFRecordWriter::~TFRecordWriter() { Close().IgnoreError(); }

absl::Status TFRecordWriter::Write(absl::string_view record) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("write to '", path_, "' after Close()"));
  }
  if (!error_.ok()) return error_;
  AppendHeader(record.size(), &buffer_);
  if (record.size() >= kWriteBufferBytes) {
    // Large records skip the buffer rather than being copied into it.
    if (absl::Status s = Flush(); !s.ok()) return s;
    if (absl::Status s = WriteToFile(record.data(), record.size()); !s.ok()) {
      return s;
    }
  } else {
    buffer_.append(record.data(), record.size());
  }
  AppendLittleEndian32(MaskCrc(Crc32c(record)), &buffer_);
  if (buffer_.size() >= kWriteBufferBytes) return Flush();
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Flush() {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("flush of '", path_, "' after Close()"));
  }
  if (!error_.ok()) return error_;
  absl::Status status = WriteToFile(buffer_.data(), buffer_.size());
  buffer_.clear();
  return status;
}

absl::Status TFRecordWriter::Close() {
  if (fd_ < 0) return absl::OkStatus();
  absl::Status status = Flush();
  if (::close(fd_) != 0 && status.ok()) {
    status = IoError(errno, "close", path_, flushed_);
  }
  fd_ = -1;
  return status;
}

absl::Status TFRecordWriter::WriteToFile(const char* data, size_t n) {
  while (n > 0) {
    const ssize_t written = ::write(fd_, data, n);
    if (written < 0) {
      if (errno == EINTR) continue;
      error_ = IoError(errno, "write", path_, flushed_);
      return error_;
    }
    data += written;
    n -= static_cast<size_t>(written);
    flushed_ += written;
  }
  return absl::OkStatus();
}

}  // namespace shardq
