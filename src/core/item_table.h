// A queue's slice plan in compact form: each item is (work, start, end)
// integers, and each work's text (the item string without its range) is
// stored once per queue. Item strings arrive in QueueConfig.items; each is
// parsed once, here (ParseItem), and rendered again only when an item is
// handed out, listed or checkpointed. A rendered planned item is
// byte-identical to the string it was made from:
//  * an item whose string is what FormatItem makes of its parse (the form
//    every planner writes) keeps its work text (with any other query
//    parameters) and its range as integers;
//  * any other item (no range and no query, a string ParseItem refuses, or
//    one whose parameters are in another order) is a work of its own whose
//    text is the whole string; its range, when it has one, is still kept as
//    integers for splits.
// A range narrowed from a planned item (a split head, a split-off range, a
// residual range of a checkpoint) renders as FormatItem writes it.
//
// Immutable once built, hence thread-safe; a queue's state and its
// snapshots share one table.
#ifndef SHARDQ_CORE_ITEM_TABLE_H_
#define SHARDQ_CORE_ITEM_TABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/shardq/journal.pb.h"

namespace shardq {

// A range of an item: -1 for an unset bound.
struct ItemRange {
  int64_t start = -1;
  int64_t end = -1;

  bool full() const { return start >= 0 && end >= 0; }
  bool operator==(const ItemRange& o) const { return start == o.start && end == o.end; }
  bool operator!=(const ItemRange& o) const { return !(*this == o); }
};

class ItemTable {
 public:
  // How a work's items render (stored as one byte per work in journal form).
  enum class WorkKind : uint8_t {
    kQuery = 0,    // text + "?start=S&end=E" (text alone when no range)
    kParams = 1,   // text (which ends in other parameters) + "&start=S&end=E"
    kLiteral = 2,  // the whole item string; narrowed ranges via ParseItem
    kUnparsed = 3, // the whole item string, which ParseItem refuses
  };

  // Parses every item once.
  static std::shared_ptr<const ItemTable> FromStrings(const std::vector<std::string>& items);
  // The table stored by ToProto. DATA_LOSS naming `what` when it is
  // inconsistent (a work index or kind out of range, arrays of unequal
  // lengths, a negative range).
  static absl::StatusOr<std::shared_ptr<const ItemTable>> FromProto(
      const journal::ItemTable& table, absl::string_view what);
  void ToProto(journal::ItemTable* out) const;

  int64_t size() const { return static_cast<int64_t>(work_.size()); }
  int64_t num_works() const { return static_cast<int64_t>(works_.size()); }

  // The planned item string, as it was given.
  std::string Render(int64_t index) const;
  // Whether planned item `index` renders to `item` (allocates nothing for
  // the common kinds).
  bool Equals(int64_t index, absl::string_view item) const;
  // Every planned item string, in plan order.
  std::vector<std::string> Strings() const;

  // The planned item's own range (unset bounds when it has none).
  ItemRange Range(int64_t index) const { return ItemRange{start_[Idx(index)], end_[Idx(index)]}; }
  // False for an item whose string ParseItem refuses (it has no range, and
  // cannot be narrowed).
  bool Parses(int64_t index) const { return KindOf(index) != WorkKind::kUnparsed; }
  // Planned item `index` narrowed to `range`: the planned string itself
  // when `range` is the item's own range, else FormatItem's form.
  std::string RenderRange(int64_t index, ItemRange range) const;
  // The range of `item`, a string of planned item `index`'s work (a
  // checkpoint's residual). INVALID_ARGUMENT when it does not parse.
  absl::StatusOr<ItemRange> ParseRange(absl::string_view item) const;

  // The size of planned item `index`'s work when the plan was made (bytes
  // of a file, rows of a table): the end of its last range, when the plan
  // cut the work into ranges from 0 (every item of the work has one, and
  // renders as FormatItem writes it); -1 otherwise (a whole-work item, a
  // literal). Readers of files refuse a file whose size differs: records
  // appended after planning would otherwise never be read.
  int64_t WorkSize(int64_t index) const { return work_size_[work_[Idx(index)]]; }

  // Heap bytes the table holds (for tests of its size per item).
  size_t BytesUsed() const;

 private:
  struct Work {
    std::string text;
    WorkKind kind = WorkKind::kQuery;
  };
  static size_t Idx(int64_t index) { return static_cast<size_t>(index); }
  WorkKind KindOf(int64_t index) const { return works_[work_[Idx(index)]].kind; }

  // Sets work_size_ from the items (see WorkSize); the last step of
  // building a table.
  void SetWorkSizes();

  std::vector<Work> works_;
  std::vector<int64_t> work_size_;  // per work
  // Per planned item, structure of arrays: 20 bytes an item.
  std::vector<uint32_t> work_;
  std::vector<int64_t> start_;
  std::vector<int64_t> end_;
};

}  // namespace shardq

#endif  // SHARDQ_CORE_ITEM_TABLE_H_
