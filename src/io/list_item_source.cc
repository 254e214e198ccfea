#include "absl/status/status.h"
#include "shardq/item_source.h"

namespace shardq {

ListItemSource::ListItemSource(std::vector<std::string> items)
    : items_(items.begin(), items.end()) {}

absl::StatusOr<WorkItem> ListItemSource::NextItem() {
  if (items_.empty()) return absl::OutOfRangeError("item list exhausted");
  WorkItem item;
  item.item = std::move(items_.front());
  item.index = next_index_++;
  items_.pop_front();
  // A string that does not parse is reported by the item's reader.
  ParseWorkItem(&item).IgnoreError();
  return item;
}

absl::Status ListItemSource::ItemDone(const WorkItem&) { return absl::OkStatus(); }

}  // namespace shardq
