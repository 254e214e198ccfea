// Reads typed rows of SQLite tables from the items of an ItemSource (a
// WorkQueue, an input producer, a list), as TextLineReader reads lines.
//
// A table work is "sqlite:PATH?table=NAME"; its slices add a range of row
// numbers, "sqlite:PATH?table=NAME&start=S&end=E": the rows of rank
// [S, E) in rowid order, where planning counted the rows (slices of
// near-equal row counts whatever the rowids are). The items of a plan yield
// every row of the table exactly once.
//
// How a slice finds its rows without OFFSET: each reader keeps, per table,
// a sparse rank index (the rowid of every 1024th row), built incrementally
// by keyset-paginated scans of the rowid b-tree (`WHERE rowid >= ? ORDER BY
// rowid LIMIT ?`) and kept for the reader's life. A row number maps to a
// rowid through its checkpoint plus a step of fewer than 1024 rows, and the
// slice's rows are then fetched by an indexed range scan over rowid
// (`WHERE rowid >= ? AND rowid <= ? ORDER BY rowid LIMIT ?`, in batches).
// Cost: one pass over the rowids of a table per reader (about a count(*)),
// then O(log n + 1024 + rows) per slice; memory 8 bytes per 1024 rows.
// The table must not change while a plan over it is read (as for files):
// rows added or removed shift the row numbers. A slice that ends past the
// table's last row is FAILED_PRECONDITION.
//
// Databases are opened read-only. WITHOUT ROWID tables and views are not
// supported (INVALID_ARGUMENT).
#ifndef SHARDQ_TABLE_READER_H_
#define SHARDQ_TABLE_READER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "shardq/item_source.h"

namespace shardq {

// A BLOB value (distinct from TEXT, which is a std::string).
struct Blob {
  std::string bytes;
  bool operator==(const Blob& other) const { return bytes == other.bytes; }
};

// One SQLite value, by its storage class: NULL (std::monostate), INTEGER,
// REAL, TEXT, BLOB. SQLite types values, not columns: one column may hold
// values of several classes.
using Value = std::variant<std::monostate, int64_t, double, std::string, Blob>;

// One row: key "<item>:<rowid>", its rowid, and its values in the order of
// the table's columns (SELECT *).
struct Row {
  std::string key;
  int64_t rowid = 0;
  // Shared by every row read from the same table; never null.
  std::shared_ptr<const std::vector<std::string>> column_names;
  std::vector<Value> values;
};

struct TableReaderOptions {
  // Rows fetched per query. Each query is a short read transaction, so a
  // reader never holds a database lock between batches.
  int64_t batch_rows = 1024;
  // Databases kept open (with their rank indexes) at once; the oldest is
  // closed when another is needed.
  int64_t max_open_tables = 8;
};

class TableCache;
template <typename R>
class ReadLoop;

// Not thread-safe: one reader per consuming thread.
class TableReader {
 public:
  explicit TableReader(TableReaderOptions options = {});
  ~TableReader();
  TableReader(const TableReader&) = delete;
  TableReader& operator=(const TableReader&) = delete;

  // Returns up to `n` (>= 1) rows, taking new items from `source` as the
  // current one runs out. Calls source.ItemDone(item) only once every row
  // of the item has been returned. Fewer than n rows only at end of input;
  // OUT_OF_RANGE when the source is exhausted and nothing was read. On an
  // error, the rows read before it are returned first and the error by the
  // next call; the failing item stays held. Errors: NOT_FOUND naming the
  // database path (missing) or the database and table (no such table);
  // INVALID_ARGUMENT for a bad item, a view or a WITHOUT ROWID table;
  // DATA_LOSS for a corrupt database; FAILED_PRECONDITION when the table
  // has fewer rows than the item's range.
  absl::StatusOr<std::vector<Row>> ReadUpTo(ItemSource& source, int64_t n);

  int64_t rows_read() const;
  int64_t items_done() const;

 private:
  std::unique_ptr<TableCache> tables_;
  std::unique_ptr<ReadLoop<Row>> loop_;
};

}  // namespace shardq

#endif  // SHARDQ_TABLE_READER_H_
