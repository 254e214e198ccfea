// Test-only: the random data sets of split_coverage_test.cc (text files,
// TFRecord files, SQLite tables, each with every record a full read must
// return, placed by (work, offset)) and the conversion of what a reader
// returned into that placement. Included by that one test only.
#ifndef SHARDQ_IO_SPLIT_COVERAGE_DATA_H_
#define SHARDQ_IO_SPLIT_COVERAGE_DATA_H_

#include <sqlite3.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/slice.h"
#include "shardq/table_reader.h"
#include "shardq/text_line_reader.h"
#include "src/core/slice_plan.h"
#include "src/io/record_test_util.h"

namespace shardq {
namespace split_coverage {

using ::shardq::testing_util::EncodeAll;
using ::shardq::testing_util::ExecSql;
using ::shardq::testing_util::LinesOf;
using ::shardq::testing_util::RandomPayload;
using ::shardq::testing_util::RecordOffsets;
using ::shardq::testing_util::SplitKey;
using ::shardq::testing_util::TempPath;
using ::shardq::testing_util::WriteBytes;

// ---------------------------------------------------------------------------
// Data sets: the files or tables, and every record a full read must return.

// The work a parsed item reads: a file path, or "sqlite:PATH?table=NAME"
// (the name planning gave the table).
inline std::string WorkOf(const SliceSpec& spec) {
  auto table = spec.params.find("table");
  if (table == spec.params.end()) return spec.work;
  return absl::StrCat(spec.work, "?table=", table->second);
}

struct DataSet {
  std::vector<std::unique_ptr<TempPath>> files;
  std::vector<SizedWork> works;
  // Every record by (work, offset): line start / TFRecord header byte /
  // row rank. The value is what the reader must return for it.
  std::map<std::pair<std::string, int64_t>, std::string> records;
  // Tables: (work, rowid) -> rank, to place a row like a file record.
  std::map<std::pair<std::string, int64_t>, int64_t> rank_of_rowid;

  const std::string& NewPath(const std::string& suffix) {
    files.push_back(std::make_unique<TempPath>(suffix));
    return files.back()->path();
  }
};

inline int64_t Below(std::mt19937_64& rng, int64_t bound) {
  return static_cast<int64_t>(rng() % static_cast<uint64_t>(bound));
}

// Lines of very different lengths: many empty or tiny ones, a few long
// ones; CRLF, no final newline or trailing empty lines in some files.
inline std::string RandomText(std::mt19937_64& rng) {
  const int kind = static_cast<int>(Below(rng, 8));
  if (kind == 0) return "";
  std::string text;
  if (kind == 1) {  // a few huge lines
    const int lines = 1 + static_cast<int>(Below(rng, 3));
    for (int i = 0; i < lines; ++i) {
      text.append(static_cast<size_t>(20000 + Below(rng, 200000)), 'H');
      text += '\n';
    }
    return text;
  }
  const int lines = static_cast<int>(Below(rng, 300));
  for (int i = 0; i < lines; ++i) {
    const int size_class = static_cast<int>(Below(rng, 100));
    int64_t length;
    if (size_class < 25) {
      length = 0;
    } else if (size_class < 75) {
      length = 1 + Below(rng, 8);
    } else if (size_class < 98) {
      length = Below(rng, 300);
    } else {
      length = Below(rng, 30000);
    }
    for (int64_t j = 0; j < length; ++j) {
      text += static_cast<char>('a' + Below(rng, 26));
    }
    text += kind == 2 ? "\r\n" : "\n";
  }
  if (kind == 3 && !text.empty()) text.pop_back();  // no final newline
  if (kind == 4) text += "\n\n\n";
  return text;
}

inline DataSet RandomTextData(std::mt19937_64& rng) {
  DataSet data;
  const int files = 1 + static_cast<int>(Below(rng, 4));
  for (int f = 0; f < files; ++f) {
    const std::string& path = data.NewPath(".txt");
    const std::string text = RandomText(rng);
    WriteBytes(path, text);
    data.works.push_back({path, static_cast<int64_t>(text.size())});
    for (auto& [offset, line] : LinesOf(text)) {
      data.records[{path, offset}] = std::move(line);
    }
  }
  return data;
}

inline DataSet RandomTFRecordData(std::mt19937_64& rng) {
  DataSet data;
  const int files = 1 + static_cast<int>(Below(rng, 3));
  for (int f = 0; f < files; ++f) {
    const std::string& path = data.NewPath(".tfrecord");
    std::vector<std::string> records;
    const int count = static_cast<int>(Below(rng, 90));
    for (int i = 0; i < count; ++i) {
      records.push_back(Below(rng, 10) == 0 ? std::string() : RandomPayload(rng));
    }
    const std::string bytes = EncodeAll(records);
    WriteBytes(path, bytes);
    data.works.push_back({path, static_cast<int64_t>(bytes.size())});
    const std::vector<int64_t> offsets = RecordOffsets(records);
    for (size_t i = 0; i < records.size(); ++i) {
      data.records[{path, offsets[i]}] = records[i];
    }
  }
  return data;
}

// Sparse, dense, clustered or extreme rowids.
inline std::vector<int64_t> RandomRowids(std::mt19937_64& rng, int64_t count) {
  std::set<int64_t> rowids;
  const int shape = static_cast<int>(Below(rng, 4));
  while (static_cast<int64_t>(rowids.size()) < count) {
    switch (shape) {
      case 0:
        rowids.insert(static_cast<int64_t>(rowids.size()) + 1);
        break;
      case 1:
        rowids.insert(static_cast<int64_t>(rng()));
        break;
      case 2:
        rowids.insert(Below(rng, 4) * 1000000000000LL + Below(rng, 3000));
        break;
      default:
        rowids.insert((rowids.empty() ? -5000 : *rowids.rbegin()) + 1 +
                      Below(rng, 40));
        break;
    }
  }
  return std::vector<int64_t>(rowids.begin(), rowids.end());
}

inline std::string RowContent(int64_t rowid, int64_t v) {
  return absl::StrCat(rowid, "/", v);
}

// One or two databases of one to three tables; column v holds the rowid.
inline DataSet RandomTableData(std::mt19937_64& rng) {
  DataSet data;
  const int dbs = 1 + static_cast<int>(Below(rng, 2));
  for (int d = 0; d < dbs; ++d) {
    const std::string& path = data.NewPath(".db");
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ExecSql(db, "PRAGMA journal_mode=DELETE");
    ExecSql(db, "PRAGMA synchronous=OFF");  // test data: no need to wait for the disk
    const int tables = 1 + static_cast<int>(Below(rng, 3));
    for (int t = 0; t < tables; ++t) {
      const std::string table = absl::StrCat("t", t);
      ExecSql(db, absl::StrCat("CREATE TABLE ", table, "(v INTEGER)"));
      const int64_t rows = Below(rng, 8) == 0 ? Below(rng, 3) : Below(rng, 2500);
      const std::vector<int64_t> rowids = RandomRowids(rng, rows);
      ExecSql(db, "BEGIN");
      sqlite3_stmt* stmt = nullptr;
      EXPECT_EQ(sqlite3_prepare_v2(
                    db,
                    absl::StrCat("INSERT INTO ", table, "(rowid, v) VALUES(?1, ?1)")
                        .c_str(),
                    -1, &stmt, nullptr),
                SQLITE_OK);
      for (int64_t rowid : rowids) {
        sqlite3_bind_int64(stmt, 1, rowid);
        EXPECT_EQ(sqlite3_step(stmt), SQLITE_DONE);
        sqlite3_reset(stmt);
      }
      sqlite3_finalize(stmt);
      ExecSql(db, "COMMIT");
      const std::string work = absl::StrCat("sqlite:", path, "?table=", table);
      data.works.push_back({work, rows});
      for (size_t rank = 0; rank < rowids.size(); ++rank) {
        const int64_t r = static_cast<int64_t>(rank);
        data.records[{work, r}] = RowContent(rowids[rank], rowids[rank]);
        data.rank_of_rowid[{work, rowids[rank]}] = r;
      }
    }
    sqlite3_close(db);
  }
  return data;
}

// ---------------------------------------------------------------------------
// What a reader returned, placed by (work, offset).

struct Got {
  std::string item;  // the item the record was read from
  std::string work;
  int64_t offset = -1;
  std::string content;
};

inline Got ToGot(const Record& record, const DataSet&) {
  Got got;
  EXPECT_TRUE(SplitKey(record.key, &got.item, &got.offset)) << record.key;
  absl::StatusOr<SliceSpec> spec = ParseItem(got.item);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (spec.ok()) got.work = WorkOf(*spec);
  got.content = record.value;
  return got;
}

inline Got ToGot(const Row& row, const DataSet& data) {
  Got got;
  int64_t rowid = 0;
  EXPECT_TRUE(SplitKey(row.key, &got.item, &rowid)) << row.key;
  EXPECT_EQ(rowid, row.rowid) << row.key;
  absl::StatusOr<SliceSpec> spec = ParseItem(got.item);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (spec.ok()) got.work = WorkOf(*spec);
  auto rank = data.rank_of_rowid.find({got.work, row.rowid});
  EXPECT_NE(rank, data.rank_of_rowid.end())
      << "row " << row.rowid << " of " << got.work << " is not in the data set";
  if (rank != data.rank_of_rowid.end()) got.offset = rank->second;
  int64_t v = 0;
  if (row.values.size() == 1 && std::holds_alternative<int64_t>(row.values[0])) {
    v = std::get<int64_t>(row.values[0]);
  } else {
    ADD_FAILURE() << "row " << row.key << " does not hold one integer";
  }
  got.content = RowContent(row.rowid, v);
  return got;
}

}  // namespace split_coverage
}  // namespace shardq

#endif  // SHARDQ_IO_SPLIT_COVERAGE_DATA_H_
