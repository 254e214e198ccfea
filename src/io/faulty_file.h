// A FileSystem that injects I/O faults into the files it opens, for tests
// of the readers: short reads, a read error (EIO, ENOSPC, any errno) from a
// byte offset on, and a file cut shorter after it was opened. Every fault
// must surface from a reader as a clear error naming the file and offset,
// or (short reads) not at all: never as silently fewer records. Apart from
// the faults a file behaves as the one it wraps: its version and the
// reader's read-ahead hints (WillRead) pass through. Thread-safe.
#ifndef SHARDQ_IO_FAULTY_FILE_H_
#define SHARDQ_IO_FAULTY_FILE_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "src/io/file.h"

namespace shardq {

struct FileFaults {
  // > 0: every read returns at most this many bytes (a short read).
  size_t max_read_bytes = 0;
  // >= 0: a read of any byte at or after this offset fails with
  // `read_errno` (nothing is read).
  int64_t error_at = -1;
  int read_errno = 0;
  // >= 0: the file ends here for reads (it was cut shorter after it was
  // opened); size() still reports the size at open.
  int64_t truncate_at = -1;
  // Reads answered so far by files with these faults (shared by them).
  std::shared_ptr<std::atomic<int64_t>> reads =
      std::make_shared<std::atomic<int64_t>>(0);
};

class FaultyFile final : public RandomAccessFile {
 public:
  FaultyFile(std::unique_ptr<RandomAccessFile> file, FileFaults faults)
      : RandomAccessFile(file->path(), file->size()),
        file_(std::move(file)),
        faults_(std::move(faults)) {}

  absl::StatusOr<size_t> ReadSome(int64_t offset, size_t n,
                                  char* dst) override {
    ++*faults_.reads;
    if (faults_.max_read_bytes > 0) n = std::min(n, faults_.max_read_bytes);
    if (faults_.error_at >= 0 && n > 0 &&
        offset + static_cast<int64_t>(n) > faults_.error_at) {
      if (offset >= faults_.error_at) {
        return ReadError(faults_.read_errno, path(), offset);
      }
      // The bytes before the bad one read fine; the next read fails.
      n = static_cast<size_t>(faults_.error_at - offset);
    }
    if (faults_.truncate_at >= 0) {
      if (offset >= faults_.truncate_at) return size_t{0};
      n = std::min(n, static_cast<size_t>(faults_.truncate_at - offset));
    }
    return file_->ReadSome(offset, n, dst);
  }

  std::string version() const override { return file_->version(); }

  // The hint as given: the faults change what reads return, not what the
  // reader is about to read.
  void WillRead(int64_t start, int64_t end) override {
    file_->WillRead(start, end);
  }

 private:
  const std::unique_ptr<RandomAccessFile> file_;
  const FileFaults faults_;
};

// Opens files through another FileSystem (the default one), adding the
// faults set for their path.
class FaultyFileSystem final : public FileSystem {
 public:
  explicit FaultyFileSystem(FileSystem* base = nullptr)
      : base_(OrDefault(base)) {}

  void SetFaults(const std::string& path, FileFaults faults) {
    absl::MutexLock lock(&mu_);
    faults_[path] = std::move(faults);
  }

  // Files opened so far (of any path).
  int64_t opens() const {
    absl::MutexLock lock(&mu_);
    return opens_;
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path) override {
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = base_->Open(path);
    if (!file.ok()) return file.status();
    absl::MutexLock lock(&mu_);
    ++opens_;
    auto it = faults_.find(path);
    if (it == faults_.end()) return file;
    return std::unique_ptr<RandomAccessFile>(
        new FaultyFile(*std::move(file), it->second));
  }

 private:
  FileSystem* const base_;
  mutable absl::Mutex mu_;
  std::map<std::string, FileFaults> faults_ ABSL_GUARDED_BY(mu_);
  int64_t opens_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardq

#endif  // SHARDQ_IO_FAULTY_FILE_H_
