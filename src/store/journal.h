// The coordinator's durable state: an append-only journal of updates and
// per-queue snapshots, in one SQLite database (WAL mode) inside a state
// directory. Appends are cheap and never block on the disk; a commit writes
// everything appended so far in one transaction (group commit: many
// concurrent completions share one fsync), and callers wait for their
// sequence number to be durable before they answer their client.
//
// A commit happens when a thread waits (WaitDurable, Flush: the waiter
// commits everything pending itself, one commit at a time), or, by a writer
// thread: at once for OnDurable's callbacks (whose callers never commit),
// else when kMaxPendingEntries are pending or kMaxCommitDelay after the
// oldest pending append. So an append nobody waits for (a lease grant)
// rides along with the next waited-for one instead of costing an fsync of
// its own, and is still on disk within a few milliseconds.
//
// The journal is one ordered stream: an entry is durable only once every
// entry appended before it is. A caller may therefore append without
// waiting (the coordinator writes lease grants behind, see
// coordinator_impl.h) and rely on any later wait to cover that entry too.
//
// Thread-safe.
#ifndef SHARDQ_STORE_JOURNAL_H_
#define SHARDQ_STORE_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/shardq/journal.pb.h"
#include "src/store/commit_mark.h"
#include "src/store/state_store.h"

struct sqlite3;

namespace shardq {

// The SQLite StateStore (see state_store.h for the contract it keeps).
class Journal final : public StateStore {
 public:
  // Opens (creating if needed) the state in `dir` and reads it into
  // `recovered`. Refuses — never starts empty over bad state, and leaves
  // bad state as it found it — with FAILED_PRECONDITION when another
  // coordinator holds the directory; DATA_LOSS naming the directory and
  // the file (and the entry) when state.db is corrupt, a snapshot or entry
  // fails its checksum, state.db holds fewer entries than COMMITTED says
  // were committed (truncated, deleted or lost its WAL), state.db and
  // COMMITTED belong to different state dirs, or COMMITTED is damaged or
  // missing beside a state.db that holds state (see commit_mark.h);
  // PERMISSION_DENIED / NOT_FOUND for an unusable path. A format 1 state
  // dir (before checksums) is upgraded, with a note on stderr.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir,
                                                       RecoveredState* recovered);
  // Commits what was appended, then closes.
  ~Journal() override;

  // The longest an append waits for a commit when nobody waits for it, and
  // the most appends one commit waits to gather.
  static constexpr absl::Duration kMaxCommitDelay = absl::Milliseconds(5);
  static constexpr size_t kMaxPendingEntries = 4096;

  // Queues `update` of `queue` for the next commit; returns its sequence
  // number. No I/O.
  uint64_t Append(const std::string& queue, const journal::Update& update) override;

  // Queues a snapshot of `queue` that includes every update of that queue
  // with sequence <= `seq`; from its commit on, recovery skips those
  // journal entries, and the commits that follow delete them, at most
  // kTrimRowsPerCommit per commit (so that no commit stalls on a large
  // delete). No I/O. Returns the snapshot's size in bytes as stored.
  size_t AppendSnapshot(const std::string& queue, uint64_t seq,
                        const journal::QueueSnapshot& snapshot) override;

  // AppendSnapshot for a large snapshot, without holding up the journal:
  // a snapshot of more than kSnapshotPartBytes is written in parts of that
  // size, each in a commit of its own (waited for here, so that no commit
  // carries more than one part), before the row that completes it (queued
  // like AppendSnapshot's). Completions waiting for durability wait behind
  // one part at most. Blocks; returns the snapshot's size in bytes. Parts
  // of a snapshot that a crash left without its last row are ignored.
  size_t WriteSnapshot(const std::string& queue, uint64_t seq,
                       const journal::QueueSnapshot& snapshot) override;
  static constexpr size_t kSnapshotPartBytes = size_t{1} << 20;
  static constexpr int kTrimRowsPerCommit = 2000;

  // Blocks until every append up to `seq` is durable (asking the writer to
  // commit now). A failed write is
  // returned to every waiter (and every later one): the coordinator must not
  // acknowledge what it could not store.
  absl::Status WaitDurable(uint64_t seq) override;

  // Calls `done` once every append up to `seq` is durable, with OK, or
  // with the error that keeps it from being stored. Never commits and never
  // waits: it returns at once, and the writer thread commits for it (at
  // once, or as soon as the running commit ends). `done` runs on the thread
  // whose commit covered `seq` (the writer's, or a WaitDurable leader's;
  // the caller's only when `seq` is already durable); it must be quick and
  // must not call the journal.
  void OnDurable(uint64_t seq, std::function<void(absl::Status)> done) override;

  // Commits everything appended so far and waits for it.
  absl::Status Flush() override;

  // Number of commits (fsyncs) so far, for tests and metrics.
  int64_t commits() const;

  // What the commits so far stored, for metrics: entries / commits is how
  // many appends share an fsync.
  using Totals = StoreTotals;
  Totals totals() const override;

  // OK, or the error of the commit that failed. A failure is final: from
  // then on nothing more is written (what is on disk stays a consistent
  // prefix: an entry after the lost ones could not be replayed), appends
  // are dropped, and every wait returns this error. Only a restart, which
  // recovers what was stored, clears it. Lock-free while OK.
  absl::Status status() const override;

  // Every append up to this sequence number is durable. Lock-free, for
  // callers that only need to know how far behind the disk is.
  uint64_t durable_seq() const override;

 private:
  struct Pending {
    uint64_t seq = 0;
    std::string queue;
    std::string payload;          // serialised Update or QueueSnapshot (or its last part)
    bool snapshot = false;
    bool snapshot_part = false;   // a part of a snapshot before its last (WriteSnapshot)
    uint64_t snapshot_seq = 0;    // for snapshots
    int64_t parts = 0;            // for snapshots: parts written before this row
    uint64_t first_part = 0;      // for snapshots: seq of the first (0: none)
    uint32_t crc = 0;             // stored with the row (see state_db.h)
  };

  struct Statements;  // prepared once, used by the one running commit

  // A thread in WaitDurable, asleep until a commit covers `seq` or it is
  // asked to lead the next commit. Lives on that thread's stack.
  struct Waiter {
    uint64_t seq = 0;
    absl::CondVar wake;
    bool listed = false;  // in waiters_ (guarded by mu_)
  };
  // A caller of OnDurable.
  struct Callback {
    uint64_t seq = 0;
    std::function<void(absl::Status)> done;
  };

  Journal(std::string dir, sqlite3* db, int lock_fd,
          std::unique_ptr<Statements> statements, uint64_t last_seq);
  void StartWriter();
  // SQLite's WAL hook: records the WAL's size after each commit.
  static int WalHook(void* journal, sqlite3* db, const char* name, int pages);
  void AddPendingLocked(Pending p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Commits everything pending (which must not be empty, with no commit
  // running), releasing mu_ across the disk write.
  void CommitPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a commit: wakes (and unlists) the waiters it covered, or all on
  // an error, and the first remaining one when more is pending; then runs
  // the callbacks it covered, releasing mu_ while they run.
  void AfterCommitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WriterLoop();
  absl::Status Commit(const std::vector<Pending>& batch);

  const std::string dir_;
  sqlite3* const db_;  // used only by the running commit (after Open)
  const int lock_fd_;
  std::unique_ptr<Statements> statements_;
  // Used only by the running commit (and Open, the destructor).
  std::unique_ptr<CommitMark> mark_;
  std::string dir_id_;
  int wal_pages_ = 0;
  // Journal entries covered by a snapshot, still to delete: per queue, up
  // to which sequence (oldest snapshot first).
  std::vector<std::pair<std::string, uint64_t>> trims_;
  // Per queue: none of its entries at or below this sequence is left to
  // delete (deleted, or covered by no snapshot yet but below its first
  // entry). A trim scans the journal from here, not from its start: the
  // table has no index on the queue, and the entries that finished queues
  // keep after their last snapshot would otherwise be scanned again by
  // every trim of every other queue (the coordinator slowed down by a
  // third over six 40,000-item queues, bench/results/coordinator_throughput.md).
  absl::flat_hash_map<std::string, uint64_t> trim_floor_;
  std::string last_floor_queue_;  // the last queue Commit made sure has a floor

  mutable absl::Mutex mu_;
  absl::CondVar work_;  // for the writer: appends or callbacks arrived, stopping, commit ended
  // Threads in WaitDurable that wait for a running commit, in arrival
  // order. A commit wakes only those it covered, plus the first of the
  // rest to lead the next commit: no thread wakes just to sleep again.
  std::vector<Waiter*> waiters_ ABSL_GUARDED_BY(mu_);
  // OnDurable's callers not durable yet, and the highest seq registered
  // while a commit ran: the writer thread commits up to it without delay.
  std::vector<Callback> callbacks_ ABSL_GUARDED_BY(mu_);
  uint64_t callback_target_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
  absl::Time oldest_pending_ ABSL_GUARDED_BY(mu_);  // when pending_ became non-empty
  std::vector<Pending> spare_batch_ ABSL_GUARDED_BY(mu_);  // reused capacity
  bool committing_ ABSL_GUARDED_BY(mu_) = false;  // one commit at a time
  bool writer_idle_untimed_ ABSL_GUARDED_BY(mu_) = false;     // see WriterLoop
  bool writer_waits_for_commit_ ABSL_GUARDED_BY(mu_) = false;  // see WriterLoop
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_);
  // Written under mu_ (waiters re-check it under mu_); read lock-free by
  // durable_seq().
  std::atomic<uint64_t> durable_seq_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> failed_{false};  // !error_.ok(), readable without mu_
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Totals totals_ ABSL_GUARDED_BY(mu_);
  std::thread writer_;
};

}  // namespace shardq

#endif  // SHARDQ_STORE_JOURNAL_H_
