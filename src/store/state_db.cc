#include "src/store/state_db.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "src/io/crc32c.h"

namespace shardq {
namespace state_db {
namespace {

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

std::string ColumnBlob(sqlite3_stmt* stmt, int column) {
  const void* data = sqlite3_column_blob(stmt, column);
  const int size = sqlite3_column_bytes(stmt, column);
  return data == nullptr ? std::string() : std::string(static_cast<const char*>(data), size);
}

uint32_t ExtendU64(uint32_t crc, uint64_t v) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return Crc32cExtend(crc, bytes, sizeof(bytes));
}

uint32_t ColumnCrc(sqlite3_stmt* stmt, int column) {
  return static_cast<uint32_t>(sqlite3_column_int64(stmt, column));
}

// "state dir 'D': state.db: " — every message of a damaged database.
std::string Where(const std::string& dir) {
  return absl::StrCat("state dir '", dir, "': state.db: ");
}

}  // namespace

absl::Status SqliteError(sqlite3* db, const std::string& dir, absl::string_view what) {
  const int code = db != nullptr ? sqlite3_errcode(db) : SQLITE_ERROR;
  std::string message = absl::StrCat("state dir '", dir, "': state.db: ", what, ": ",
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

uint32_t PartialCrc(absl::string_view queue, absl::string_view payload) {
  uint32_t crc = Crc32c(queue);
  const char separator = '\0';
  crc = Crc32cExtend(crc, &separator, 1);
  return Crc32cExtend(crc, payload.data(), payload.size());
}

uint32_t EntryCrc(uint32_t partial, uint64_t seq) { return ExtendU64(partial, seq); }

uint32_t SnapshotCrc(uint32_t partial, uint64_t seq, uint64_t written_seq) {
  return ExtendU64(ExtendU64(partial, seq), written_seq);
}

absl::Status QuickCheck(sqlite3* db, const std::string& dir) {
  Statement check(db, "PRAGMA quick_check");
  if (!check.ok()) return SqliteError(db, dir, "PRAGMA quick_check");
  const int rc = sqlite3_step(check.get());
  if (rc != SQLITE_ROW) return SqliteError(db, dir, "PRAGMA quick_check");
  const std::string result = ColumnBlob(check.get(), 0);
  if (result != "ok") {
    return absl::DataLossError(absl::StrCat(Where(dir), "damaged (PRAGMA quick_check: ",
                                            absl::CHexEscape(result), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Identity> ReadIdentity(sqlite3* db, const std::string& dir) {
  Identity id;
  Statement table(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'");
  if (!table.ok() || sqlite3_step(table.get()) != SQLITE_ROW) {
    return SqliteError(db, dir, "reading the schema of state.db");
  }
  id.has_schema = sqlite3_column_int(table.get(), 0) > 0;
  if (!id.has_schema) return id;
  Statement meta(db, "SELECT key, value FROM meta");
  if (!meta.ok()) return SqliteError(db, dir, "reading state.db's meta table");
  int rc;
  while ((rc = sqlite3_step(meta.get())) == SQLITE_ROW) {
    const std::string key = ColumnBlob(meta.get(), 0);
    const std::string value = ColumnBlob(meta.get(), 1);
    if (key == "format") {
      id.format = std::atoi(value.c_str());
    } else if (key == "dir_id") {
      const bool hex = value.size() == 32 &&
                       value.find_first_not_of("0123456789abcdefABCDEF") == std::string::npos;
      if (hex) id.dir_id = absl::HexStringToBytes(value);
      if (!hex) {
        return absl::DataLossError(absl::StrCat(Where(dir), "the state dir identity '",
                                                absl::CHexEscape(value), "' is damaged"));
      }
    }
  }
  if (rc != SQLITE_DONE) return SqliteError(db, dir, "reading state.db's meta table");
  if (id.format == 0) {
    return absl::DataLossError(absl::StrCat(Where(dir), "the format version is missing"));
  }
  return id;
}

namespace {

constexpr const char* kCreatePartsTable =
    "CREATE TABLE snapshot_parts (seq INTEGER PRIMARY KEY, queue TEXT NOT NULL,"
    " part_pb BLOB NOT NULL, crc INTEGER NOT NULL)";

}  // namespace

absl::Status CreateSchema(sqlite3* db, const std::string& dir, const std::string& dir_id) {
  const std::string insert_meta =
      absl::StrCat("INSERT INTO meta VALUES ('format', '", kFormatVersion, "'), ('dir_id', '",
                   absl::BytesToHexString(dir_id), "')");
  for (const char* sql : {
           "BEGIN IMMEDIATE",
           "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
           "CREATE TABLE journal (seq INTEGER PRIMARY KEY, queue TEXT NOT NULL,"
           " update_pb BLOB NOT NULL, crc INTEGER NOT NULL)",
           "CREATE TABLE snapshots (queue TEXT PRIMARY KEY, seq INTEGER NOT NULL,"
           " snapshot_pb BLOB NOT NULL, written_seq INTEGER NOT NULL, crc INTEGER NOT NULL,"
           " parts INTEGER NOT NULL DEFAULT 0, first_part INTEGER NOT NULL DEFAULT 0)",
           kCreatePartsTable,
           insert_meta.c_str(),
           "COMMIT",
       }) {
    if (absl::Status s = Exec(db, dir, sql); !s.ok()) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status UpgradeFromFormat1(sqlite3* db, const std::string& dir, const std::string& dir_id) {
  auto fail = [&](absl::Status s) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return s;
  };
  for (const char* sql : {
           "BEGIN IMMEDIATE",
           // Nothing reads it (format 1 dirs of an early version have it).
           "DROP INDEX IF EXISTS journal_queue",
           "ALTER TABLE journal ADD COLUMN crc INTEGER NOT NULL DEFAULT 0",
           // Format 1 recovered its last sequence from the snapshots' seq.
           "ALTER TABLE snapshots ADD COLUMN written_seq INTEGER NOT NULL DEFAULT 0",
           "UPDATE snapshots SET written_seq = seq",
           "ALTER TABLE snapshots ADD COLUMN crc INTEGER NOT NULL DEFAULT 0",
       }) {
    if (absl::Status s = Exec(db, dir, sql); !s.ok()) return fail(s);
  }
  {
    Statement rows(db, "SELECT seq, queue, update_pb FROM journal");
    Statement set(db, "UPDATE journal SET crc = ? WHERE seq = ?");
    if (!rows.ok() || !set.ok()) return fail(SqliteError(db, dir, "upgrading the journal"));
    while (sqlite3_step(rows.get()) == SQLITE_ROW) {
      const uint64_t seq = static_cast<uint64_t>(sqlite3_column_int64(rows.get(), 0));
      const uint32_t crc =
          EntryCrc(PartialCrc(ColumnBlob(rows.get(), 1), ColumnBlob(rows.get(), 2)), seq);
      sqlite3_bind_int64(set.get(), 1, crc);
      sqlite3_bind_int64(set.get(), 2, static_cast<sqlite3_int64>(seq));
      if (sqlite3_step(set.get()) != SQLITE_DONE) {
        return fail(SqliteError(db, dir, "upgrading the journal"));
      }
      sqlite3_reset(set.get());
    }
  }
  {
    Statement rows(db, "SELECT queue, seq, snapshot_pb FROM snapshots");
    Statement set(db, "UPDATE snapshots SET crc = ? WHERE queue = ?");
    if (!rows.ok() || !set.ok()) return fail(SqliteError(db, dir, "upgrading the snapshots"));
    while (sqlite3_step(rows.get()) == SQLITE_ROW) {
      const std::string queue = ColumnBlob(rows.get(), 0);
      const uint64_t seq = static_cast<uint64_t>(sqlite3_column_int64(rows.get(), 1));
      const uint32_t crc = SnapshotCrc(PartialCrc(queue, ColumnBlob(rows.get(), 2)), seq, seq);
      sqlite3_bind_int64(set.get(), 1, crc);
      sqlite3_bind_text(set.get(), 2, queue.data(), static_cast<int>(queue.size()),
                        SQLITE_TRANSIENT);
      if (sqlite3_step(set.get()) != SQLITE_DONE) {
        return fail(SqliteError(db, dir, "upgrading the snapshots"));
      }
      sqlite3_reset(set.get());
    }
  }
  // Format 2; Journal::Open goes on with UpgradeFromFormat2.
  const std::string meta =
      absl::StrCat("UPDATE meta SET value = '2' WHERE key = 'format';",
                   "INSERT INTO meta VALUES ('dir_id', '", absl::BytesToHexString(dir_id), "')");
  if (absl::Status s = Exec(db, dir, meta.c_str()); !s.ok()) return fail(s);
  if (absl::Status s = Exec(db, dir, "COMMIT"); !s.ok()) return fail(s);
  return absl::OkStatus();
}

absl::Status UpgradeFromFormat2(sqlite3* db, const std::string& dir) {
  const std::string meta =
      absl::StrCat("UPDATE meta SET value = '", kFormatVersion, "' WHERE key = 'format'");
  for (const char* sql : {
           "BEGIN IMMEDIATE",
           "ALTER TABLE snapshots ADD COLUMN parts INTEGER NOT NULL DEFAULT 0",
           "ALTER TABLE snapshots ADD COLUMN first_part INTEGER NOT NULL DEFAULT 0",
           kCreatePartsTable,
           meta.c_str(),
           "COMMIT",
       }) {
    if (absl::Status s = Exec(db, dir, sql); !s.ok()) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadState(sqlite3* db, const std::string& dir, RecoveredState* out) {
  std::map<std::string, size_t> index;
  auto queue = [&](const std::string& name) -> RecoveredState::Queue& {
    auto [it, inserted] = index.emplace(name, out->queues.size());
    if (inserted) out->queues.push_back(RecoveredState::Queue{name, nullptr, 0, {}});
    return out->queues[it->second];
  };
  std::map<std::string, uint64_t> snapshot_seq;
  Statement snapshots(db,
                      "SELECT queue, seq, snapshot_pb, written_seq, crc, parts, first_part"
                      " FROM snapshots ORDER BY queue");
  if (!snapshots.ok()) return SqliteError(db, dir, "reading snapshots");
  // Parts of snapshots (Journal::WriteSnapshot), and the last one written:
  // it may be the last committed entry.
  Statement parts(db,
                  "SELECT seq, part_pb, crc FROM snapshot_parts"
                  " WHERE queue = ? AND seq >= ? AND seq < ? ORDER BY seq");
  Statement last_part(db, "SELECT max(seq) FROM snapshot_parts");
  if (!parts.ok() || !last_part.ok()) return SqliteError(db, dir, "reading snapshot parts");
  if (sqlite3_step(last_part.get()) == SQLITE_ROW) {
    out->last_seq = std::max(
        out->last_seq, static_cast<uint64_t>(sqlite3_column_int64(last_part.get(), 0)));
  }
  int rc;
  while ((rc = sqlite3_step(snapshots.get())) == SQLITE_ROW) {
    const std::string name = ColumnBlob(snapshots.get(), 0);
    const uint64_t seq = static_cast<uint64_t>(sqlite3_column_int64(snapshots.get(), 1));
    std::string last = ColumnBlob(snapshots.get(), 2);
    const uint64_t written = static_cast<uint64_t>(sqlite3_column_int64(snapshots.get(), 3));
    const int64_t num_parts = sqlite3_column_int64(snapshots.get(), 5);
    const int64_t first_part = sqlite3_column_int64(snapshots.get(), 6);
    const bool last_ok =
        SnapshotCrc(PartialCrc(name, last), seq, written) == ColumnCrc(snapshots.get(), 4);
    std::string payload;
    int64_t found = 0;
    if (num_parts > 0) {
      sqlite3_bind_text(parts.get(), 1, name.data(), static_cast<int>(name.size()),
                        SQLITE_TRANSIENT);
      sqlite3_bind_int64(parts.get(), 2, first_part);
      sqlite3_bind_int64(parts.get(), 3, static_cast<sqlite3_int64>(written));
      int prc;
      while ((prc = sqlite3_step(parts.get())) == SQLITE_ROW) {
        const uint64_t part_seq = static_cast<uint64_t>(sqlite3_column_int64(parts.get(), 0));
        const std::string part = ColumnBlob(parts.get(), 1);
        if (EntryCrc(PartialCrc(name, part), part_seq) != ColumnCrc(parts.get(), 2)) {
          sqlite3_reset(parts.get());
          return absl::DataLossError(absl::StrCat(
              Where(dir), "part ", found, " (entry ", part_seq, ") of the snapshot of queue '",
              absl::CHexEscape(name), "' fails its checksum"));
        }
        payload += part;
        ++found;
      }
      sqlite3_reset(parts.get());
      if (prc != SQLITE_DONE) return SqliteError(db, dir, "reading snapshot parts");
    }
    if (found != num_parts) {
      return absl::DataLossError(absl::StrCat(Where(dir), "the snapshot of queue '",
                                              absl::CHexEscape(name), "' (entry ", written,
                                              ") has ", found, " of its ", num_parts,
                                              " parts"));
    }
    payload += last;
    std::string().swap(last);
    auto snapshot = std::make_unique<journal::QueueSnapshot>();
    if (!last_ok || !snapshot->ParseFromString(payload)) {
      return absl::DataLossError(absl::StrCat(
          Where(dir), "the snapshot of queue '", absl::CHexEscape(name), "' (entry ", written,
          ", through entry ", seq, ") fails its checksum"));
    }
    snapshot_seq[name] = seq;
    out->last_seq = std::max(out->last_seq, written);
    queue(name).snapshot = std::move(snapshot);
    queue(name).snapshot_seq = seq;
  }
  if (rc != SQLITE_DONE) return SqliteError(db, dir, "reading snapshots");
  Statement entries(db, "SELECT seq, queue, update_pb, crc FROM journal ORDER BY seq");
  if (!entries.ok()) return SqliteError(db, dir, "reading the journal");
  while ((rc = sqlite3_step(entries.get())) == SQLITE_ROW) {
    const uint64_t seq = static_cast<uint64_t>(sqlite3_column_int64(entries.get(), 0));
    const std::string name = ColumnBlob(entries.get(), 1);
    const std::string payload = ColumnBlob(entries.get(), 2);
    if (EntryCrc(PartialCrc(name, payload), seq) != ColumnCrc(entries.get(), 3)) {
      return absl::DataLossError(absl::StrCat(Where(dir), "journal entry ", seq, " (queue '",
                                              absl::CHexEscape(name),
                                              "') fails its checksum"));
    }
    out->last_seq = std::max(out->last_seq, seq);
    RecoveredState::Queue& q = queue(name);
    if (q.first_entry_seq == 0) q.first_entry_seq = seq;  // rows come in seq order
    auto it = snapshot_seq.find(name);
    if (it != snapshot_seq.end() && seq <= it->second) continue;
    journal::Update update;
    if (!update.ParseFromString(payload)) {
      return absl::DataLossError(absl::StrCat(Where(dir), "journal entry ", seq, " (queue '",
                                              absl::CHexEscape(name), "') is corrupt"));
    }
    q.updates.push_back(std::move(update));
  }
  if (rc != SQLITE_DONE) return SqliteError(db, dir, "reading the journal");
  return absl::OkStatus();
}

}  // namespace state_db
}  // namespace shardq
