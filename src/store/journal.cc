#include "src/store/journal.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/core/process.h"
#include "src/log/log.h"
#include "src/store/journal_statements.h"
#include "src/store/state_db.h"

namespace shardq {
namespace {

using journal_internal::Step;
using state_db::SqliteError;

// Checkpoint the WAL into state.db once it has this many pages (SQLite's
// own default), and then fsync COMMITTED.
constexpr int kCheckpointPages = 1000;

}  // namespace

int Journal::WalHook(void* journal, sqlite3* /*db*/, const char* /*name*/, int pages) {
  static_cast<Journal*>(journal)->wal_pages_ = pages;
  return SQLITE_OK;
}

Journal::Journal(std::string dir, sqlite3* db, int lock_fd,
                 std::unique_ptr<Statements> statements, uint64_t last_seq)
    : dir_(std::move(dir)),
      db_(db),
      lock_fd_(lock_fd),
      statements_(std::move(statements)),
      next_seq_(last_seq + 1),
      durable_seq_(last_seq) {}

void Journal::StartWriter() {
  writer_ = std::thread([this] {
    NameThisThread("journal");
    WriterLoop();
  });
}

Journal::~Journal() {
  Flush().IgnoreError();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.SignalAll();
  }
  writer_.join();
  statements_.reset();  // finalised before the connection closes
  // Closing checkpoints the WAL into state.db and deletes it; COMMITTED
  // then says so, durably.
  if (sqlite3_close(db_) == SQLITE_OK) {
    if (mark_->Write(CommitRecord{dir_id_, durable_seq_.load(), true}).ok()) {
      mark_->Sync().IgnoreError();
    }
  }
  ::close(lock_fd_);
}

uint64_t Journal::Append(const std::string& queue, const journal::Update& update) {
  Pending p;
  p.queue = queue;
  update.SerializeToString(&p.payload);
  const uint32_t partial = state_db::PartialCrc(p.queue, p.payload);
  absl::MutexLock lock(&mu_);
  p.seq = next_seq_++;
  p.crc = state_db::EntryCrc(partial, p.seq);
  const uint64_t seq = p.seq;
  AddPendingLocked(std::move(p));
  return seq;
}

size_t Journal::AppendSnapshot(const std::string& queue, uint64_t seq,
                               const journal::QueueSnapshot& snapshot) {
  Pending p;
  p.queue = queue;
  p.snapshot = true;
  p.snapshot_seq = seq;
  snapshot.SerializeToString(&p.payload);
  const size_t bytes = p.payload.size();
  const uint32_t partial = state_db::PartialCrc(p.queue, p.payload);
  absl::MutexLock lock(&mu_);
  p.seq = next_seq_++;
  p.crc = state_db::SnapshotCrc(partial, p.snapshot_seq, p.seq);
  AddPendingLocked(std::move(p));
  return bytes;
}

size_t Journal::WriteSnapshot(const std::string& queue, uint64_t seq,
                              const journal::QueueSnapshot& snapshot) {
  std::string payload;
  snapshot.SerializeToString(&payload);
  const size_t bytes = payload.size();
  int64_t parts = 0;
  uint64_t first_part = 0;
  size_t offset = 0;
  for (; bytes - offset > kSnapshotPartBytes; offset += kSnapshotPartBytes) {
    Pending p;
    p.queue = queue;
    p.snapshot_part = true;
    p.payload = payload.substr(offset, kSnapshotPartBytes);
    const uint32_t partial = state_db::PartialCrc(p.queue, p.payload);
    uint64_t part_seq;
    {
      absl::MutexLock lock(&mu_);
      p.seq = part_seq = next_seq_++;
      p.crc = state_db::EntryCrc(partial, p.seq);
      AddPendingLocked(std::move(p));
    }
    if (first_part == 0) first_part = part_seq;
    ++parts;
    // One part per commit: the next is queued only once this one is stored.
    if (!WaitDurable(part_seq).ok()) return bytes;  // nothing is written any more
  }
  Pending p;
  p.queue = queue;
  p.snapshot = true;
  p.snapshot_seq = seq;
  p.parts = parts;
  p.first_part = first_part;
  p.payload = payload.substr(offset);
  std::string().swap(payload);
  const uint32_t partial = state_db::PartialCrc(p.queue, p.payload);
  absl::MutexLock lock(&mu_);
  p.seq = next_seq_++;
  p.crc = state_db::SnapshotCrc(partial, p.snapshot_seq, p.seq);
  AddPendingLocked(std::move(p));
  return bytes;
}

void Journal::AddPendingLocked(Pending p) {
  if (!error_.ok()) return;  // nothing is written after a failed commit
  // The first append starts the clock of kMaxCommitDelay. Only a writer
  // idling without a deadline needs waking to learn of it; otherwise its
  // own deadline ends its wait (and waiters commit for themselves).
  if (pending_.empty()) {
    oldest_pending_ = absl::Now();
    if (writer_idle_untimed_) work_.Signal();
  }
  pending_.push_back(std::move(p));
  if (pending_.size() == kMaxPendingEntries) work_.Signal();
}

absl::Status Journal::WaitDurable(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  // Leader group commit (as leveldb's DBImpl::Write): a waiter that finds
  // no commit running commits everything pending itself, with no hand-off
  // to another thread; waiters arriving meanwhile wait for that commit,
  // which wakes those it covered and one of the others to lead the next.
  // CondVars, not an absl::Condition, so that TSan sees every wait (see
  // src/pipeline/tsan_absl_mutex_shim.cc).
  Waiter waiter;
  waiter.seq = seq;
  while (durable_seq_.load(std::memory_order_relaxed) < seq && error_.ok()) {
    if (committing_) {
      if (!waiter.listed) {
        waiters_.push_back(&waiter);
        waiter.listed = true;
      }
      waiter.wake.Wait(&mu_);
    } else if (pending_.empty()) {
      break;  // `seq` was never appended: nothing to wait for
    } else {
      CommitPendingLocked();
    }
  }
  if (waiter.listed) {  // woken spuriously, or found the answer unasked
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &waiter));
    waiter.listed = false;
    // It may have been the one asked to lead: pass that on.
    if (!committing_ && !pending_.empty() && !waiters_.empty()) {
      waiters_.front()->wake.Signal();
    }
  }
  return error_;
}

void Journal::OnDurable(uint64_t seq, std::function<void(absl::Status)> done) {
  absl::Status now;
  {
    absl::MutexLock lock(&mu_);
    // Not durable yet, and appended (pending or being committed): answer
    // later. Otherwise (durable, an error, or `seq` never appended, as in
    // WaitDurable) answer now.
    if (durable_seq_.load(std::memory_order_relaxed) < seq && error_.ok() &&
        (committing_ || !pending_.empty())) {
      callbacks_.push_back(Callback{seq, std::move(done)});
      // The writer thread commits for it, never the caller: in the
      // coordinator the caller is a thread that serves many streams (a
      // session queue's, or one of gRPC's callback threads), and parked in
      // an fsync it serves none of them (measured: the durable session row
      // went from 0.40x to 0.53x Redis at 32 clients,
      // bench/results/coordinator_throughput.md). A running commit wakes the
      // writer when it ends (AfterCommitLocked).
      if (seq > callback_target_) {
        callback_target_ = seq;
        if (!committing_) work_.Signal();
      }
      return;
    }
    now = error_;
  }
  done(now);
}

void Journal::CommitPendingLocked() {
  committing_ = true;
  std::vector<Pending> batch = std::move(pending_);
  pending_ = std::move(spare_batch_);  // empty, with the capacity of a past batch
  pending_.clear();
  const uint64_t last = batch.back().seq;
  mu_.Unlock();  // no lock held across the disk write
  absl::Status s = Commit(batch);
  Totals added;
  added.commits = 1;
  added.entries = static_cast<int64_t>(batch.size());
  for (const Pending& p : batch) {
    added.bytes += static_cast<int64_t>(p.payload.size());
    added.snapshots += p.snapshot ? 1 : 0;
  }
  batch.clear();
  mu_.Lock();
  if (!s.ok() && error_.ok()) {
    error_ = s;
    failed_.store(true, std::memory_order_release);
    pending_.clear();  // appended after the failed batch: never written
  }
  if (s.ok()) {
    durable_seq_.store(last, std::memory_order_release);
    totals_.commits += added.commits;
    totals_.entries += added.entries;
    totals_.bytes += added.bytes;
    totals_.snapshots += added.snapshots;
  }
  spare_batch_ = std::move(batch);
  committing_ = false;
  AfterCommitLocked();
}

void Journal::AfterCommitLocked() {
  const uint64_t durable = durable_seq_.load(std::memory_order_relaxed);
  size_t kept = 0;
  for (Waiter* w : waiters_) {
    if (w->seq <= durable || !error_.ok()) {
      w->listed = false;
      w->wake.Signal();
    } else {
      waiters_[kept++] = w;
    }
  }
  waiters_.resize(kept);
  if (!pending_.empty() && !waiters_.empty()) waiters_.front()->wake.Signal();
  if (writer_waits_for_commit_ || callback_target_ > durable) work_.Signal();
  if (callbacks_.empty()) return;
  std::vector<Callback> due;
  kept = 0;
  for (Callback& c : callbacks_) {
    if (c.seq <= durable || !error_.ok()) {
      due.push_back(std::move(c));
    } else {
      callbacks_[kept++] = std::move(c);
    }
  }
  callbacks_.resize(kept);
  if (due.empty()) return;
  const absl::Status status = error_;
  mu_.Unlock();
  for (Callback& c : due) c.done(status);
  mu_.Lock();
}

uint64_t Journal::durable_seq() const { return durable_seq_.load(std::memory_order_acquire); }

absl::Status Journal::Flush() {
  uint64_t last;
  {
    absl::MutexLock lock(&mu_);
    last = next_seq_ - 1;
  }
  return WaitDurable(last);
}

absl::Status Journal::status() const {
  if (!failed_.load(std::memory_order_acquire)) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return error_;
}

int64_t Journal::commits() const {
  absl::MutexLock lock(&mu_);
  return totals_.commits;
}

Journal::Totals Journal::totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

void Journal::WriterLoop() {
  // Commits what no thread waits for (waiters commit for themselves, see
  // WaitDurable): at once for OnDurable's callers, else kMaxCommitDelay
  // after the oldest pending append, at kMaxPendingEntries, or when
  // stopping. Idle, it first waits with a
  // timeout, so that the usual next append (a grant between a client's
  // completions) needs no wake-up; after kMaxCommitDelay of nothing it
  // waits without one, and the next append wakes it.
  absl::MutexLock lock(&mu_);
  bool idle_timed_out = false;
  while (true) {
    if (committing_) {
      writer_waits_for_commit_ = true;
      work_.Wait(&mu_);
      writer_waits_for_commit_ = false;
    } else if (pending_.empty()) {  // always, once a commit has failed
      if (stopping_) return;
      if (!idle_timed_out) {
        idle_timed_out = work_.WaitWithTimeout(&mu_, kMaxCommitDelay);
      } else {
        writer_idle_untimed_ = true;
        work_.Wait(&mu_);
        writer_idle_untimed_ = false;
      }
    } else if (stopping_ || pending_.size() >= kMaxPendingEntries ||
               (callback_target_ > durable_seq_.load(std::memory_order_relaxed) &&
                error_.ok()) ||
               absl::Now() >= oldest_pending_ + kMaxCommitDelay) {
      CommitPendingLocked();
    } else {
      idle_timed_out = false;
      work_.WaitWithDeadline(&mu_, oldest_pending_ + kMaxCommitDelay);
    }
  }
}

absl::Status Journal::Commit(const std::vector<Pending>& batch) {
  if (!Step(statements_->begin)) return SqliteError(db_, dir_, "BEGIN IMMEDIATE");
  for (const Pending& p : batch) {
    bool ok = true;
    if (!p.snapshot && !p.snapshot_part && p.queue != last_floor_queue_) {
      // A queue's first entry in this process: nothing of it lies below
      // (a queue recovered at Open got its floor there).
      trim_floor_.try_emplace(p.queue, p.seq - 1);
      last_floor_queue_ = p.queue;
    }
    if (p.snapshot_part) {
      sqlite3_stmt* st = statements_->part;
      sqlite3_bind_int64(st, 1, static_cast<sqlite3_int64>(p.seq));
      sqlite3_bind_text(st, 2, p.queue.data(), static_cast<int>(p.queue.size()), SQLITE_STATIC);
      sqlite3_bind_blob(st, 3, p.payload.data(), static_cast<int>(p.payload.size()), SQLITE_STATIC);
      sqlite3_bind_int64(st, 4, p.crc);
      ok = Step(st);
    } else if (!p.snapshot) {
      sqlite3_stmt* st = statements_->insert;
      sqlite3_bind_int64(st, 1, static_cast<sqlite3_int64>(p.seq));
      sqlite3_bind_text(st, 2, p.queue.data(), static_cast<int>(p.queue.size()), SQLITE_STATIC);
      sqlite3_bind_blob(st, 3, p.payload.data(), static_cast<int>(p.payload.size()), SQLITE_STATIC);
      sqlite3_bind_int64(st, 4, p.crc);
      ok = Step(st);
    } else {
      sqlite3_stmt* st = statements_->snapshot;
      sqlite3_bind_text(st, 1, p.queue.data(), static_cast<int>(p.queue.size()), SQLITE_STATIC);
      sqlite3_bind_int64(st, 2, static_cast<sqlite3_int64>(p.snapshot_seq));
      sqlite3_bind_blob(st, 3, p.payload.data(), static_cast<int>(p.payload.size()), SQLITE_STATIC);
      sqlite3_bind_int64(st, 4, static_cast<sqlite3_int64>(p.seq));
      sqlite3_bind_int64(st, 5, p.crc);
      sqlite3_bind_int64(st, 6, p.parts);
      sqlite3_bind_int64(st, 7, static_cast<sqlite3_int64>(p.first_part));
      ok = Step(st);
      if (ok) {
        sqlite3_stmt* t = statements_->trim_parts;
        const uint64_t keep_from = p.parts > 0 ? p.first_part : p.seq;
        sqlite3_bind_int64(t, 1, static_cast<sqlite3_int64>(keep_from));
        sqlite3_bind_text(t, 2, p.queue.data(), static_cast<int>(p.queue.size()), SQLITE_STATIC);
        ok = Step(t);
      }
    }
    if (!ok) {
      absl::Status s = SqliteError(db_, dir_, absl::StrCat("writing entry ", p.seq));
      Step(statements_->rollback);
      return s;
    }
  }
  // Deletes journal entries that an earlier snapshot covers, a bounded
  // number per commit, from where the queue's last delete ended.
  bool trimmed_all = false;
  uint64_t trimmed_to = 0;  // the queue's new floor once this commit is in
  if (!trims_.empty()) {
    sqlite3_stmt* t = statements_->trim;
    const auto& [queue, upto] = trims_.front();
    const uint64_t floor = trim_floor_[queue];
    sqlite3_bind_int64(t, 1, static_cast<sqlite3_int64>(floor));
    sqlite3_bind_int64(t, 2, static_cast<sqlite3_int64>(upto));
    sqlite3_bind_text(t, 3, queue.data(), static_cast<int>(queue.size()), SQLITE_STATIC);
    sqlite3_bind_int(t, 4, kTrimRowsPerCommit);
    int deleted = 0;
    trimmed_to = floor;
    int rc;
    while ((rc = sqlite3_step(t)) == SQLITE_ROW) {
      ++deleted;
      trimmed_to = std::max(trimmed_to, static_cast<uint64_t>(sqlite3_column_int64(t, 0)));
    }
    sqlite3_reset(t);
    if (rc != SQLITE_DONE) {
      absl::Status s = SqliteError(db_, dir_, "deleting entries a snapshot covers");
      Step(statements_->rollback);
      return s;
    }
    trimmed_all = deleted < kTrimRowsPerCommit;
    if (trimmed_all) trimmed_to = std::max(trimmed_to, upto);  // never lowered
  }
  if (!Step(statements_->commit)) {
    absl::Status s = SqliteError(db_, dir_, "COMMIT");
    Step(statements_->rollback);
    return s;
  }
  if (!trims_.empty()) {
    trim_floor_[trims_.front().first] = trimmed_to;
    if (trimmed_all) trims_.erase(trims_.begin());
  }
  for (const Pending& p : batch) {
    if (!p.snapshot) continue;
    auto it = std::find_if(trims_.begin(), trims_.end(),
                           [&](const auto& t) { return t.first == p.queue; });
    if (it != trims_.end()) {
      it->second = p.snapshot_seq;
    } else {
      trims_.emplace_back(p.queue, p.snapshot_seq);
    }
  }
  // Only after the commit's fsync: COMMITTED is never ahead of state.db.
  if (absl::Status s = mark_->Write(CommitRecord{dir_id_, batch.back().seq, false}); !s.ok()) {
    return s;
  }
  if (wal_pages_ >= kCheckpointPages) {
    wal_pages_ = 0;
    // As SQLite's automatic checkpoint would (an error leaves the WAL to
    // the next one); then COMMITTED is made as durable as state.db.
    sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    if (absl::Status s = mark_->Sync(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace shardq
