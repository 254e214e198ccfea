// COMMITTED: a small file beside state.db that says which state directory
// this is (a random identity, also stored in state.db) and how far its
// journal was committed. A database that was truncated, deleted, replaced
// or lost its WAL holds less than COMMITTED says (or another identity), so
// recovery refuses it instead of starting from what is left.
//
// What is written when, and what that detects (docs/architecture.md,
// "Durability"):
//  * created (identity, sequence 0) and fsynced, with its directory,
//    before state.db is;
//  * after every commit: the commit's last sequence, with pwrite and no
//    fsync (an fsync per commit would halve durable throughput). The page
//    cache survives a process crash (kill -9), so after a crash or a clean
//    stop the file is never behind the last commit by more than a commit in
//    flight — and never ahead of it: it is written only after the commit's
//    fsync returned;
//  * fsynced after every WAL checkpoint and at a clean close, so that
//    after a power loss it is at least as far as the last checkpoint.
//
// The record is 40 bytes at offset 0 (one disk sector), with a CRC32C.
//
// Not thread-safe: the journal writes it from the one running commit.
#ifndef SHARDQ_STORE_COMMIT_MARK_H_
#define SHARDQ_STORE_COMMIT_MARK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace shardq {

struct CommitRecord {
  std::string dir_id;  // 16 random bytes, hex-encoded in messages
  uint64_t seq = 0;    // every journal entry up to this one was committed
  bool clean = false;  // the coordinator stopped cleanly (state.db-wal gone)
};

class CommitMark {
 public:
  static constexpr const char* kFileName = "COMMITTED";

  // Reads `dir`/COMMITTED: nullopt when there is none, DATA_LOSS naming the
  // file when it is cut short or fails its checksum, PERMISSION_DENIED
  // when it cannot be read.
  static absl::StatusOr<std::optional<CommitRecord>> Read(const std::string& dir);

  // Writes `record` to a new `dir`/COMMITTED and fsyncs it and `dir`.
  static absl::StatusOr<std::unique_ptr<CommitMark>> Create(const std::string& dir,
                                                            const CommitRecord& record);
  // Opens an existing `dir`/COMMITTED for Write and Sync.
  static absl::StatusOr<std::unique_ptr<CommitMark>> OpenExisting(const std::string& dir);
  ~CommitMark();

  // Overwrites the record (pwrite, no fsync). The error names the file.
  absl::Status Write(const CommitRecord& record);
  // fdatasync: what Write wrote survives a power loss.
  absl::Status Sync();

  // A fresh random identity (16 bytes).
  static std::string NewDirId();
  // `id` in hex, for messages.
  static std::string IdToHex(const std::string& id);

 private:
  CommitMark(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  const int fd_;
};

}  // namespace shardq

#endif  // SHARDQ_STORE_COMMIT_MARK_H_
