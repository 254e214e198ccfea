// File access for every reader: one small interface (open, size, pread),
// so that tests can inject I/O faults (src/io/faulty_file.h), and small
// filesystem helpers. All errors name the path (and the byte offset of a
// failed read).
#ifndef SHARDQ_IO_FILE_H_
#define SHARDQ_IO_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardq {

// A regular file opened for reading at any offset. Thread-safe: reads at
// different offsets may run at once.
class RandomAccessFile {
 public:
  RandomAccessFile(std::string path, int64_t size)
      : path_(std::move(path)), size_(size) {}
  virtual ~RandomAccessFile() = default;
  RandomAccessFile(const RandomAccessFile&) = delete;
  RandomAccessFile& operator=(const RandomAccessFile&) = delete;

  const std::string& path() const { return path_; }
  // Size in bytes when the file was opened.
  int64_t size() const { return size_; }

  // Reads up to `n` bytes at `offset` into `dst`, as pread does: returns how
  // many, 0 at the end of the file, possibly fewer than n anywhere.
  // Errors: ReadError (the code errno implies, naming file and offset).
  virtual absl::StatusOr<size_t> ReadSome(int64_t offset, size_t n,
                                          char* dst) = 0;

  // What identifies this content of the file, when the storage says (an
  // object's ETag); "" for local files. A plan may record it (the item's
  // etag parameter) so that a reader refuses a file replaced since.
  virtual std::string version() const { return ""; }

  // A hint: the caller is about to read [start, end) in order (end < 0: to
  // the end), and little outside it. Remote files fetch ahead inside it
  // and nothing beyond it (without a hint they fetch exactly what each
  // read asks); local files ignore it.
  virtual void WillRead(int64_t start, int64_t end) {}

  // The file's size() bytes mapped into memory (read only), for readers
  // that copy records straight out of the page cache; null when the file
  // is not mapped: remote and test files, local files under
  // kMinMappedBytes, mapping turned off (SHARDQ_READ_MMAP=0) or refused.
  // Mapped the first time it is asked for, and for the file's life.
  // Touch the bytes only through src/io/mapped_read.h, whose guard turns
  // the SIGBUS of a file cut shorter while mapped into a false return
  // (the reader then reads the same bytes with ReadSome for its error).
  virtual const char* Mapping() { return nullptr; }

  // Bytes at `offset` lent out of the file's own buffer, without a copy,
  // by files that buffer what they fetch (a remote file streaming the
  // range announced by WillRead): a view of 1 to n bytes, or an empty one
  // at the end of the file. The view stays valid until the next ReadSome,
  // Lend or WillRead of this file, so only a file that one thread reads at
  // a time may be read this way. nullopt: nothing lent at this offset (a local
  // file, a read outside the announced range); read it with ReadSome.
  // Errors as ReadSome.
  virtual absl::StatusOr<std::optional<absl::string_view>> Lend(
      int64_t offset, size_t n) {
    return std::optional<absl::string_view>();
  }

 private:
  const std::string path_;
  const int64_t size_;
};

// The error to report for the n bytes at `offset` of `file`'s mapping when
// a guarded read of them failed (their pages vanished: SIGBUS): the same
// bytes read with ReadSome give it (a file that now ends sooner:
// DATA_LOSS "... (truncated while being read?)", as ReadFully; EIO). If
// they read fine now, DATA_LOSS "'PATH': bytes of the mapped file at byte
// offset O could not be read, though reading them again succeeds ...".
absl::Status MappedReadFailure(RandomAccessFile& file, int64_t offset, size_t n);

// Local files smaller than this are read with pread only: a mapping of a
// few pages costs more (mmap, faults, munmap) than it saves.
inline constexpr int64_t kMinMappedBytes = 256 << 10;

// The most local files mapped at once: each mapping is one entry of the
// process's memory map (vm.max_map_count, 65,530 by default, shared with
// malloc's own mappings), so a process holding a great many large files
// open at once reads those past this bound with pread instead of running
// that table out.
inline constexpr int64_t kMaxFileMappings = 4096;

// Local files mapped at this moment (RandomAccessFile::Mapping), at most
// kMaxFileMappings. Tests may lower the bound (and must restore it).
int64_t LiveFileMappings();
void SetMaxFileMappingsForTesting(int64_t max);

// Reads exactly `n` bytes at `offset` (all inside the file as opened),
// over as many short reads as it takes. A file that ends before them was
// cut shorter while it was read: DATA_LOSS "'PATH' ends at byte offset O
// but had S bytes when opened (truncated while being read?)". Other
// errors as ReadSome.
absl::Status ReadFully(RandomAccessFile& file, int64_t offset, size_t n,
                       char* dst);

// A read buffer that keeps each byte at the same address modulo 4 KiB as
// the file offset it holds. The kernel's copy out of the page cache runs
// about five times slower on some CPUs (AMD EPYC, Zen 3) when the
// destination lies 1 to 31 bytes past the source modulo 4 KiB, and a
// plain new[] or std::vector buffer of a few hundred KiB sits 16 bytes
// into a page: every read at a page-aligned offset into it took the slow
// path (bench/results/read_throughput.md). Fill the buffer at
// Window(offset) for a read that starts at `offset`.
class AlignedReadBuffer {
 public:
  static constexpr size_t kPageBytes = 4096;
  // Throws std::bad_alloc when capacity plus a page cannot be allocated
  // (or does not fit in a size_t).
  explicit AlignedReadBuffer(size_t capacity);
  ~AlignedReadBuffer();
  AlignedReadBuffer(const AlignedReadBuffer&) = delete;
  AlignedReadBuffer& operator=(const AlignedReadBuffer&) = delete;

  // Where the byte at file offset `offset` (>= 0) goes when a fill starts
  // there; capacity() bytes from it belong to the buffer.
  char* Window(int64_t offset) const {
    return base_ + static_cast<size_t>(static_cast<uint64_t>(offset) % kPageBytes);
  }
  size_t capacity() const { return capacity_; }

 private:
  const size_t capacity_;
  char* const base_;  // capacity_ + kPageBytes bytes, page-aligned
};

// Writes all of `bytes` to the open descriptor `fd` (of `path`, named in
// errors), over as many short writes as it takes (EINTR retried). Errors
// as ErrnoToStatus(errno, "write", path): ENOSPC is RESOURCE_EXHAUSTED.
absl::Status WriteFully(int fd, absl::string_view bytes, const std::string& path);

// Reads up to `n` bytes at `offset`, fewer only where the file ends (short
// reads are retried). Returns how many.
absl::StatusOr<size_t> ReadUpTo(RandomAccessFile& file, int64_t offset,
                                size_t n, char* dst);

// Opens files. Thread-safe.
class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // NOT_FOUND when `path` does not exist, PERMISSION_DENIED when it may not
  // be read, INVALID_ARGUMENT when it is not a regular file. Default()
  // opens "s3://bucket/key" names as objects of S3-compatible storage
  // (src/io/s3/s3_file.h).
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path) = 0;

  // Opens `path` for a caller that reads [start, end) of it next, in order
  // (end < 0: to the end): Open, then WillRead(start, end) on the file,
  // except that a remote file may fetch the range with the request that
  // opens it. Errors as Open.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRange(
      const std::string& path, int64_t start, int64_t end);

  // A hint: OpenForRange(path, start, end) comes soon (for the item after
  // the one a reader reads), so a remote file system may start that open
  // now and have the range's first bytes on their way when it comes (at
  // most a few such opens are kept, each for a limited time). Local files:
  // nothing. Never fails; the open reports any error.
  virtual void WillOpen(const std::string& path, int64_t start, int64_t end) {}

  // The operating system's files (open, fstat, pread), and s3:// objects.
  // Never null.
  static FileSystem* Default();
};

// `file_system`, or FileSystem::Default() when it is null.
inline FileSystem* OrDefault(FileSystem* file_system) {
  return file_system != nullptr ? file_system : FileSystem::Default();
}

// "read 'PATH' at byte offset N: strerror(error)", with the code that
// errno implies: DATA_LOSS for EIO (the device cannot return the bytes),
// else absl::ErrnoToStatusCode (ENOSPC RESOURCE_EXHAUSTED, ...).
absl::Status ReadError(int error, const std::string& path, int64_t offset);

// Size in bytes of a regular file (of an object, by a HEAD, for an s3://
// name). NOT_FOUND when it does not exist, INVALID_ARGUMENT when it is not
// a regular file, PERMISSION_DENIED when it cannot be read.
absl::StatusOr<int64_t> FileSize(const std::string& path);

// Refuses a byte range [start, end) of a file of `size` bytes that no
// longer fits in it: the range was planned on a longer file, so the file
// changed since the plan was made, and reading what is left would return
// a short item as if it were whole. end < 0 means "to the end of the file"
// (then only start is checked). FAILED_PRECONDITION:
//   "'PATH' changed since the plan was made: size S, item ends at E"
// A file that grew is not detected here (see CheckPlannedSize).
absl::Status CheckRangeInFile(const std::string& path, int64_t size,
                              int64_t start, int64_t end);

// Refuses a file whose size is not the one the plan saw: `planned` (an
// item's WorkItem::work_size) is >= 0 and differs from file.size(). A
// file that grew since would otherwise have its new records read by no
// item. FAILED_PRECONDITION:
//   "'PATH' changed since the plan was made: size now S, planned P"
absl::Status CheckPlannedSize(const RandomAccessFile& file, int64_t planned);

// Refuses a file whose content is not the one a plan saw: `planned` (an
// item's etag parameter, URI-encoded) is not empty and differs from the
// open file's version(). FAILED_PRECONDITION:
//   "'PATH' changed since the plan was made: ETag now X, planned Y"
absl::Status CheckPlannedVersion(const RandomAccessFile& file,
                                 const std::string& planned);

// Maps errno of a failed `op` on `path` to the most specific status.
absl::Status ErrnoToStatus(int error, const std::string& op,
                           const std::string& path);

}  // namespace shardq

#endif  // SHARDQ_IO_FILE_H_
