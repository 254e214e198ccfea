#include "shardq/table_reader.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/io/item_readers.h"
#include "src/io/read_loop.h"
#include "src/io/sqlite_table.h"

namespace shardq {
namespace {

class TableItemReader final : public ItemReader<Row> {
 public:
  TableItemReader(const WorkItem& item, int64_t start,
                  std::unique_ptr<table_internal::TableSliceReader> slice)
      : key_prefix_(absl::StrCat(item.item, ":")),
        range_(item.range),
        next_rank_(start),
        slice_(std::move(slice)) {}

  absl::StatusOr<bool> Next(Row* row) override {
    absl::StatusOr<bool> more = slice_->Next(row);
    if (!more.ok() || !*more) return more;
    // A split (tail rebalancing) may have ended the item before this row;
    // rows are counted by their rank in the table, like start/end.
    if (range_ != nullptr && !range_->Claim(next_rank_)) return false;
    ++next_rank_;
    SetRecordKey(key_prefix_, row->rowid, &row->key);
    return true;
  }

  int64_t resume_offset() const override { return next_rank_; }

 private:
  const std::string key_prefix_;
  const std::shared_ptr<SplittableRange> range_;
  int64_t next_rank_;  // rank of the next row of the item in its table
  const std::unique_ptr<table_internal::TableSliceReader> slice_;
};

}  // namespace

TableCache::TableCache(int64_t max_open_tables)
    : max_open_tables_(std::max<int64_t>(max_open_tables, 1)) {}
TableCache::~TableCache() = default;

absl::StatusOr<table_internal::SqliteTable*> TableCache::Get(
    const std::string& db_path, const std::string& table) {
  auto key = std::make_pair(db_path, table);
  if (auto it = tables_.find(key); it != tables_.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<table_internal::SqliteTable>> opened =
      table_internal::SqliteTable::Open(TableRef{db_path, table});
  if (!opened.ok()) return opened.status();
  // No reader of this cache is open here (between items): any table may go.
  while (!open_order_.empty() &&
         static_cast<int64_t>(tables_.size()) >= max_open_tables_) {
    tables_.erase(open_order_.front());
    open_order_.erase(open_order_.begin());
  }
  table_internal::SqliteTable* raw = opened->get();
  tables_[key] = *std::move(opened);
  open_order_.push_back(std::move(key));
  return raw;
}

absl::StatusOr<std::unique_ptr<ItemReader<Row>>> OpenTableItem(
    const WorkItem& item, TableCache* tables, int64_t batch_rows) {
  absl::StatusOr<SliceSpec> spec = SpecOf(item);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<TableRef> ref = ParseTableRef(*spec);
  if (!ref.ok()) return ref.status();
  absl::StatusOr<table_internal::SqliteTable*> table =
      tables->Get(ref->db_path, ref->table);
  if (!table.ok()) return table.status();
  absl::StatusOr<std::unique_ptr<table_internal::TableSliceReader>> slice =
      table_internal::TableSliceReader::Open(*table, spec->start, spec->end,
                                             batch_rows);
  if (!slice.ok()) {
    return absl::Status(
        slice.status().code(),
        absl::StrCat("item '", item.item, "': ", slice.status().message()));
  }
  return std::make_unique<TableItemReader>(item, spec->start.value_or(0),
                                           *std::move(slice));
}

TableReader::TableReader(TableReaderOptions options)
    : tables_(std::make_unique<TableCache>(options.max_open_tables)),
      loop_(std::make_unique<ReadLoop<Row>>(
          [this, batch_rows = options.batch_rows](const WorkItem& item) {
            return OpenTableItem(item, tables_.get(), batch_rows);
          })) {}

TableReader::~TableReader() {
  loop_.reset();  // its reader, before the tables it reads
}

absl::StatusOr<std::vector<Row>> TableReader::ReadUpTo(ItemSource& source,
                                                       int64_t n) {
  return loop_->ReadUpTo(source, n);
}

int64_t TableReader::rows_read() const { return loop_->records(); }
int64_t TableReader::items_done() const { return loop_->items_done(); }

}  // namespace shardq
