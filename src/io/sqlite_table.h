// SQLite tables as works: "sqlite:PATH?table=NAME". Planning counts rows;
// readers map row numbers to rowids with a sparse rank index and fetch a
// slice's rows by an indexed range scan over rowid (see
// include/shardq/table_reader.h for the scheme and its cost).
#ifndef SHARDQ_IO_SQLITE_TABLE_H_
#define SHARDQ_IO_SQLITE_TABLE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shardq/slice.h"
#include "shardq/table_reader.h"

struct sqlite3;
struct sqlite3_stmt;

namespace shardq {

inline constexpr absl::string_view kSqliteScheme = "sqlite:";

// True when `item` names a table ("sqlite:...").
bool IsTableItem(absl::string_view item);

struct TableRef {
  std::string db_path;
  std::string table;
};

// The table a parsed item names: work "sqlite:PATH", parameter table=NAME.
// INVALID_ARGUMENT (naming the item) without a path or a table, or with
// parameters other than table/start/end.
absl::StatusOr<TableRef> ParseTableRef(const SliceSpec& spec);

// `name` as an SQL identifier: in double quotes, inner quotes doubled.
std::string QuoteIdentifier(absl::string_view name);

// Rows counted by planning (a count(*) of the table). Errors as
// SqliteTable::Open.
absl::StatusOr<int64_t> CountTableRows(const TableRef& ref);

namespace table_internal {

// Rows per checkpoint of the rank index.
inline constexpr int64_t kRankCheckpointRows = 1024;

// One read-only connection to a database and one of its tables, checked to
// exist and to have rowids, with the table's rank index. Not thread-safe.
class SqliteTable {
 public:
  // NOT_FOUND when the database file is missing (naming the path) or has no
  // such table (naming both); INVALID_ARGUMENT for a view, a WITHOUT ROWID
  // table, a file that is not a database; DATA_LOSS for a corrupt one.
  static absl::StatusOr<std::unique_ptr<SqliteTable>> Open(
      const TableRef& ref);
  ~SqliteTable();
  SqliteTable(const SqliteTable&) = delete;
  SqliteTable& operator=(const SqliteTable&) = delete;

  absl::StatusOr<int64_t> CountRows();

  // The rowid of the row of 0-based `rank` in rowid order; nullopt when
  // rank equals the number of rows; FAILED_PRECONDITION (naming the table
  // and its row count) when rank is larger.
  absl::StatusOr<std::optional<int64_t>> RowidAtRank(int64_t rank);

  // Up to `limit` rows with lo <= rowid <= hi, in rowid order, appended to
  // *rows (keys left empty). Returns how many were appended.
  absl::StatusOr<int64_t> FetchRows(int64_t lo, int64_t hi, int64_t limit,
                                    std::deque<Row>* rows);

  // The statements behind FetchRows and the rank index, for tests that
  // check their query plans.
  const std::string& fetch_sql() const { return fetch_sql_; }
  const std::string& rowid_sql() const { return rowid_sql_; }
  sqlite3* db() const { return db_; }

  const std::shared_ptr<const std::vector<std::string>>& column_names() const {
    return column_names_;
  }
  const TableRef& ref() const { return ref_; }
  // Checkpoints held by the rank index (for tests).
  int64_t checkpoints() const {
    return static_cast<int64_t>(checkpoints_.size());
  }

 private:
  SqliteTable(TableRef ref, sqlite3* db);
  absl::Status Init();
  // An error for SQLite result `rc`, naming the database and table.
  absl::Status SqliteError(int rc, absl::string_view doing) const;
  // Drops the rank index when the database changed since it was built.
  absl::Status CheckDataVersion();
  // Extends the rank index until it holds the checkpoint of row
  // `block * kRankCheckpointRows`, or knows the table has fewer rows.
  absl::Status ExtendIndex(int64_t block);
  // Up to `limit` rowids >= lo, in order, appended to *out.
  absl::Status RowidsFrom(int64_t lo, int64_t limit,
                          std::vector<int64_t>* out);

  const TableRef ref_;
  sqlite3* const db_;
  sqlite3_stmt* fetch_ = nullptr;   // rowid, * for lo <= rowid <= hi
  sqlite3_stmt* rowids_ = nullptr;  // rowids >= lo
  std::string fetch_sql_;
  std::string rowid_sql_;
  std::shared_ptr<const std::vector<std::string>> column_names_;

  // Rank index: checkpoints_[b] is the rowid of row b * kRankCheckpointRows.
  std::vector<int64_t> checkpoints_;
  int64_t indexed_rows_ = 0;    // rows [0, indexed_rows_) have been scanned
  int64_t last_rowid_ = 0;      // rowid of row indexed_rows_ - 1
  bool index_complete_ = false;  // indexed_rows_ is the row count
  int64_t data_version_ = -1;
};

// The rows of one item: row numbers [start, end) of a table, or all of it.
// Not thread-safe; the table must outlive the reader.
class TableSliceReader {
 public:
  // Maps the range to rowids (see RowidAtRank). end unset: to the end.
  static absl::StatusOr<std::unique_ptr<TableSliceReader>> Open(
      SqliteTable* table, std::optional<int64_t> start,
      std::optional<int64_t> end, int64_t batch_rows);

  // Reads the next row into *row; false after the last row of the range.
  absl::StatusOr<bool> Next(Row* row);

 private:
  TableSliceReader(SqliteTable* table, int64_t lo, int64_t hi,
                   int64_t batch_rows)
      : table_(table), next_lo_(lo), hi_(hi), batch_rows_(batch_rows) {}

  SqliteTable* const table_;
  int64_t next_lo_;  // smallest rowid not fetched yet
  const int64_t hi_;  // largest rowid of the range (inclusive)
  const int64_t batch_rows_;
  bool exhausted_ = false;
  std::deque<Row> buffer_;
};

}  // namespace table_internal
}  // namespace shardq

#endif  // SHARDQ_IO_SQLITE_TABLE_H_
