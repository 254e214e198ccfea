#include "shardq/table_reader.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/io/sqlite_table.h"

namespace shardq {

TableReader::TableReader(TableReaderOptions options) : options_(options) {}
TableReader::~TableReader() {
  slice_.reset();  // before the tables it reads
}

absl::StatusOr<table_internal::SqliteTable*> TableReader::OpenTable(
    const std::string& db_path, const std::string& table) {
  auto key = std::make_pair(db_path, table);
  if (auto it = tables_.find(key); it != tables_.end()) return it->second.get();
  absl::StatusOr<std::unique_ptr<table_internal::SqliteTable>> opened =
      table_internal::SqliteTable::Open(TableRef{db_path, table});
  if (!opened.ok()) return opened.status();
  // No slice is open here (this runs between items), so any table may go.
  while (!open_order_.empty() &&
         static_cast<int64_t>(tables_.size()) >=
             std::max<int64_t>(options_.max_open_tables, 1)) {
    tables_.erase(open_order_.front());
    open_order_.erase(open_order_.begin());
  }
  table_internal::SqliteTable* raw = opened->get();
  tables_[key] = *std::move(opened);
  open_order_.push_back(std::move(key));
  return raw;
}

absl::StatusOr<std::vector<Row>> TableReader::ReadUpTo(ItemSource& source,
                                                       int64_t n) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadUpTo: num_records must be >= 1, got ", n));
  }
  if (!deferred_error_.ok()) {
    absl::Status error = std::move(deferred_error_);
    deferred_error_ = absl::OkStatus();
    return error;
  }
  std::vector<Row> out;
  // Rows already in `out` are returned first, the error on the next call.
  auto fail = [&](absl::Status error) -> absl::StatusOr<std::vector<Row>> {
    if (out.empty()) return error;
    deferred_error_ = std::move(error);
    return out;
  };
  Row row;
  while (static_cast<int64_t>(out.size()) < n) {
    if (!item_.has_value()) {
      absl::StatusOr<WorkItem> next = source.NextItem();
      if (!next.ok()) {
        if (absl::IsOutOfRange(next.status()) && !out.empty()) return out;
        return fail(next.status());
      }
      // On any error below the item stays held (not done).
      absl::StatusOr<SliceSpec> spec = SpecOf(*next);
      if (!spec.ok()) return fail(spec.status());
      absl::StatusOr<TableRef> ref = ParseTableRef(*spec);
      if (!ref.ok()) return fail(ref.status());
      absl::StatusOr<table_internal::SqliteTable*> table =
          OpenTable(ref->db_path, ref->table);
      if (!table.ok()) return fail(table.status());
      absl::StatusOr<std::unique_ptr<table_internal::TableSliceReader>> slice =
          table_internal::TableSliceReader::Open(*table, spec->start,
                                                 spec->end,
                                                 options_.batch_rows);
      if (!slice.ok()) {
        return fail(absl::Status(
            slice.status().code(),
            absl::StrCat("item '", next->item, "': ", slice.status().message())));
      }
      item_ = *std::move(next);
      slice_ = *std::move(slice);
      next_rank_ = spec->start.value_or(0);
    }
    absl::StatusOr<bool> more = slice_->Next(&row);
    if (!more.ok()) return fail(more.status());
    // A split (tail rebalancing) may have ended the item before this row;
    // rows are counted by their rank in the table, like start/end.
    if (*more && !ClaimRecord(*item_, next_rank_)) more = false;
    if (*more) {
      ++next_rank_;
      row.key = absl::StrCat(item_->item, ":", row.rowid);
      out.push_back(std::move(row));
      row = Row();
      ++rows_read_;
      continue;
    }
    // Every row of the item has been returned: it is done.
    WorkItem finished = *std::move(item_);
    item_.reset();
    slice_.reset();
    ++items_done_;
    if (absl::Status s = source.ItemDone(finished); !s.ok()) return fail(s);
  }
  // Every row before the next rank has been returned to the caller.
  if (item_.has_value()) source.NoteProgress(*item_, next_rank_);
  return out;
}

}  // namespace shardq
