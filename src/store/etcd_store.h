// The etcd StateStore: a coordinator's journal and snapshots in an etcd
// cluster, so that a standby coordinator on another machine can take over.
// Keeps the contract of state_store.h; what differs from the SQLite
// Journal:
//
// Keys, under "/shardq/<job>/" (<q>: the queue name in hex, <seq>: 20
// decimal digits, so keys sort by sequence):
//   leader                  the election key (see EtcdStoreOptions::guard_key)
//   j/<q>/<seq>             one commit's updates of queue q (a Batch; <seq>
//                           is the last of them); an update over
//                           kInlineEntryBytes lies in "<that key>.p<e>.<i>"
//   s/<q>                   where q's latest snapshot lies (SnapshotMeta)
//   c/<q>/<seq>/<i>         its chunks, each at most kChunkBytes
//
// Fencing: every commit is ONE etcd transaction, guarded by a compare on
// the election key's create revision. A coordinator that is no longer the
// leader (its lease expired, it was paused, another won) cannot store
// anything: the commit fails, the store fails for good with
// FAILED_PRECONDITION "not leader" (lost_leadership() turns true) and the
// coordinator answers nothing that waited for it.
//
// Limits etcd sets by default: a request of at most 1.5 MiB and a
// transaction of at most 128 operations. A commit takes the pending
// entries in order up to kMaxCommitBytes and kMaxCommitOps (the rest goes
// in the next commit, so the stream stays ordered); larger values go in
// parts, each part in a guarded transaction of its own, before the
// transaction that makes them reachable.
//
// Bounded growth: a snapshot's commit deletes its queue's journal keys it
// covers and its older chunks, and then compacts etcd's revision history
// up to that commit.
//
// A commit that etcd does not answer (no quorum, every member unreachable)
// is retried (it is idempotent: the same keys and values, the same
// compare) for EtcdStoreOptions::retry_for, then the store fails with
// UNAVAILABLE naming etcd. Thread-safe.
#ifndef SHARDQ_STORE_ETCD_STORE_H_
#define SHARDQ_STORE_ETCD_STORE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/etcd/etcd_rpc.pb.h"
#include "src/store/etcd_client.h"
#include "src/store/state_store.h"

namespace shardq {

struct EtcdStoreOptions {
  // Shared with the election; must be set.
  std::shared_ptr<EtcdClient> client;
  // The job: keys live under "/shardq/<job>/". Not empty, no '/'.
  std::string job;
  // The key whose create revision must equal `guard_create_revision` for
  // any commit to apply (the leader's election key). Empty: no guard (a
  // store used alone, in tests and tools).
  std::string guard_key;
  int64_t guard_create_revision = 0;
  // How long a commit that etcd does not answer is retried before the
  // store fails. Keep it under the election lease's TTL: a leader whose
  // commits hang should give up before a standby takes over anyway.
  absl::Duration retry_for = absl::Seconds(2);
};

class EtcdStore final : public StateStore {
 public:
  static constexpr size_t kMaxCommitBytes = size_t{1} << 20;
  static constexpr int kMaxCommitOps = 100;
  static constexpr size_t kInlineEntryBytes = 256 << 10;
  static constexpr size_t kChunkBytes = 1000 << 10;

  // The key prefix of `job` ("/shardq/<job>/").
  static std::string JobPrefix(absl::string_view job);

  // Reads the job's state into `recovered` (one consistent revision) and
  // starts the writer. INVALID_ARGUMENT for a bad job name; UNAVAILABLE
  // naming etcd when it cannot be read; DATA_LOSS naming the key when a
  // value does not parse, fails its checksum, or a snapshot misses chunks.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Open(const EtcdStoreOptions& options,
                                                         RecoveredState* recovered);
  // Commits what was appended (unless failed), then stops.
  ~EtcdStore() override;

  uint64_t Append(const std::string& queue, const journal::Update& update) override;
  size_t AppendSnapshot(const std::string& queue, uint64_t seq,
                        const journal::QueueSnapshot& snapshot) override;
  size_t WriteSnapshot(const std::string& queue, uint64_t seq,
                       const journal::QueueSnapshot& snapshot) override;
  absl::Status WaitDurable(uint64_t seq) override;
  void OnDurable(uint64_t seq, std::function<void(absl::Status)> done) override;
  absl::Status Flush() override;
  StoreTotals totals() const override;
  absl::Status status() const override;
  uint64_t durable_seq() const override;

  // True once a commit failed because this coordinator no longer holds
  // the election key (it must step down).
  bool lost_leadership() const { return lost_leadership_.load(); }

 private:
  struct Pending {
    uint64_t seq = 0;
    std::string queue;
    std::string payload;         // a serialised Update, or QueueSnapshot (unless written)
    bool snapshot = false;
    bool chunks_written = false;  // WriteSnapshot wrote the chunks already
    uint64_t snapshot_seq = 0;
    int64_t snapshot_bytes = 0;
    uint32_t crc = 0;             // masked CRC32C of the (whole) payload
  };
  struct Callback {
    uint64_t seq = 0;
    std::function<void(absl::Status)> done;
  };

  EtcdStore(EtcdStoreOptions options, uint64_t last_seq);
  void WriterLoop();
  // Writes `batch` (in order) in one guarded transaction, preceded by the
  // parts and chunks it needs; retries as the file comment says.
  absl::Status Commit(std::vector<Pending>& batch);
  // One guarded transaction of `ops`; FAILED_PRECONDITION "not leader"
  // when the guard no longer holds. Retries while etcd does not answer.
  absl::StatusOr<etcdserverpb::TxnResponse> GuardedTxn(
      std::vector<etcdserverpb::RequestOp> ops);
  // Writes the chunks of a snapshot of `queue` at `seq` (guarded).
  absl::Status WriteChunks(const std::string& queue, uint64_t seq, const std::string& bytes);
  void FailLocked(absl::Status error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Where() const;  // "etcd at H:P,..., job 'J'"

  const EtcdStoreOptions options_;
  const std::string prefix_;

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // appends, commits, stop
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<Callback> callbacks_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  StoreTotals totals_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> durable_seq_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> lost_leadership_{false};
  std::thread writer_;
};

}  // namespace shardq

#endif  // SHARDQ_STORE_ETCD_STORE_H_
