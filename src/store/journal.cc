#include "src/store/journal.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardq {
namespace {

constexpr int kFormatVersion = 1;

absl::Status SqliteError(sqlite3* db, const std::string& dir, absl::string_view what) {
  const int code = db != nullptr ? sqlite3_errcode(db) : SQLITE_ERROR;
  std::string message = absl::StrCat("state dir '", dir, "': ", what, ": ",
                                     db != nullptr ? sqlite3_errmsg(db) : "out of memory");
  if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB) return absl::DataLossError(message);
  if (code == SQLITE_CANTOPEN || code == SQLITE_PERM || code == SQLITE_READONLY) {
    return absl::PermissionDeniedError(message);
  }
  return absl::InternalError(message);
}

absl::Status Exec(sqlite3* db, const std::string& dir, const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    absl::Status s = SqliteError(db, dir, sql);
    sqlite3_free(error);
    return s;
  }
  return absl::OkStatus();
}

// A prepared statement that finalises itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) stmt_ = nullptr;
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  sqlite3_stmt* get() const { return stmt_; }
  bool ok() const { return stmt_ != nullptr; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// Runs a prepared statement that returns no rows and resets it for its next
// use. On failure the connection's error code and message (which the reset
// keeps) say why.
bool Step(sqlite3_stmt* stmt) {
  const int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  return rc == SQLITE_DONE;
}

std::string ColumnBlob(sqlite3_stmt* stmt, int column) {
  const void* data = sqlite3_column_blob(stmt, column);
  const int size = sqlite3_column_bytes(stmt, column);
  return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
}

absl::Status CreateSchema(sqlite3* db, const std::string& dir) {
  for (const char* sql : {
           // The LOCK file already keeps other coordinators out: no file
           // locks per transaction, no shared-memory WAL index.
           "PRAGMA locking_mode=EXCLUSIVE",
           "PRAGMA journal_mode=WAL",
           "PRAGMA synchronous=FULL",
           "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
           "CREATE TABLE IF NOT EXISTS journal (seq INTEGER PRIMARY KEY, queue TEXT NOT NULL,"
           " update_pb BLOB NOT NULL)",
           // Format 1 dirs written before this may hold a secondary index
           // journal(queue, seq). Nothing reads it (the snapshot trim scans
           // the primary key range seq <= ?) and every append paid for it.
           "DROP INDEX IF EXISTS journal_queue",
           "CREATE TABLE IF NOT EXISTS snapshots (queue TEXT PRIMARY KEY,"
           " seq INTEGER NOT NULL, snapshot_pb BLOB NOT NULL)",
       }) {
    if (absl::Status s = Exec(db, dir, sql); !s.ok()) return s;
  }
  Statement version(db, "SELECT value FROM meta WHERE key = 'format'");
  if (!version.ok()) return SqliteError(db, dir, "reading the format version");
  if (sqlite3_step(version.get()) == SQLITE_ROW) {
    const int found = sqlite3_column_int(version.get(), 0);
    if (found != kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "state dir '", dir, "' has format ", found, "; this coordinator reads format ",
          kFormatVersion));
    }
    return absl::OkStatus();
  }
  return Exec(db, dir, absl::StrCat("INSERT INTO meta VALUES ('format', '", kFormatVersion,
                                    "')").c_str());
}

absl::Status ReadState(sqlite3* db, const std::string& dir, RecoveredState* out) {
  if (absl::Status s = Exec(db, dir, "PRAGMA quick_check"); !s.ok()) return s;
  std::map<std::string, size_t> index;
  auto queue = [&](const std::string& name) -> RecoveredState::Queue& {
    auto [it, inserted] = index.emplace(name, out->queues.size());
    if (inserted) out->queues.push_back(RecoveredState::Queue{name, nullptr, {}});
    return out->queues[it->second];
  };
  std::map<std::string, uint64_t> snapshot_seq;
  Statement snapshots(db, "SELECT queue, seq, snapshot_pb FROM snapshots ORDER BY queue");
  if (!snapshots.ok()) return SqliteError(db, dir, "reading snapshots");
  int rc;
  while ((rc = sqlite3_step(snapshots.get())) == SQLITE_ROW) {
    const std::string name = reinterpret_cast<const char*>(sqlite3_column_text(snapshots.get(), 0));
    auto snapshot = std::make_unique<journal::QueueSnapshot>();
    if (!snapshot->ParseFromString(ColumnBlob(snapshots.get(), 2))) {
      return absl::DataLossError(absl::StrCat("state dir '", dir, "': the snapshot of queue '",
                                              name, "' is corrupt"));
    }
    snapshot_seq[name] = static_cast<uint64_t>(sqlite3_column_int64(snapshots.get(), 1));
    queue(name).snapshot = std::move(snapshot);
  }
  if (rc != SQLITE_DONE) return SqliteError(db, dir, "reading snapshots");
  Statement entries(db, "SELECT seq, queue, update_pb FROM journal ORDER BY seq");
  if (!entries.ok()) return SqliteError(db, dir, "reading the journal");
  while ((rc = sqlite3_step(entries.get())) == SQLITE_ROW) {
    const uint64_t seq = static_cast<uint64_t>(sqlite3_column_int64(entries.get(), 0));
    const std::string name = reinterpret_cast<const char*>(sqlite3_column_text(entries.get(), 1));
    out->last_seq = std::max(out->last_seq, seq);
    auto it = snapshot_seq.find(name);
    if (it != snapshot_seq.end() && seq <= it->second) continue;
    journal::Update update;
    if (!update.ParseFromString(ColumnBlob(entries.get(), 2))) {
      return absl::DataLossError(absl::StrCat("state dir '", dir, "': journal entry ", seq,
                                              " (queue '", name, "') is corrupt"));
    }
    queue(name).updates.push_back(std::move(update));
  }
  if (rc != SQLITE_DONE) return SqliteError(db, dir, "reading the journal");
  for (const auto& [name, seq] : snapshot_seq) out->last_seq = std::max(out->last_seq, seq);
  return absl::OkStatus();
}

}  // namespace

// The statements of a commit, prepared once: preparing them per commit
// (parsing the SQL) cost more CPU than the rest of the commit.
struct Journal::Statements {
  ~Statements() {
    for (sqlite3_stmt* stmt : {begin, commit, rollback, insert, snapshot, trim}) {
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
           prepare("INSERT INTO journal (seq, queue, update_pb) VALUES (?, ?, ?)", &insert) &&
           prepare("INSERT OR REPLACE INTO snapshots (queue, seq, snapshot_pb) VALUES (?, ?, ?)",
                   &snapshot) &&
           // The primary key range, then the queue: no secondary index needed.
           prepare("DELETE FROM journal WHERE seq <= ? AND queue = ?", &trim);
  }

  sqlite3_stmt* begin = nullptr;
  sqlite3_stmt* commit = nullptr;
  sqlite3_stmt* rollback = nullptr;
  sqlite3_stmt* insert = nullptr;
  sqlite3_stmt* snapshot = nullptr;
  sqlite3_stmt* trim = nullptr;
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
  const std::string path = dir + "/state.db";
  auto fail = [&](absl::Status s) {
    sqlite3_close(db);
    ::close(lock_fd);
    return s;
  };
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    return fail(SqliteError(db, dir, "opening state.db"));
  }
  sqlite3_busy_timeout(db, 5000);
  if (absl::Status s = CreateSchema(db, dir); !s.ok()) return fail(s);
  RecoveredState state;
  if (absl::Status s = ReadState(db, dir, &state); !s.ok()) return fail(s);
  auto statements = std::make_unique<Statements>();
  if (!statements->Prepare(db)) {
    absl::Status s = SqliteError(db, dir, "preparing the commit statements");
    statements.reset();
    return fail(s);
  }
  const uint64_t last_seq = state.last_seq;
  *recovered = std::move(state);
  return std::unique_ptr<Journal>(
      new Journal(dir, db, lock_fd, std::move(statements), last_seq));
}

Journal::Journal(std::string dir, sqlite3* db, int lock_fd,
                 std::unique_ptr<Statements> statements, uint64_t last_seq)
    : dir_(std::move(dir)),
      db_(db),
      lock_fd_(lock_fd),
      statements_(std::move(statements)),
      next_seq_(last_seq + 1),
      durable_seq_(last_seq) {
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
  sqlite3_close(db_);
  ::close(lock_fd_);
}

uint64_t Journal::Append(const std::string& queue, const journal::Update& update) {
  Pending p;
  p.queue = queue;
  update.SerializeToString(&p.payload);
  absl::MutexLock lock(&mu_);
  p.seq = next_seq_++;
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
  absl::MutexLock lock(&mu_);
  p.seq = next_seq_++;
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
    if (!p.snapshot) {
      sqlite3_stmt* st = statements_->insert;
      sqlite3_bind_int64(st, 1, static_cast<sqlite3_int64>(p.seq));
      sqlite3_bind_text(st, 2, p.queue.data(), static_cast<int>(p.queue.size()), SQLITE_STATIC);
      sqlite3_bind_blob(st, 3, p.payload.data(), static_cast<int>(p.payload.size()), SQLITE_STATIC);
      ok = Step(st);
    } else {
      sqlite3_stmt* st = statements_->snapshot;
      sqlite3_bind_text(st, 1, p.queue.data(), static_cast<int>(p.queue.size()), SQLITE_STATIC);
      sqlite3_bind_int64(st, 2, static_cast<sqlite3_int64>(p.snapshot_seq));
      sqlite3_bind_blob(st, 3, p.payload.data(), static_cast<int>(p.payload.size()), SQLITE_STATIC);
      ok = Step(st);
      if (ok) {
        sqlite3_stmt* t = statements_->trim;
        sqlite3_bind_int64(t, 1, static_cast<sqlite3_int64>(p.snapshot_seq));
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
  if (!Step(statements_->commit)) {
    absl::Status s = SqliteError(db_, dir_, "COMMIT");
    Step(statements_->rollback);
    return s;
  }
  return absl::OkStatus();
}

}  // namespace shardq
