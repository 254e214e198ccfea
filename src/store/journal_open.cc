// Journal::Open: taking the state dir, deciding whether its state may be
// used (format, COMMITTED against state.db), upgrading it, and recovering it.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/log/log.h"
#include "src/store/journal.h"
#include "src/store/journal_statements.h"
#include "src/store/state_db.h"

namespace shardq {
namespace {

using state_db::Exec;
using state_db::SqliteError;

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
  // Entries that a crash kept from being deleted after their snapshot, and
  // where each queue's entries start (see trim_floor_).
  for (const RecoveredState::Queue& q : recovered->queues) {
    if (q.snapshot != nullptr) journal->trims_.emplace_back(q.name, q.snapshot_seq);
    journal->trim_floor_[q.name] = q.first_entry_seq > 0 ? q.first_entry_seq - 1 : last_seq;
  }
  // Replaces SQLite's automatic checkpoints: Commit checkpoints itself.
  sqlite3_wal_hook(db, &Journal::WalHook, journal.get());
  journal->StartWriter();
  return journal;
}

}  // namespace shardq
