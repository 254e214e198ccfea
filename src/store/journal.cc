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
#include "src/log/log.h"
#include "src/store/state_db.h"

namespace shardq {
namespace {

using state_db::Exec;
using state_db::SqliteError;

// Checkpoint the WAL into state.db once it has this many pages (SQLite's
// own default), and then fsync COMMITTED.
constexpr int kCheckpointPages = 1000;

// Runs a prepared statement that returns no rows and resets it for its next
// use. On failure the connection's error code and message (which the reset
// keeps) say why.
bool Step(sqlite3_stmt* stmt) {
  const int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  return rc == SQLITE_DONE;
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The refusal when state.db holds less than COMMITTED says was committed.
absl::Status RolledBack(const std::string& dir, bool has_schema, uint64_t held,
                        const CommitRecord& mark, bool wal_missing) {
  return absl::DataLossError(absl::StrCat(
      "state dir '", dir, "': state.db ",
      has_schema ? absl::StrCat("holds journal entries up to ", held) : "holds no state",
      ", but ", CommitMark::kFileName, " records that entries up to ", mark.seq,
      " were committed: state.db or its WAL state.db-wal was truncated, deleted or "
      "replaced",
      wal_missing && !mark.clean
          ? " (state.db-wal is missing although the coordinator did not stop cleanly)"
          : "",
      ". Refusing to start from what is left; restore the state dir from a backup, or "
      "start over with an empty one"));
}

}  // namespace

// The statements of a commit, prepared once: preparing them per commit
// (parsing the SQL) cost more CPU than the rest of the commit.
struct Journal::Statements {
  ~Statements() {
    for (sqlite3_stmt* stmt : {begin, commit, rollback, insert, snapshot, trim, part, trim_parts}) {
      sqlite3_finalize(stmt);
    }
  }
  bool Prepare(sqlite3* db) {
    auto prepare = [db](const char* sql, sqlite3_stmt** out) {
      return sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, out, nullptr) ==
             SQLITE_OK;
    };
    return prepare("BEGIN IMMEDIATE", &begin) && prepare("COMMIT", &commit) &&
           prepare("ROLLBACK", &rollback) &&
           prepare("INSERT INTO journal (seq, queue, update_pb, crc) VALUES (?, ?, ?, ?)",
                   &insert) &&
           prepare("INSERT OR REPLACE INTO snapshots (queue, seq, snapshot_pb, written_seq, crc,"
                   " parts, first_part) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   &snapshot) &&
           // The primary key range, then the queue: no secondary index needed.
           prepare("DELETE FROM journal WHERE seq IN (SELECT seq FROM journal"
                   " WHERE seq <= ? AND queue = ? LIMIT ?)",
                   &trim) &&
           prepare("INSERT INTO snapshot_parts (seq, queue, part_pb, crc) VALUES (?, ?, ?, ?)",
                   &part) &&
           // Parts of earlier (or unfinished) snapshots of the queue.
           prepare("DELETE FROM snapshot_parts WHERE seq < ? AND queue = ?", &trim_parts);
  }

  sqlite3_stmt* begin = nullptr;
  sqlite3_stmt* commit = nullptr;
  sqlite3_stmt* rollback = nullptr;
  sqlite3_stmt* insert = nullptr;
  sqlite3_stmt* snapshot = nullptr;
  sqlite3_stmt* trim = nullptr;
  sqlite3_stmt* part = nullptr;
  sqlite3_stmt* trim_parts = nullptr;
};

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& dir,
                                                       RecoveredState* recovered) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(
        absl::StrCat("state dir '", dir, "': cannot create: ", std::strerror(errno)));
  }
  const std::string lock_path = dir + "/LOCK";
  const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("state dir '", dir, "': cannot open LOCK: ", std::strerror(errno)));
  }
  if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "state dir '", dir, "' is in use by another coordinator (LOCK is held)"));
  }
  sqlite3* db = nullptr;
  const std::string wal_path = dir + "/state.db-wal";
  const bool wal_missing = !FileExists(wal_path);
  auto fail = [&](absl::Status s) {
    // A refused state dir is left as it was found: no checkpoint of what
    // its WAL still holds, no deleted WAL, and no empty WAL where there was
    // none (SQLite opens one to read).
    if (db != nullptr) sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
    sqlite3_close(db);
    struct stat st;
    if (wal_missing && ::stat(wal_path.c_str(), &st) == 0 && st.st_size == 0) {
      ::unlink(wal_path.c_str());
    }
    ::close(lock_fd);
    return s;
  };
  absl::StatusOr<std::optional<CommitRecord>> mark = CommitMark::Read(dir);
  if (!mark.ok()) return fail(mark.status());
  const std::string path = dir + "/state.db";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    return fail(SqliteError(db, dir, "opening"));
  }
  sqlite3_busy_timeout(db, 5000);
  // The LOCK file already keeps other coordinators out: no file locks per
  // transaction, no shared-memory WAL index.
  if (absl::Status s = Exec(db, dir, "PRAGMA locking_mode=EXCLUSIVE"); !s.ok()) return fail(s);
  if (absl::Status s = state_db::QuickCheck(db, dir); !s.ok()) return fail(s);
  absl::StatusOr<state_db::Identity> identity = state_db::ReadIdentity(db, dir);
  if (!identity.ok()) return fail(identity.status());
  // Decide, before writing anything, whether this state may be used.
  if (identity->has_schema && identity->format > state_db::kFormatVersion) {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "state dir '", dir, "' has format ", identity->format, "; this coordinator reads format ",
        state_db::kFormatVersion)));
  }
  if (mark->has_value() && (*mark)->seq > 0 && !identity->has_schema) {
    return fail(RolledBack(dir, false, 0, **mark, wal_missing));
  }
  if (mark->has_value() && (*mark)->seq > 0 && identity->has_schema && identity->format < 2) {
    return fail(absl::DataLossError(absl::StrCat(
        "state dir '", dir, "': state.db has format ", identity->format,
        " (written before ", CommitMark::kFileName, " existed), but ", CommitMark::kFileName,
        " records that entries up to ", (*mark)->seq,
        " were committed: was state.db replaced by an older one?")));
  }
  if (identity->format >= 2) {  // COMMITTED exists from format 2 on
    if (!mark->has_value()) {
      return fail(absl::DataLossError(absl::StrCat(
          "state dir '", dir, "': ", CommitMark::kFileName, " is missing, but state.db holds "
          "state: without it a truncated state.db or a lost state.db-wal cannot be told from a "
          "complete one. Restore ", CommitMark::kFileName, " (or the whole state dir) from a "
          "backup, or start over with an empty state dir")));
    }
    if ((*mark)->dir_id != identity->dir_id) {
      return fail(absl::DataLossError(absl::StrCat(
          "state dir '", dir, "': state.db belongs to state dir ",
          CommitMark::IdToHex(identity->dir_id), ", but ", CommitMark::kFileName,
          " to state dir ", CommitMark::IdToHex((*mark)->dir_id),
          ": was state.db replaced by another one?")));
    }
  }
  for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL"}) {
    if (absl::Status s = Exec(db, dir, sql); !s.ok()) return fail(s);
  }
  // A new state dir (or an upgraded one) gets COMMITTED first, durably, so
  // that state.db never holds state without it.
  std::unique_ptr<CommitMark> writer;
  const std::string dir_id = mark->has_value() ? (*mark)->dir_id : CommitMark::NewDirId();
  absl::StatusOr<std::unique_ptr<CommitMark>> opened =
      mark->has_value() ? CommitMark::OpenExisting(dir)
                        : CommitMark::Create(dir, CommitRecord{dir_id, 0, false});
  if (!opened.ok()) return fail(opened.status());
  writer = *std::move(opened);
  if (!identity->has_schema) {
    if (absl::Status s = state_db::CreateSchema(db, dir, dir_id); !s.ok()) return fail(s);
  } else if (identity->format == 1) {
    SHARDQ_LOG_WARN(
        "state dir '{}': upgrading format {} to {} (checksums and {}); damage done to it "
        "before now cannot be detected",
        dir, identity->format, state_db::kFormatVersion, CommitMark::kFileName);
    if (absl::Status s = state_db::UpgradeFromFormat1(db, dir, dir_id); !s.ok()) return fail(s);
  }
  if (identity->has_schema && identity->format <= 2) {
    // Format 2 rows are read as they are; from now on snapshots are compact
    // and may come in parts, which a format 2 reader would misread: it
    // refuses the new version instead.
    if (identity->format == 2) {
      SHARDQ_LOG_INFO("state dir '{}': upgrading format 2 to {} (compact queue snapshots)", dir,
                      state_db::kFormatVersion);
    }
    if (absl::Status s = state_db::UpgradeFromFormat2(db, dir); !s.ok()) return fail(s);
  }
  RecoveredState state;
  if (absl::Status s = state_db::ReadState(db, dir, &state); !s.ok()) return fail(s);
  if (mark->has_value() && state.last_seq < (*mark)->seq) {
    return fail(RolledBack(dir, true, state.last_seq, **mark, wal_missing));
  }

  // Not fsynced: if it is lost, COMMITTED stays at an older sequence, which
  // the state still covers.
  if (absl::Status s = writer->Write(CommitRecord{dir_id, state.last_seq, false}); !s.ok()) {
    return fail(s);
  }
  auto statements = std::make_unique<Statements>();
  if (!statements->Prepare(db)) {
    absl::Status s = SqliteError(db, dir, "preparing the commit statements");
    statements.reset();
    return fail(s);
  }
  const uint64_t last_seq = state.last_seq;
  *recovered = std::move(state);
  auto journal = std::unique_ptr<Journal>(
      new Journal(dir, db, lock_fd, std::move(statements), last_seq));
  journal->mark_ = std::move(writer);
  journal->dir_id_ = dir_id;
  // Entries that a crash kept from being deleted after their snapshot.
  for (const RecoveredState::Queue& q : recovered->queues) {
    if (q.snapshot != nullptr) journal->trims_.emplace_back(q.name, q.snapshot_seq);
  }
  // Replaces SQLite's automatic checkpoints: Commit checkpoints itself.
  sqlite3_wal_hook(db, &Journal::WalHook, journal.get());
  journal->StartWriter();
  return journal;
}

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
  writer_ = std::thread([this] { WriterLoop(); });
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
      if (!committing_) {
        // Nobody commits: lead, as WaitDurable does (no hand-off, which
        // costs a lone client a thread wake-up per completion).
        CommitPendingLocked();
      } else if (seq > callback_target_) {
        callback_target_ = seq;  // the writer thread commits next
        work_.Signal();
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
  // number per commit.
  bool trimmed_all = false;
  if (!trims_.empty()) {
    sqlite3_stmt* t = statements_->trim;
    const auto& [queue, upto] = trims_.front();
    sqlite3_bind_int64(t, 1, static_cast<sqlite3_int64>(upto));
    sqlite3_bind_text(t, 2, queue.data(), static_cast<int>(queue.size()), SQLITE_STATIC);
    sqlite3_bind_int(t, 3, kTrimRowsPerCommit);
    if (!Step(t)) {
      absl::Status s = SqliteError(db_, dir_, "deleting entries a snapshot covers");
      Step(statements_->rollback);
      return s;
    }
    trimmed_all = sqlite3_changes(db_) < kTrimRowsPerCommit;
  }
  if (!Step(statements_->commit)) {
    absl::Status s = SqliteError(db_, dir_, "COMMIT");
    Step(statements_->rollback);
    return s;
  }
  if (trimmed_all) trims_.erase(trims_.begin());
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
