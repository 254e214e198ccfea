#include "src/io/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/io/mapped_read.h"
#include "src/io/s3/s3_file.h"
#include "src/io/s3/s3_url.h"

namespace shardq {

absl::Status ErrnoToStatus(int error, const std::string& op,
                           const std::string& path) {
  std::string message = absl::StrCat(op, " '", path, "': ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
    case EINVAL:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnknownError(message);
  }
}

absl::Status CheckRangeInFile(const std::string& path, int64_t size,
                              int64_t start, int64_t end) {
  if (end > size) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' changed since the plan was made: size ",
                     size, ", item ends at ", end));
  }
  if (end < 0 && start > size) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' changed since the plan was made: size ",
                     size, ", item starts at ", start));
  }
  return absl::OkStatus();
}

absl::Status CheckPlannedSize(const RandomAccessFile& file, int64_t planned) {
  if (planned < 0 || file.size() == planned) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("'", file.path(), "' changed since the plan was made: size now ",
                   file.size(), ", planned ", planned,
                   file.size() > planned ? " (records appended since would be read by no item)"
                                         : ""));
}

absl::Status CheckPlannedVersion(const RandomAccessFile& file,
                                 const std::string& planned) {
  if (planned.empty()) return absl::OkStatus();
  const std::string now = UriEncode(file.version(), /*keep_slash=*/false);
  if (now == planned) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("'", file.path(), "' changed since the plan was made: ETag now ",
                   now.empty() ? "unknown" : now, ", planned ", planned));
}

absl::Status ReadError(int error, const std::string& path, int64_t offset) {
  // EIO on a read: the device could not return the bytes (absl says UNKNOWN).
  const absl::StatusCode code =
      error == EIO ? absl::StatusCode::kDataLoss : absl::ErrnoToStatusCode(error);
  return absl::Status(code,
                      absl::StrCat("read '", path, "' at byte offset ", offset,
                                   ": ", std::strerror(error)));
}

absl::Status ReadFully(RandomAccessFile& file, int64_t offset, size_t n,
                       char* dst) {
  while (n > 0) {
    absl::StatusOr<size_t> got = file.ReadSome(offset, n, dst);
    if (!got.ok()) return got.status();
    if (*got == 0) {
      // Shorter than when it was opened: the rest of the item is gone.
      return absl::DataLossError(absl::StrCat(
          "'", file.path(), "' ends at byte offset ", offset, " but had ",
          file.size(), " bytes when opened (truncated while being read?)"));
    }
    dst += *got;
    n -= *got;
    offset += static_cast<int64_t>(*got);
  }
  return absl::OkStatus();
}

absl::Status MappedReadFailure(RandomAccessFile& file, const int64_t offset,
                               size_t n) {
  std::vector<char> bytes(std::min<size_t>(n, 64 << 10));
  for (int64_t at = offset; n > 0;) {
    const size_t take = std::min(n, bytes.size());
    if (absl::Status s = ReadFully(file, at, take, bytes.data()); !s.ok()) {
      return s;
    }
    at += static_cast<int64_t>(take);
    n -= take;
  }
  return absl::DataLossError(absl::StrCat(
      "'", file.path(), "': bytes of the mapped file at byte offset ", offset,
      " could not be read, though reading them again succeeds (the file "
      "changed while it was read?)"));
}

namespace {

// capacity + one page, or std::bad_alloc (as new[] of too much) when that
// does not fit in a size_t: a wrapped sum would allocate a few bytes for a
// buffer that is then filled with up to `capacity`.
size_t WithSlack(size_t capacity) {
  if (capacity > std::numeric_limits<size_t>::max() - AlignedReadBuffer::kPageBytes) {
    throw std::bad_alloc();
  }
  return capacity + AlignedReadBuffer::kPageBytes;
}

}  // namespace

AlignedReadBuffer::AlignedReadBuffer(size_t capacity)
    : capacity_(capacity),
      base_(static_cast<char*>(::operator new(WithSlack(capacity),
                                              std::align_val_t{kPageBytes}))) {}

AlignedReadBuffer::~AlignedReadBuffer() {
  ::operator delete(base_, std::align_val_t{kPageBytes});
}

absl::Status WriteFully(int fd, absl::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t wrote = ::write(fd, bytes.data(), bytes.size());
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, "write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(wrote));
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> ReadUpTo(RandomAccessFile& file, int64_t offset,
                                size_t n, char* dst) {
  size_t done = 0;
  while (done < n) {
    absl::StatusOr<size_t> got =
        file.ReadSome(offset + static_cast<int64_t>(done), n - done, dst + done);
    if (!got.ok()) return got.status();
    if (*got == 0) break;
    done += *got;
  }
  return done;
}

namespace {

// SHARDQ_READ_MMAP=0 turns mapping off (file systems where mmap is slow or
// unreliable, such as some FUSE mounts); read once. A ThreadSanitizer build
// never maps: there a SIGBUS under the guard's copy still ends the process
// (seen in file_fault_test), so such a build reads with pread.
bool MappingAllowed() {
#if defined(__SANITIZE_THREAD__)
  return false;
#endif
  static const bool allowed = [] {
    const char* env = std::getenv("SHARDQ_READ_MMAP");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return allowed;
}

// Mappings alive at once, and their bound (see kMaxFileMappings).
std::atomic<int64_t> g_max_mappings{kMaxFileMappings};
std::atomic<int64_t> g_live_mappings{0};

// Takes a place for one more mapping; false when all are taken.
bool ReserveMapping() {
  if (g_live_mappings.fetch_add(1, std::memory_order_relaxed) <
      g_max_mappings.load(std::memory_order_relaxed)) {
    return true;
  }
  g_live_mappings.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

class PosixFile final : public RandomAccessFile {
 public:
  PosixFile(std::string path, int64_t size, int fd)
      : RandomAccessFile(std::move(path), size), fd_(fd) {}
  ~PosixFile() override {
    if (mapping_ != nullptr) {
      ::munmap(mapping_, static_cast<size_t>(size()));
      g_live_mappings.fetch_sub(1, std::memory_order_relaxed);
    }
    ::close(fd_);
  }

  const char* Mapping() override {
    absl::MutexLock lock(&mu_);
    if (!map_tried_) {
      map_tried_ = true;
      if (size() >= kMinMappedBytes && MappingAllowed() && ReserveMapping()) {
        void* m = ::mmap(nullptr, static_cast<size_t>(size()), PROT_READ,
                         MAP_SHARED, fd_, 0);
        if (m != MAP_FAILED) {
          InstallMappedReadGuard();
          mapping_ = static_cast<char*>(m);
          AdviseLocked();
        } else {
          g_live_mappings.fetch_sub(1, std::memory_order_relaxed);
        }
      }
    }
    return mapping_;
  }

  // Sequential read-ahead over the range a mapped reader walks.
  void WillRead(int64_t start, int64_t end) override {
    absl::MutexLock lock(&mu_);
    will_start_ = start;
    will_end_ = end;
    AdviseLocked();
  }

  absl::StatusOr<size_t> ReadSome(int64_t offset, size_t n,
                                  char* dst) override {
    while (true) {
      const ssize_t got = ::pread(fd_, dst, n, static_cast<off_t>(offset));
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) return ReadError(errno, path(), offset);
    }
  }

 private:
  void AdviseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (mapping_ == nullptr || will_start_ < 0) return;
    const int64_t end = will_end_ < 0 ? size() : std::min(will_end_, size());
    const int64_t start =
        will_start_ - will_start_ % static_cast<int64_t>(AlignedReadBuffer::kPageBytes);
    if (end <= start) return;
    ::madvise(mapping_ + start, static_cast<size_t>(end - start), MADV_SEQUENTIAL);
  }

  const int fd_;
  absl::Mutex mu_;
  bool map_tried_ ABSL_GUARDED_BY(mu_) = false;
  char* mapping_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t will_start_ ABSL_GUARDED_BY(mu_) = -1;
  int64_t will_end_ ABSL_GUARDED_BY(mu_) = -1;
};

// Opens `path` for reading if it is a regular file whose size tells what
// it holds; fills *st. Opened without blocking (a FIFO's open would wait
// for a writer: it is refused instead). A file that reports size 0 but
// reads bytes (/proc, /sys) is refused too: everything plans and reads a
// file by its size, so its content would be left unread without a word.
absl::StatusOr<int> OpenRegular(const std::string& path, struct stat* st) {
  // Not even opened when it is not a regular file (opening some devices
  // does something); checked again on the open file below.
  if (::stat(path.c_str(), st) == 0 && !S_ISREG(st->st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoToStatus(errno, "open", path);
  absl::Status refused;
  if (::fstat(fd, st) != 0) {
    refused = ErrnoToStatus(errno, "stat", path);
  } else if (!S_ISREG(st->st_mode)) {
    refused = absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  } else if (st->st_size == 0) {
    char byte;
    if (::pread(fd, &byte, 1, 0) > 0) {
      refused = absl::InvalidArgumentError(absl::StrCat(
          "'", path, "' reports a size of 0 but has content (a /proc or "
          "/sys file?): files are read by their size; copy it to a "
          "regular file first"));
    }
  }
  if (refused.ok() && ::fcntl(fd, F_SETFL, 0) != 0) {
    refused = ErrnoToStatus(errno, "fcntl", path);
  }
  if (!refused.ok()) {
    ::close(fd);
    return refused;
  }
  return fd;
}

class PosixFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path) override {
    struct stat st;
    absl::StatusOr<int> fd = OpenRegular(path, &st);
    if (!fd.ok()) return fd.status();
    return std::make_unique<PosixFile>(path, static_cast<int64_t>(st.st_size),
                                       *fd);
  }
};

// Local paths to the operating system, s3:// names to S3FileSystem.
class DefaultFileSystem final : public FileSystem {
 public:
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path) override {
    if (IsS3Path(path)) return S3FileSystem::Default()->Open(path);
    return posix_.Open(path);
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRange(
      const std::string& path, int64_t start, int64_t end) override {
    if (IsS3Path(path)) {
      return S3FileSystem::Default()->OpenForRange(path, start, end);
    }
    return posix_.OpenForRange(path, start, end);
  }

  void WillOpen(const std::string& path, int64_t start, int64_t end) override {
    if (IsS3Path(path)) S3FileSystem::Default()->WillOpen(path, start, end);
  }

 private:
  PosixFileSystem posix_;
};

}  // namespace

int64_t LiveFileMappings() {
  return g_live_mappings.load(std::memory_order_relaxed);
}

void SetMaxFileMappingsForTesting(int64_t max) {
  g_max_mappings.store(max, std::memory_order_relaxed);
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FileSystem::OpenForRange(
    const std::string& path, int64_t start, int64_t end) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = Open(path);
  if (file.ok()) (*file)->WillRead(start, end);
  return file;
}

FileSystem* FileSystem::Default() {
  static DefaultFileSystem* const file_system = new DefaultFileSystem();
  return file_system;
}

absl::StatusOr<int64_t> FileSize(const std::string& path) {
  if (IsS3Path(path)) {
    absl::StatusOr<S3ObjectInfo> info = S3Stat(path);
    if (!info.ok()) return info.status();
    return info->size;
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("work '", path, "' is not a regular file"));
  }
  if (st.st_size == 0) {
    // Planned as empty: make sure it is (OpenRegular refuses a file that
    // only reports size 0).
    absl::StatusOr<int> fd = OpenRegular(path, &st);
    if (!fd.ok()) return fd.status();
    ::close(*fd);
    return 0;
  }
  if (::access(path.c_str(), R_OK) != 0) return ErrnoToStatus(errno, "open", path);
  return static_cast<int64_t>(st.st_size);
}

}  // namespace shardq
