#include "src/io/sqlite_table.h"

#include <sqlite3.h>

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "src/io/file.h"

namespace shardq {
namespace {

constexpr int64_t kMinRowid = std::numeric_limits<int64_t>::min();
constexpr int64_t kMaxRowid = std::numeric_limits<int64_t>::max();
// Rowids read per query while building the rank index.
constexpr int64_t kIndexBatchRows = 64 << 10;
constexpr int kBusyTimeoutMs = 10000;

std::string Describe(const TableRef& ref) {
  return absl::StrCat("SQLite database '", ref.db_path, "', table '",
                      ref.table, "'");
}

// Finalizes a statement when it goes out of scope.
struct StatementCloser {
  sqlite3_stmt* stmt = nullptr;
  ~StatementCloser() { sqlite3_finalize(stmt); }
};

}  // namespace

bool IsTableItem(absl::string_view item) {
  return absl::StartsWith(item, kSqliteScheme);
}

absl::StatusOr<TableRef> ParseTableRef(const SliceSpec& spec) {
  if (!IsTableItem(spec.work)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", spec.work, "' is not a table (sqlite:PATH?table=NAME)"));
  }
  TableRef ref;
  ref.db_path = spec.work.substr(kSqliteScheme.size());
  const std::string item = FormatItem(spec);
  if (ref.db_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "item '", item, "': no database path (sqlite:PATH?table=NAME)"));
  }
  for (const auto& [key, value] : spec.params) {
    if (key != "table") {
      return absl::InvalidArgumentError(absl::StrCat(
          "item '", item, "': unknown parameter '", key,
          "' (a table item takes table, start and end)"));
    }
    ref.table = value;
  }
  if (ref.table.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "item '", item, "': no table name (sqlite:PATH?table=NAME)"));
  }
  return ref;
}

std::string QuoteIdentifier(absl::string_view name) {
  return absl::StrCat("\"", absl::StrReplaceAll(name, {{"\"", "\"\""}}), "\"");
}

absl::StatusOr<int64_t> CountTableRows(const TableRef& ref) {
  absl::StatusOr<std::unique_ptr<table_internal::SqliteTable>> table =
      table_internal::SqliteTable::Open(ref);
  if (!table.ok()) return table.status();
  return (*table)->CountRows();
}

namespace table_internal {

absl::StatusOr<std::unique_ptr<SqliteTable>> SqliteTable::Open(
    const TableRef& ref) {
  // A missing file would otherwise surface as SQLITE_CANTOPEN.
  if (absl::StatusOr<int64_t> size = FileSize(ref.db_path); !size.ok()) {
    if (absl::IsNotFound(size.status())) {
      return absl::NotFoundError(absl::StrCat(
          "SQLite database '", ref.db_path, "' not found (",
          size.status().message(), ")"));
    }
    return size.status();
  }
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(ref.db_path.c_str(), &db,
                                 SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                                 nullptr);
  // The table owns the handle from here on, even when opening failed.
  std::unique_ptr<SqliteTable> table(new SqliteTable(ref, db));
  if (rc != SQLITE_OK) return table->SqliteError(rc, "open");
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (absl::Status s = table->Init(); !s.ok()) return s;
  return table;
}

SqliteTable::SqliteTable(TableRef ref, sqlite3* db)
    : ref_(std::move(ref)), db_(db) {}

SqliteTable::~SqliteTable() {
  sqlite3_finalize(fetch_);
  sqlite3_finalize(rowids_);
  sqlite3_close(db_);
}

absl::Status SqliteTable::SqliteError(int rc, absl::string_view doing) const {
  const std::string message =
      absl::StrCat(Describe(ref_), ": ", doing, ": ",
                   db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
      return absl::DataLossError(message);
    case SQLITE_NOTADB:
      return absl::InvalidArgumentError(
          absl::StrCat(message, " (not an SQLite database)"));
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(message);
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::PermissionDeniedError(message);
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(message);
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
      return absl::UnknownError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status SqliteTable::Init() {
  // The name is bound, never spliced, so any name is safe to look up; the
  // statements below splice it only quoted.
  {
    StatementCloser lookup;
    int rc = sqlite3_prepare_v2(
        db_,
        "SELECT type FROM sqlite_master WHERE name = ?1 COLLATE NOCASE "
        "AND type IN ('table', 'view')",
        -1, &lookup.stmt, nullptr);
    if (rc != SQLITE_OK) return SqliteError(rc, "reading the schema");
    sqlite3_bind_text(lookup.stmt, 1, ref_.table.data(),
                      static_cast<int>(ref_.table.size()), SQLITE_TRANSIENT);
    rc = sqlite3_step(lookup.stmt);
    if (rc == SQLITE_DONE) {
      return absl::NotFoundError(absl::StrCat("no table '", ref_.table,
                                              "' in SQLite database '",
                                              ref_.db_path, "'"));
    }
    if (rc != SQLITE_ROW) return SqliteError(rc, "reading the schema");
    const unsigned char* type = sqlite3_column_text(lookup.stmt, 0);
    if (type != nullptr &&
        std::string(reinterpret_cast<const char*>(type)) == "view") {
      return absl::InvalidArgumentError(absl::StrCat(
          Describe(ref_), " is a view; shardq slices tables by rowid"));
    }
  }
  const std::string table = QuoteIdentifier(ref_.table);
  // A column may shadow the name "rowid"; SQLite offers two more.
  std::vector<std::string> columns;
  {
    StatementCloser info;
    const std::string sql = absl::StrCat("PRAGMA table_info(", table, ")");
    int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &info.stmt, nullptr);
    if (rc != SQLITE_OK) return SqliteError(rc, "reading the columns");
    while ((rc = sqlite3_step(info.stmt)) == SQLITE_ROW) {
      const unsigned char* name = sqlite3_column_text(info.stmt, 1);
      if (name != nullptr) {
        columns.push_back(
            absl::AsciiStrToLower(reinterpret_cast<const char*>(name)));
      }
    }
    if (rc != SQLITE_DONE) return SqliteError(rc, "reading the columns");
  }
  std::string rowid;
  for (const char* candidate : {"rowid", "_rowid_", "oid"}) {
    if (std::find(columns.begin(), columns.end(), candidate) == columns.end()) {
      rowid = candidate;
      break;
    }
  }
  if (rowid.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Describe(ref_),
        ": columns named rowid, _rowid_ and oid hide the table's rowid"));
  }
  fetch_sql_ = absl::StrCat("SELECT ", rowid, ", * FROM ", table, " WHERE ",
                            rowid, " >= ?1 AND ", rowid, " <= ?2 ORDER BY ",
                            rowid, " LIMIT ?3");
  rowid_sql_ = absl::StrCat("SELECT ", rowid, " FROM ", table, " WHERE ",
                            rowid, " >= ?1 ORDER BY ", rowid, " LIMIT ?2");
  for (auto [sql, stmt] : {std::pair{&fetch_sql_, &fetch_},
                           std::pair{&rowid_sql_, &rowids_}}) {
    const int rc = sqlite3_prepare_v2(db_, sql->c_str(), -1, stmt, nullptr);
    if (rc != SQLITE_OK) {
      absl::Status error = SqliteError(rc, "preparing the rowid scan");
      if (absl::StrContains(sqlite3_errmsg(db_), "no such column")) {
        return absl::InvalidArgumentError(absl::StrCat(
            error.message(),
            " (a WITHOUT ROWID table? shardq slices tables by rowid)"));
      }
      return error;
    }
  }
  auto names = std::make_shared<std::vector<std::string>>();
  for (int i = 1; i < sqlite3_column_count(fetch_); ++i) {
    names->push_back(sqlite3_column_name(fetch_, i));
  }
  column_names_ = std::move(names);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SqliteTable::CountRows() {
  StatementCloser count;
  const std::string sql =
      absl::StrCat("SELECT count(*) FROM ", QuoteIdentifier(ref_.table));
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &count.stmt, nullptr);
  if (rc != SQLITE_OK) return SqliteError(rc, "counting rows");
  rc = sqlite3_step(count.stmt);
  if (rc != SQLITE_ROW) return SqliteError(rc, "counting rows");
  return static_cast<int64_t>(sqlite3_column_int64(count.stmt, 0));
}

absl::Status SqliteTable::CheckDataVersion() {
  StatementCloser version;
  int rc = sqlite3_prepare_v2(db_, "PRAGMA data_version", -1, &version.stmt,
                              nullptr);
  if (rc != SQLITE_OK) return SqliteError(rc, "reading data_version");
  rc = sqlite3_step(version.stmt);
  if (rc != SQLITE_ROW) return SqliteError(rc, "reading data_version");
  const int64_t now = sqlite3_column_int64(version.stmt, 0);
  if (now != data_version_) {
    checkpoints_.clear();
    indexed_rows_ = 0;
    last_rowid_ = 0;
    index_complete_ = false;
    data_version_ = now;
  }
  return absl::OkStatus();
}

absl::Status SqliteTable::RowidsFrom(int64_t lo, int64_t limit,
                                     std::vector<int64_t>* out) {
  sqlite3_reset(rowids_);
  sqlite3_bind_int64(rowids_, 1, lo);
  sqlite3_bind_int64(rowids_, 2, limit);
  int rc;
  while ((rc = sqlite3_step(rowids_)) == SQLITE_ROW) {
    out->push_back(sqlite3_column_int64(rowids_, 0));
  }
  sqlite3_reset(rowids_);  // ends the read transaction
  if (rc != SQLITE_DONE) return SqliteError(rc, "scanning rowids");
  return absl::OkStatus();
}

absl::Status SqliteTable::ExtendIndex(int64_t block) {
  std::vector<int64_t> rowids;
  while (static_cast<int64_t>(checkpoints_.size()) <= block &&
         !index_complete_) {
    if (indexed_rows_ > 0 && last_rowid_ == kMaxRowid) {
      index_complete_ = true;
      break;
    }
    rowids.clear();
    const int64_t lo = indexed_rows_ == 0 ? kMinRowid : last_rowid_ + 1;
    if (absl::Status s = RowidsFrom(lo, kIndexBatchRows, &rowids); !s.ok()) {
      return s;
    }
    for (const int64_t rowid : rowids) {
      if (indexed_rows_ % kRankCheckpointRows == 0) {
        checkpoints_.push_back(rowid);
      }
      ++indexed_rows_;
      last_rowid_ = rowid;
    }
    if (static_cast<int64_t>(rowids.size()) < kIndexBatchRows) {
      index_complete_ = true;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<int64_t>> SqliteTable::RowidAtRank(int64_t rank) {
  if (absl::Status s = CheckDataVersion(); !s.ok()) return s;
  const int64_t block = rank / kRankCheckpointRows;
  if (absl::Status s = ExtendIndex(block); !s.ok()) return s;
  int64_t rows = indexed_rows_;  // the row count, once known
  bool rows_known = index_complete_;
  if (block < static_cast<int64_t>(checkpoints_.size())) {
    const int64_t step = rank - block * kRankCheckpointRows;
    if (step == 0) return checkpoints_[block];
    std::vector<int64_t> rowids;
    if (absl::Status s = RowidsFrom(checkpoints_[block], step + 1, &rowids);
        !s.ok()) {
      return s;
    }
    if (static_cast<int64_t>(rowids.size()) == step + 1) return rowids.back();
    rows = block * kRankCheckpointRows + static_cast<int64_t>(rowids.size());
    rows_known = true;
  }
  if (rows_known && rank == rows) return std::nullopt;
  return absl::FailedPreconditionError(absl::StrCat(
      Describe(ref_), " has ", rows,
      " rows, but an item asks for row ", rank,
      ": the table changed since the plan was made"));
}

absl::StatusOr<int64_t> SqliteTable::FetchRows(int64_t lo, int64_t hi,
                                               int64_t limit,
                                               std::deque<Row>* rows) {
  sqlite3_reset(fetch_);
  sqlite3_bind_int64(fetch_, 1, lo);
  sqlite3_bind_int64(fetch_, 2, hi);
  sqlite3_bind_int64(fetch_, 3, limit);
  const int columns = sqlite3_column_count(fetch_);
  int64_t fetched = 0;
  int rc;
  while ((rc = sqlite3_step(fetch_)) == SQLITE_ROW) {
    Row& row = rows->emplace_back();
    row.rowid = sqlite3_column_int64(fetch_, 0);
    row.column_names = column_names_;
    row.values.reserve(static_cast<size_t>(columns - 1));
    for (int i = 1; i < columns; ++i) {
      switch (sqlite3_column_type(fetch_, i)) {
        case SQLITE_INTEGER:
          row.values.emplace_back(
              static_cast<int64_t>(sqlite3_column_int64(fetch_, i)));
          break;
        case SQLITE_FLOAT:
          row.values.emplace_back(sqlite3_column_double(fetch_, i));
          break;
        case SQLITE_TEXT: {
          const char* text =
              reinterpret_cast<const char*>(sqlite3_column_text(fetch_, i));
          row.values.emplace_back(
              std::string(text, static_cast<size_t>(
                                    sqlite3_column_bytes(fetch_, i))));
          break;
        }
        case SQLITE_BLOB: {
          const char* blob =
              static_cast<const char*>(sqlite3_column_blob(fetch_, i));
          const size_t size =
              static_cast<size_t>(sqlite3_column_bytes(fetch_, i));
          row.values.emplace_back(
              Blob{blob == nullptr ? std::string() : std::string(blob, size)});
          break;
        }
        default:
          row.values.emplace_back(std::monostate());
          break;
      }
    }
    ++fetched;
  }
  sqlite3_reset(fetch_);  // ends the read transaction
  if (rc != SQLITE_DONE) return SqliteError(rc, "reading rows");
  return fetched;
}

// ---------------------------------------------------------------------------
// TableSliceReader

absl::StatusOr<std::unique_ptr<TableSliceReader>> TableSliceReader::Open(
    SqliteTable* table, std::optional<int64_t> start,
    std::optional<int64_t> end, int64_t batch_rows) {
  int64_t lo = kMinRowid;
  int64_t hi = kMaxRowid;
  bool empty = start.has_value() && end.has_value() && *start >= *end;
  if (!empty && start.value_or(0) > 0) {
    absl::StatusOr<std::optional<int64_t>> rowid = table->RowidAtRank(*start);
    if (!rowid.ok()) return rowid.status();
    if (!rowid->has_value()) {
      empty = true;  // starts at the end of the table
    } else {
      lo = **rowid;
    }
  }
  if (!empty && end.has_value()) {
    absl::StatusOr<std::optional<int64_t>> rowid = table->RowidAtRank(*end);
    if (!rowid.ok()) return rowid.status();
    if (rowid->has_value()) hi = **rowid - 1;  // rowids are distinct
  }
  auto reader = std::unique_ptr<TableSliceReader>(
      new TableSliceReader(table, lo, hi, std::max<int64_t>(batch_rows, 1)));
  reader->exhausted_ = empty || lo > hi;
  return reader;
}

absl::StatusOr<bool> TableSliceReader::Next(Row* row) {
  if (buffer_.empty() && !exhausted_) {
    absl::StatusOr<int64_t> fetched =
        table_->FetchRows(next_lo_, hi_, batch_rows_, &buffer_);
    if (!fetched.ok()) return fetched.status();
    if (*fetched < batch_rows_) exhausted_ = true;
    if (!buffer_.empty()) {
      const int64_t last = buffer_.back().rowid;
      if (last >= hi_) exhausted_ = true;
      else next_lo_ = last + 1;
    }
  }
  if (buffer_.empty()) return false;
  *row = std::move(buffer_.front());
  buffer_.pop_front();
  return true;
}

}  // namespace table_internal
}  // namespace shardq
