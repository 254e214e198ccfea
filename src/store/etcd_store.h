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
//   m/<first>               a commit mark: one commit stored the entries
//                           <first>..CommitMark.last_seq (every queue's)
//   b/<seq>                 the commit base: every entry up to <seq> is
//                           stored (the largest such key counts)
//
// Pipelining: up to EtcdStoreOptions::commits_in_flight commits are in
// flight at once, each taking the next entries in order; etcd may apply
// them in any order, but they are acknowledged strictly in sequence order
// (an entry is durable once its commit and every earlier one succeeded).
// A failed commit fails the store: the commits after it are never
// acknowledged, even those etcd applied. Recovery therefore keeps only the
// contiguous prefix: from the commit base, commit marks chained first to
// last; anything after the first gap (a commit that never applied) was
// never acknowledged, is ignored and is deleted by Open (guarded, like
// every commit), so later sequence numbers can be reused safely. A
// snapshot's commit waits until every earlier commit succeeded and holds
// up later ones until it is stored: it deletes what it covers (journal
// keys, commit marks) and moves the commit base to its last entry.
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
// covers, its older chunks and every commit mark (all earlier commits are
// stored by then), and then compacts etcd's revision history up to that
// commit.
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
  // How many commits (one guarded etcd transaction each) may be in flight
  // at once; 1 commits one after another. At least 1. See max_gather for
  // when a commit goes while another is in flight.
  int commits_in_flight = 4;
  // Group commit. With no commit in flight, a writer takes the pending
  // entries once as many wait as the last commit took plus those pending
  // when it finished (one round of waiting callers), or once the oldest
  // has waited 1.5 times the last commit's latency, at most this long:
  // callers answered by a commit need about that long to come back, and
  // a shorter wait split them into two groups that each waited for the
  // other's commit too. Beside a commit in flight, another goes only when
  // more than one commit's worth waits. (On a machine where etcd is short
  // of CPU, a transaction costs about the same whatever its size, so
  // more, smaller ones in flight lowered throughput; see
  // bench/results/coordinator_throughput.md.) Zero: every free writer
  // commits what is pending at once, up to commits_in_flight of them.
  absl::Duration max_gather = absl::Milliseconds(6);

  // For tests: when set, every etcd transaction the store sends goes
  // through it, with a function that sends a request to etcd; what it
  // returns is the answer the store sees. Lets a test hold, fail or
  // reorder commits. Called concurrently, from the store's threads.
  using SendTxn = std::function<absl::StatusOr<etcdserverpb::TxnResponse>(
      const etcdserverpb::TxnRequest&)>;
  std::function<absl::StatusOr<etcdserverpb::TxnResponse>(const etcdserverpb::TxnRequest&,
                                                          const SendTxn& send)>
      txn_hook;
};

class EtcdStore final : public StateStore {
 public:
  static constexpr size_t kMaxCommitBytes = size_t{1} << 20;
  static constexpr int kMaxCommitOps = 100;
  static constexpr size_t kInlineEntryBytes = 256 << 10;
  static constexpr size_t kChunkBytes = 1000 << 10;

  // The key prefix of `job` ("/shardq/<job>/").
  static std::string JobPrefix(absl::string_view job);

  // Reads the job's state into `recovered` (one consistent revision: the
  // contiguous prefix, see above), deletes what lies after a gap (guarded
  // transactions), and starts the writers. INVALID_ARGUMENT for a bad job
  // name; UNAVAILABLE naming etcd when it cannot be read or written, or
  // "not leader" when the guard no longer holds (another term began: stand
  // by and try again); DATA_LOSS naming the key when a value does not parse, fails its
  // checksum, a snapshot misses chunks, or commit marks overlap.
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
    absl::Time appended;
  };
  struct Callback {
    uint64_t seq = 0;
    std::function<void(absl::Status)> done;
  };
  // A commit taken by a writer, until it and every earlier one are done.
  struct InFlight {
    uint64_t last_seq = 0;
    bool done = false;
  };
  // What Open found after the contiguous prefix, to delete before writing.
  struct Unacknowledged {
    std::vector<std::string> journal_queues;  // hex names with journal keys past it
    std::vector<std::string> chunk_dirs;      // "c/<q>/<seq>/" prefixes past it
    bool marks = false;                       // commit marks past it
    bool write_base = false;  // the journal predates commit marks: store a base
    bool empty() const {
      return journal_queues.empty() && chunk_dirs.empty() && !marks && !write_base;
    }
  };

  // `durable_seq`: the end of the recovered prefix; appends continue after it.
  EtcdStore(EtcdStoreOptions options, uint64_t durable_seq);
  // Deletes what `after` names (past durable_seq_), in guarded
  // transactions, commit marks last (so a second try finds the same gap).
  absl::Status RemoveUnacknowledged(const Unacknowledged& after);
  void StartWriters();
  // One of commits_in_flight threads: takes the next batch in order,
  // commits it, and acknowledges what is durable.
  void WriterLoop();
  // Whether a free writer may stop waiting: to take a batch (or, with
  // nothing pending, to end). Its waits are conditions on mu_, so that an
  // append wakes a writer only when it lets one go.
  bool WriterMayGoLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many of the next entries of pending_ one commit can take, within
  // etcd's limits (at least one when any is pending).
  size_t FittingEntriesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes them.
  std::vector<Pending> TakeBatchLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks the commit ending at `last_seq` done (or fails the store with
  // `committed`), advances durable_seq_ over the done prefix, and hands
  // back the callbacks now answered.
  std::vector<Callback> FinishLocked(uint64_t last_seq, const absl::Status& committed,
                                     const std::vector<Pending>& batch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes `batch` (in order) in one guarded transaction, preceded by the
  // parts and chunks it needs; retries as the file comment says. Returns
  // the revision to compact etcd's history to (0: none).
  absl::StatusOr<int64_t> Commit(std::vector<Pending>& batch);
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
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Commits taken and not yet acknowledged, in sequence order.
  std::deque<InFlight> in_flight_ ABSL_GUARDED_BY(mu_);
  // A snapshot's commit was taken: no other is taken until it is done.
  bool snapshot_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // Group commit (EtcdStoreOptions::max_gather): how many entries a writer
  // waits for, and how long the oldest may wait.
  size_t gather_entries_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Duration gather_for_ ABSL_GUARDED_BY(mu_);
  std::vector<Callback> callbacks_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  StoreTotals totals_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> durable_seq_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> lost_leadership_{false};
  std::vector<std::thread> writers_;
};

}  // namespace shardq

#endif  // SHARDQ_STORE_ETCD_STORE_H_
