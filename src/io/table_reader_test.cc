#include "shardq/table_reader.h"

#include <sqlite3.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/core/slice_plan.h"
#include "src/io/record_test_util.h"
#include "src/io/sqlite_table.h"

namespace shardq {
namespace {

using ::shardq::testing_util::TempPath;
using ::testing::HasSubstr;

constexpr int64_t kMaxRowid = std::numeric_limits<int64_t>::max();
constexpr int64_t kMinRowid = std::numeric_limits<int64_t>::min();

// A writable connection for building test databases.
class Db {
 public:
  explicit Db(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK);
    Exec("PRAGMA journal_mode=DELETE");
  }
  ~Db() { sqlite3_close(db_); }
  void Exec(const std::string& sql) { testing_util::ExecSql(db_, sql); }
  // Inserts rowids with one integer column v = rowid, in one transaction.
  void InsertRowids(const std::string& table, const std::vector<int64_t>& rowids) {
    Exec("BEGIN");
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(
                  db_, absl::StrCat("INSERT INTO ", table, "(rowid, v) VALUES(?1, ?1)").c_str(),
                  -1, &stmt, nullptr),
              SQLITE_OK);
    for (int64_t rowid : rowids) {
      sqlite3_bind_int64(stmt, 1, rowid);
      ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
      sqlite3_reset(stmt);
    }
    sqlite3_finalize(stmt);
    Exec("COMMIT");
  }
  sqlite3* get() { return db_; }

 private:
  sqlite3* db_ = nullptr;
};

std::string TableItem(const std::string& db, const std::string& table) {
  return absl::StrCat("sqlite:", db, "?table=", table);
}

// Reads every item; fails the test on an error.
std::vector<Row> ReadAll(const std::vector<std::string>& items, int64_t batch = 13,
                         TableReaderOptions options = {}) {
  ListItemSource source(items);
  TableReader reader(options);
  std::vector<Row> out;
  while (true) {
    absl::StatusOr<std::vector<Row>> got = reader.ReadUpTo(source, batch);
    if (absl::IsOutOfRange(got.status())) break;
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) break;
    for (Row& row : *got) out.push_back(std::move(row));
  }
  return out;
}

absl::Status FirstError(const std::string& item) {
  ListItemSource source({item});
  TableReader reader;
  return reader.ReadUpTo(source, 10).status();
}

// Sparse, clustered, negative and extreme rowids.
std::vector<int64_t> RandomRowids(std::mt19937_64& rng, int64_t count) {
  std::set<int64_t> rowids;
  const int shape = static_cast<int>(rng() % 4);
  while (static_cast<int64_t>(rowids.size()) < count) {
    switch (shape) {
      case 0:  // dense from 1, as AUTOINCREMENT makes
        rowids.insert(static_cast<int64_t>(rowids.size()) + 1);
        break;
      case 1:  // sparse over the whole range, extremes included
        if (rng() % 50 == 0) {
          rowids.insert(rng() % 2 ? kMaxRowid : kMinRowid);
        } else {
          rowids.insert(static_cast<int64_t>(rng()));
        }
        break;
      case 2:  // dense clusters far apart
        rowids.insert(static_cast<int64_t>(rng() % 4) * 1000000000000LL +
                      static_cast<int64_t>(rng() % 3000));
        break;
      default:  // gaps of random size
        rowids.insert((rowids.empty() ? -5000 : *rowids.rbegin()) + 1 +
                      static_cast<int64_t>(rng() % 40));
        break;
    }
  }
  return std::vector<int64_t>(rowids.begin(), rowids.end());
}

TEST(TableReader, RandomPlansOverSparseRowidsYieldEveryRowOnceInOrder) {
  std::mt19937_64 rng(21);
  TempPath path(".db");
  Db db(path.path());
  for (int trial = 0; trial < 24; ++trial) {
    const std::string table = absl::StrCat("t", trial);
    db.Exec(absl::StrCat("CREATE TABLE ", table, "(v INTEGER)"));
    const int64_t rows = trial < 3 ? trial : static_cast<int64_t>(rng() % 6000);
    const std::vector<int64_t> rowids = RandomRowids(rng, rows);
    db.InsertRowids(table, rowids);

    absl::StatusOr<int64_t> counted = CountTableRows({path.path(), table});
    ASSERT_TRUE(counted.ok()) << counted.status();
    ASSERT_EQ(*counted, rows);
    const int64_t slices = 1 + static_cast<int64_t>(rng() % 60);
    absl::StatusOr<std::vector<std::string>> plan =
        PlanSlices({{TableItem(path.path(), table), rows}}, slices);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // The batch size and the number of open tables vary too.
    TableReaderOptions options;
    options.batch_rows = 1 + static_cast<int64_t>(rng() % 3000);
    std::vector<Row> got = ReadAll(*plan, 1 + static_cast<int64_t>(rng() % 500), options);
    std::vector<int64_t> got_rowids;
    for (const Row& row : got) {
      got_rowids.push_back(row.rowid);
      ASSERT_EQ(row.values.size(), 1u);
      EXPECT_EQ(std::get<int64_t>(row.values[0]), row.rowid);
    }
    EXPECT_EQ(got_rowids, rowids) << "trial " << trial << ": " << rows << " rows, "
                                  << plan->size() << " slices";
    // Near-equal slices: each slice of the plan holds its share of rows.
    if (!plan->empty()) {
      ListItemSource source({plan->front()});
      TableReader reader;
      int64_t first_slice_rows = 0;
      while (true) {
        absl::StatusOr<std::vector<Row>> batch = reader.ReadUpTo(source, 1000);
        if (!batch.ok()) break;
        first_slice_rows += static_cast<int64_t>(batch->size());
      }
      EXPECT_EQ(first_slice_rows, rows / static_cast<int64_t>(plan->size()));
    }
  }
}

TEST(TableReader, TypedValuesRoundTrip) {
  TempPath path(".db");
  {
    Db db(path.path());
    db.Exec("CREATE TABLE mixed(i INTEGER, r REAL, t TEXT, b BLOB, n)");
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db.get(), "INSERT INTO mixed VALUES(?1, ?2, ?3, ?4, ?5)",
                                 -1, &stmt, nullptr),
              SQLITE_OK);
    const std::string text_with_nul("a\0b", 3);
    const std::string blob("\x00\xff\x01", 3);
    sqlite3_bind_int64(stmt, 1, kMinRowid);
    sqlite3_bind_double(stmt, 2, -0.125);
    sqlite3_bind_text(stmt, 3, text_with_nul.data(), 3, SQLITE_TRANSIENT);
    sqlite3_bind_blob(stmt, 4, blob.data(), 3, SQLITE_TRANSIENT);
    sqlite3_bind_null(stmt, 5);
    ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
    sqlite3_finalize(stmt);
    // Values of other classes in the same columns, and empty ones.
    db.Exec("INSERT INTO mixed VALUES(9223372036854775807, 1e308, '', x'', 'text in n')");
    db.Exec("INSERT INTO mixed VALUES('not a number', NULL, 'é', NULL, 2.5)");
  }
  std::vector<Row> rows = ReadAll({TableItem(path.path(), "mixed")});
  ASSERT_EQ(rows.size(), 3u);
  ASSERT_NE(rows[0].column_names, nullptr);
  EXPECT_EQ(*rows[0].column_names, std::vector<std::string>({"i", "r", "t", "b", "n"}));
  EXPECT_EQ(rows[0].column_names, rows[2].column_names);  // shared
  EXPECT_EQ(rows[0].values[0], Value(kMinRowid));
  EXPECT_EQ(rows[0].values[1], Value(-0.125));
  EXPECT_EQ(rows[0].values[2], Value(std::string("a\0b", 3)));
  EXPECT_EQ(rows[0].values[3], Value(Blob{std::string("\x00\xff\x01", 3)}));
  EXPECT_EQ(rows[0].values[4], Value(std::monostate()));
  EXPECT_EQ(rows[1].values[0], Value(kMaxRowid));
  EXPECT_EQ(rows[1].values[1], Value(1e308));
  EXPECT_EQ(rows[1].values[2], Value(std::string()));
  EXPECT_EQ(rows[1].values[3], Value(Blob{}));
  EXPECT_EQ(rows[1].values[4], Value(std::string("text in n")));
  EXPECT_EQ(rows[2].values[0], Value(std::string("not a number")));
  EXPECT_EQ(rows[2].values[1], Value(std::monostate()));
  EXPECT_EQ(rows[2].values[2], Value(std::string("é")));
  EXPECT_EQ(rows[2].values[4], Value(2.5));
  EXPECT_EQ(rows[1].key, absl::StrCat(TableItem(path.path(), "mixed"), ":2"));
}

TEST(TableReader, MissingDatabaseIsNotFoundWithItsPath) {
  absl::Status s = FirstError("sqlite:/nonexistent/shardq/train.db?table=t");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("/nonexistent/shardq/train.db"));
}

TEST(TableReader, MissingTableIsNotFoundNamingDatabaseAndTable) {
  TempPath path(".db");
  { Db(path.path()).Exec("CREATE TABLE present(v)"); }
  absl::Status s = FirstError(TableItem(path.path(), "absent"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr(path.path()));
  EXPECT_THAT(s.message(), HasSubstr("'absent'"));
  EXPECT_EQ(CountTableRows({path.path(), "absent"}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TableReader, HostileTableNamesAreLookedUpNotExecuted) {
  TempPath path(".db");
  {
    Db db(path.path());
    db.Exec("CREATE TABLE victim(v)");
    db.Exec("INSERT INTO victim VALUES(1)");
    db.Exec("CREATE TABLE \"we\"\"ird; name\"(v)");
    db.Exec("INSERT INTO \"we\"\"ird; name\" VALUES(42)");
  }
  for (const std::string name :
       {"victim; DROP TABLE victim", "victim\"; DROP TABLE victim; --",
        "x' OR '1'='1"}) {
    EXPECT_EQ(FirstError(TableItem(path.path(), name)).code(),
              absl::StatusCode::kNotFound)
        << name;
  }
  EXPECT_EQ(ReadAll({TableItem(path.path(), "victim")}).size(), 1u);
  std::vector<Row> weird = ReadAll({TableItem(path.path(), "we\"ird; name")});
  ASSERT_EQ(weird.size(), 1u);
  EXPECT_EQ(weird[0].values[0], Value(int64_t{42}));
}

TEST(TableReader, ViewsWithoutRowidTablesAndNonDatabasesAreInvalid) {
  TempPath path(".db"), text(".db");
  {
    Db db(path.path());
    db.Exec("CREATE TABLE t(v)");
    db.Exec("CREATE VIEW v AS SELECT * FROM t");
    db.Exec("CREATE TABLE w(k TEXT PRIMARY KEY, v) WITHOUT ROWID");
  }
  testing_util::WriteBytes(text.path(), std::string(4096, 'n'));
  for (const std::string& item :
       {TableItem(path.path(), "v"), TableItem(path.path(), "w"),
        TableItem(text.path(), "t")}) {
    absl::Status s = FirstError(item);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << item << ": " << s;
  }
}

TEST(TableReader, BadItemsAreInvalidArgument) {
  for (const std::string item :
       {"sqlite:?table=t", "sqlite:/tmp/x.db", "sqlite:/tmp/x.db?table=t&color=red"}) {
    EXPECT_EQ(FirstError(item).code(), absl::StatusCode::kInvalidArgument) << item;
  }
}

TEST(TableReader, ColumnsNamedRowidDoNotHideTheRowid) {
  TempPath path(".db");
  {
    Db db(path.path());
    db.Exec("CREATE TABLE t(rowid TEXT, oid TEXT)");
    db.Exec("INSERT INTO t(_rowid_, rowid, oid) VALUES(10, 'a', 'b'), (20, 'c', 'd')");
  }
  std::vector<Row> rows = ReadAll({TableItem(path.path(), "t") + "&start=1&end=2"});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].rowid, 20);
  EXPECT_EQ(rows[0].values[0], Value(std::string("c")));
}

TEST(TableReader, RangePastTheLastRowIsFailedPrecondition) {
  TempPath path(".db");
  {
    Db db(path.path());
    db.Exec("CREATE TABLE t(v)");
    db.InsertRowids("t", {1, 5, 9});
  }
  EXPECT_EQ(ReadAll({TableItem(path.path(), "t") + "&start=1&end=3"}).size(), 2u);
  absl::Status s = FirstError(TableItem(path.path(), "t") + "&start=1&end=4");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("has 3 rows"));
}

TEST(TableReader, CompletesAnItemOnlyAfterItsLastRow) {
  TempPath path(".db");
  {
    Db db(path.path());
    db.Exec("CREATE TABLE t(v)");
    db.InsertRowids("t", {1, 2, 3});
  }
  testing_util::OneItemSource source(TableItem(path.path(), "t"));
  TableReader reader;
  ASSERT_EQ(reader.ReadUpTo(source, 2)->size(), 2u);
  EXPECT_EQ(source.done, 0);
  ASSERT_EQ(reader.ReadUpTo(source, 2)->size(), 1u);
  EXPECT_EQ(source.done, 1);
}

// The statements a slice runs are searches of the rowid b-tree, not scans
// of the table (and no statement uses OFFSET).
TEST(SqliteTable, SliceQueriesAreIndexedRangeScans) {
  TempPath path(".db");
  {
    Db db(path.path());
    db.Exec("CREATE TABLE t(v, w)");
    db.Exec("CREATE INDEX t_v ON t(v)");
    db.InsertRowids("t", {1, 2, 3});
  }
  auto table = table_internal::SqliteTable::Open({path.path(), "t"});
  ASSERT_TRUE(table.ok()) << table.status();
  for (const std::string& sql : {(*table)->fetch_sql(), (*table)->rowid_sql()}) {
    EXPECT_THAT(sql, ::testing::Not(HasSubstr("OFFSET")));
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2((*table)->db(), ("EXPLAIN QUERY PLAN " + sql).c_str(),
                                 -1, &stmt, nullptr),
              SQLITE_OK);
    std::string plan;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      absl::StrAppend(&plan, reinterpret_cast<const char*>(sqlite3_column_text(stmt, 3)),
                      "\n");
    }
    sqlite3_finalize(stmt);
    EXPECT_THAT(plan, HasSubstr("SEARCH t USING INTEGER PRIMARY KEY")) << sql;
    EXPECT_THAT(plan, ::testing::Not(HasSubstr("TEMP B-TREE"))) << sql;
  }
}

TEST(SqliteTable, OpensReadOnlyAndBuildsASparseIndex) {
  TempPath path(".db");
  std::vector<int64_t> rowids;
  for (int64_t i = 0; i < 5000; ++i) rowids.push_back(i * 7 - 100);
  {
    Db db(path.path());
    db.Exec("CREATE TABLE t(v)");
    db.InsertRowids("t", rowids);
  }
  auto table = table_internal::SqliteTable::Open({path.path(), "t"});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_NE(sqlite3_exec((*table)->db(), "DELETE FROM t", nullptr, nullptr, nullptr),
            SQLITE_OK);
  for (int64_t rank : {0, 1, 1023, 1024, 1025, 4999}) {
    absl::StatusOr<std::optional<int64_t>> rowid = (*table)->RowidAtRank(rank);
    ASSERT_TRUE(rowid.ok()) << rowid.status();
    EXPECT_EQ(**rowid, rowids[static_cast<size_t>(rank)]) << rank;
  }
  EXPECT_EQ(*(*table)->RowidAtRank(5000), std::nullopt);
  EXPECT_EQ((*table)->checkpoints(), 5);  // rows 0, 1024, ..., 4096
}

}  // namespace
}  // namespace shardq
