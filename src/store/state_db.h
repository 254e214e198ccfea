// state.db, the journal's SQLite database: its schema (format 3), the
// upgrades from formats 1 and 2, the checksums of its rows, and reading it
// back. Internal to src/store (Journal is the interface).
//
// Format 3: snapshots and creating updates may hold a queue's plan in
// compact form (journal::QueueSnapshot.format and journal::CreateQueue.format
// 2), which a format 2 reader would take for a queue without items, and a
// large snapshot is stored in parts (Journal::WriteSnapshot):
//   snapshots(..., parts, first_part)   parts written before this row, from
//                                       entry first_part on
//   snapshot_parts(seq, queue, part_pb, crc)
// The snapshot is the concatenation of its parts' part_pb (entries
// first_part <= seq < written_seq of its queue, `parts` of them, each with
// an entry crc) and its own snapshot_pb. Format 2 rows are read as they
// are: upgrading 2 to 3 adds the columns (0: no parts) and the table, and
// the next snapshot of each queue is compact.
// Format 2 (format 1 had no crc, written_seq or dir_id):
//   meta(key, value)              'format' = '2', 'dir_id' = hex identity
//   journal(seq, queue, update_pb, crc)
//   snapshots(queue, seq, snapshot_pb, written_seq, crc)
// `seq` of a snapshot is the last update it includes; `written_seq` is the
// sequence number the snapshot itself was appended with, so that the
// highest seq/written_seq of all rows is always the last committed entry
// (a snapshot deletes the entries it covers, all older than itself).
// Every row's crc is a CRC32C of its queue, payload and sequence numbers:
// SQLite checks its own structure (PRAGMA quick_check), not what a row
// holds, and a flipped byte in a payload often still parses.
#ifndef SHARDQ_STORE_STATE_DB_H_
#define SHARDQ_STORE_STATE_DB_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/store/journal.h"

struct sqlite3;

namespace shardq {
namespace state_db {

inline constexpr int kFormatVersion = 3;

// DATA_LOSS for a corrupt database, PERMISSION_DENIED for an unusable
// file, INTERNAL otherwise; the message names the state dir and `what`.
absl::Status SqliteError(sqlite3* db, const std::string& dir, absl::string_view what);
absl::Status Exec(sqlite3* db, const std::string& dir, const char* sql);

// SQLite's own structural check: DATA_LOSS naming state.db and SQLite's
// first complaint when it fails.
absl::Status QuickCheck(sqlite3* db, const std::string& dir);

// What the database says about itself, read without writing anything.
struct Identity {
  bool has_schema = false;  // false: a new (or emptied) database
  int format = 0;
  std::string dir_id;       // raw bytes; empty in format 1
};
absl::StatusOr<Identity> ReadIdentity(sqlite3* db, const std::string& dir);

// Creates the format 2 schema with identity `dir_id` in one transaction.
absl::Status CreateSchema(sqlite3* db, const std::string& dir, const std::string& dir_id);

// Upgrades a format 1 database to format 2 in one transaction: checksums
// every row as it is now (damage done before cannot be detected) and
// stores `dir_id`. UpgradeFromFormat2 goes on from there.
absl::Status UpgradeFromFormat1(sqlite3* db, const std::string& dir, const std::string& dir_id);
// Upgrades a format 2 database to format kFormatVersion in one transaction
// (the snapshot parts' table and columns; rows are kept as they are).
absl::Status UpgradeFromFormat2(sqlite3* db, const std::string& dir);

// Reads the whole state, checking every row's checksum: DATA_LOSS naming
// state.db and the entry (or the queue's snapshot) when one fails.
absl::Status ReadState(sqlite3* db, const std::string& dir, RecoveredState* out);

// The checksums stored with each row. `partial` covers what is known
// before the sequence number is assigned (computed outside the journal's
// lock); the full one adds the sequence numbers.
uint32_t PartialCrc(absl::string_view queue, absl::string_view payload);
uint32_t EntryCrc(uint32_t partial, uint64_t seq);
uint32_t SnapshotCrc(uint32_t partial, uint64_t seq, uint64_t written_seq);

}  // namespace state_db
}  // namespace shardq

#endif  // SHARDQ_STORE_STATE_DB_H_
