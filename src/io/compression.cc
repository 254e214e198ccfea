#include "src/io/compression.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/io/file.h"
#include "src/io/format_sniff.h"

namespace shardq {
namespace {

constexpr size_t kInputBytes = 64 << 10;
constexpr size_t kOutputBytes = 64 << 10;

int WindowBits(FileCompression compression) {
  // 16 + MAX_WBITS: a GZIP wrapper; MAX_WBITS: a ZLIB wrapper.
  return compression == FileCompression::kGzip ? 16 + MAX_WBITS : MAX_WBITS;
}

}  // namespace

absl::string_view CompressionName(FileCompression compression) {
  switch (compression) {
    case FileCompression::kNone:
      return "none";
    case FileCompression::kGzip:
      return "gzip";
    case FileCompression::kZlib:
      return "zlib";
  }
  return "unknown";
}

absl::StatusOr<FileCompression> DetectCompression(const std::string& path) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      FileSystem::Default()->Open(path);
  if (!file.ok()) return file.status();
  return DetectCompression(**file);
}

absl::StatusOr<FileCompression> DetectCompression(RandomAccessFile& file) {
  absl::StatusOr<SniffedFormat> format = SniffOpenFile(file);
  if (!format.ok()) return format.status();
  switch (*format) {
    case SniffedFormat::kGzip:
      return FileCompression::kGzip;
    case SniffedFormat::kZlib:
      return FileCompression::kZlib;
    default:
      return FileCompression::kNone;
  }
}

// ---------------------------------------------------------------------------
// InflateStream

struct InflateStream::Zlib {
  z_stream stream{};
  bool initialized = false;
  ~Zlib() {
    if (initialized) inflateEnd(&stream);
  }
};

absl::StatusOr<std::unique_ptr<InflateStream>> InflateStream::Open(
    const std::string& path, FileCompression compression,
    size_t window_bytes) {
  if (compression == FileCompression::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "': InflateStream needs gzip or zlib"));
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      FileSystem::Default()->Open(path);
  if (!file.ok()) return file.status();
  return Open(*std::move(file), compression, window_bytes);
}

absl::StatusOr<std::unique_ptr<InflateStream>> InflateStream::Open(
    std::unique_ptr<RandomAccessFile> file, FileCompression compression,
    size_t window_bytes) {
  const std::string path = file->path();
  if (compression == FileCompression::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "': InflateStream needs gzip or zlib"));
  }
  file->WillRead(0, -1);  // a stream is read whole, in order
  std::unique_ptr<InflateStream> stream(new InflateStream(
      std::move(file), compression, std::max<size_t>(window_bytes, 64)));
  if (inflateInit2(&stream->zlib_->stream, WindowBits(compression)) != Z_OK) {
    return absl::ResourceExhaustedError(
        absl::StrCat("'", path, "': cannot initialise zlib"));
  }
  stream->zlib_->initialized = true;
  return stream;
}

InflateStream::InflateStream(std::unique_ptr<RandomAccessFile> file,
                             FileCompression compression, size_t window_bytes)
    : file_(std::move(file)),
      path_(file_->path()),
      compression_(compression),
      window_bytes_(window_bytes),
      zlib_(std::make_unique<Zlib>()),
      input_(kInputBytes),
      window_(new char[window_bytes]) {}

InflateStream::~InflateStream() = default;

absl::Status InflateStream::CorruptError(absl::string_view what) const {
  const int64_t compressed_offset =
      input_offset_ - static_cast<int64_t>(zlib_->stream.avail_in);
  return absl::DataLossError(absl::StrCat(
      "'", path_, "': corrupt ", CompressionName(compression_),
      " data near compressed byte offset ", compressed_offset, ": ", what));
}

absl::Status InflateStream::Restart() {
  ++restarts_;
  if (inflateReset(&zlib_->stream) != Z_OK) {
    return absl::InternalError(absl::StrCat("'", path_, "': inflateReset failed"));
  }
  zlib_->stream.avail_in = 0;
  start_ = 0;
  size_ = 0;
  input_offset_ = 0;
  input_eof_ = false;
  stream_end_ = false;
  return absl::OkStatus();
}

absl::StatusOr<absl::string_view> InflateStream::Peek(int64_t offset,
                                                     size_t n) {
  if (!error_.ok()) return error_;
  n = std::min(n, window_bytes_);
  if (offset < start_) {
    if (absl::Status s = Restart(); !s.ok()) return error_ = s;
  }
  while (true) {
    const int64_t end = start_ + static_cast<int64_t>(size_);
    if (offset + static_cast<int64_t>(n) <= end || stream_end_) {
      if (offset >= end) return absl::string_view();
      const size_t from = static_cast<size_t>(offset - start_);
      return absl::string_view(window_.get() + from,
                               std::min(n, size_ - from));
    }
    // Keep only the bytes from `offset` on; they fit with room to spare.
    const size_t drop =
        static_cast<size_t>(std::min<int64_t>(offset - start_, size_));
    std::memmove(window_.get(), window_.get() + drop, size_ - drop);
    size_ -= drop;
    start_ += static_cast<int64_t>(drop);
    if (absl::Status s = InflateMore(); !s.ok()) return error_ = s;
  }
}

absl::Status InflateStream::FillInput() {
  z_stream& zs = zlib_->stream;
  char* const window = input_.Window(input_offset_);
  absl::StatusOr<size_t> got = file_->ReadSome(input_offset_, kInputBytes, window);
  if (!got.ok()) return got.status();
  if (*got == 0) input_eof_ = true;
  input_offset_ += static_cast<int64_t>(*got);
  zs.next_in = reinterpret_cast<Bytef*>(window);
  zs.avail_in = static_cast<uInt>(*got);
  return absl::OkStatus();
}

absl::Status InflateStream::InflateMore() {
  z_stream& zs = zlib_->stream;
  zs.next_out = reinterpret_cast<Bytef*>(window_.get() + size_);
  zs.avail_out = static_cast<uInt>(window_bytes_ - size_);
  const uInt room = zs.avail_out;
  while (zs.avail_out == room && !stream_end_) {
    if (zs.avail_in == 0 && !input_eof_) {
      if (absl::Status s = FillInput(); !s.ok()) return s;
    }
    if (zs.avail_in == 0 && input_eof_) {
      // An empty file holds no stream at all: no records.
      if (input_offset_ == 0) {
        stream_end_ = true;
        break;
      }
      return CorruptError(
          "the file ends inside the compressed stream (truncated file)");
    }
    const int ret = inflate(&zs, Z_NO_FLUSH);
    if (ret == Z_STREAM_END) {
      // The stream is complete at the end of the file; otherwise another
      // member follows (concatenated gzip files).
      if (zs.avail_in == 0 && !input_eof_) {
        if (absl::Status s = FillInput(); !s.ok()) return s;
      }
      if (zs.avail_in == 0 && input_eof_) {
        stream_end_ = true;
      } else if (inflateReset(&zs) != Z_OK) {
        return CorruptError("cannot restart zlib for the next member");
      }
      continue;
    }
    if (ret == Z_OK || ret == Z_BUF_ERROR) continue;
    if (ret == Z_NEED_DICT) {
      return CorruptError("the stream needs a preset dictionary");
    }
    if (ret == Z_MEM_ERROR) {
      return absl::ResourceExhaustedError(
          absl::StrCat("'", path_, "': zlib is out of memory"));
    }
    return CorruptError(zs.msg != nullptr ? zs.msg : "inflate failed");
  }
  size_ = window_bytes_ - zs.avail_out;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// CompressedFileWriter

struct CompressedFileWriter::Zlib {
  z_stream stream{};
  bool initialized = false;
  ~Zlib() {
    if (initialized) deflateEnd(&stream);
  }
};

absl::StatusOr<std::unique_ptr<CompressedFileWriter>>
CompressedFileWriter::Create(const std::string& path,
                             FileCompression compression) {
  if (compression == FileCompression::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "': CompressedFileWriter needs gzip or zlib"));
  }
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return ErrnoToStatus(errno, "create", path);
  std::unique_ptr<CompressedFileWriter> writer(
      new CompressedFileWriter(path, fd));
  if (deflateInit2(&writer->zlib_->stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED,
                   WindowBits(compression), 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::ResourceExhaustedError(
        absl::StrCat("'", path, "': cannot initialise zlib"));
  }
  writer->zlib_->initialized = true;
  return writer;
}

CompressedFileWriter::CompressedFileWriter(std::string path, int fd)
    : path_(std::move(path)),
      fd_(fd),
      zlib_(std::make_unique<Zlib>()),
      output_(new char[kOutputBytes]) {}

CompressedFileWriter::~CompressedFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status CompressedFileWriter::Append(absl::string_view bytes) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("write to '", path_, "' after Close()"));
  }
  if (!error_.ok()) return error_;
  return error_ = Deflate(bytes, /*finish=*/false);
}

absl::Status CompressedFileWriter::Close() {
  if (fd_ < 0) return absl::OkStatus();
  absl::Status status = error_.ok() ? Deflate({}, /*finish=*/true) : error_;
  if (::close(fd_) != 0 && status.ok()) {
    status = ErrnoToStatus(errno, "close", path_);
  }
  fd_ = -1;
  return status;
}

absl::Status CompressedFileWriter::Deflate(absl::string_view bytes,
                                           bool finish) {
  z_stream& zs = zlib_->stream;
  // zlib takes non-const input it never writes; feed it in uInt-sized parts.
  size_t left = bytes.size();
  const char* next = bytes.data();
  do {
    const uInt part = static_cast<uInt>(std::min<size_t>(left, 1u << 30));
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(next));
    zs.avail_in = part;
    next += part;
    left -= part;
    const int flush = finish && left == 0 ? Z_FINISH : Z_NO_FLUSH;
    int ret;
    do {
      zs.next_out = reinterpret_cast<Bytef*>(output_.get());
      zs.avail_out = static_cast<uInt>(kOutputBytes);
      ret = deflate(&zs, flush);
      if (ret == Z_STREAM_ERROR) {
        return absl::InternalError(
            absl::StrCat("'", path_, "': deflate failed"));
      }
      if (absl::Status s =
              WriteOut(output_.get(), kOutputBytes - zs.avail_out);
          !s.ok()) {
        return s;
      }
    } while (zs.avail_out == 0 || (flush == Z_FINISH && ret != Z_STREAM_END));
  } while (left > 0);
  return absl::OkStatus();
}

absl::Status CompressedFileWriter::WriteOut(const char* data, size_t n) {
  while (n > 0) {
    const ssize_t written = ::write(fd_, data, n);
    if (written < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "write", path_);
    }
    data += written;
    n -= static_cast<size_t>(written);
  }
  return absl::OkStatus();
}

}  // namespace shardq
