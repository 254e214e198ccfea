// Private to the journal (journal.cc, journal_open.cc): the prepared
// statements of a commit, and running one of them.
#ifndef SHARDQ_SRC_STORE_JOURNAL_STATEMENTS_H_
#define SHARDQ_SRC_STORE_JOURNAL_STATEMENTS_H_

#include <sqlite3.h>

#include "src/store/journal.h"

namespace shardq {

// Runs a prepared statement that returns no rows and resets it for its next
// use. On failure the connection's error code and message (which the reset
// keeps) say why.
namespace journal_internal {
inline bool Step(sqlite3_stmt* stmt) {
  const int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  return rc == SQLITE_DONE;
}
}  // namespace journal_internal

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
           // The range starts where the queue's last delete ended (see
           // Journal::trim_floor_), and the seqs deleted come back, so that
           // the next one starts after them: no row is scanned twice.
           prepare("DELETE FROM journal WHERE seq IN (SELECT seq FROM journal"
                   " WHERE seq > ? AND seq <= ? AND queue = ? ORDER BY seq LIMIT ?)"
                   " RETURNING seq",
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

}  // namespace shardq

#endif  // SHARDQ_SRC_STORE_JOURNAL_STATEMENTS_H_
