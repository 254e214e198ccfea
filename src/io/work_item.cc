#include "shardq/work_item.h"

#include <utility>

#include "absl/status/status.h"
#include "shardq/slice.h"

namespace shardq {

absl::Status ParseWorkItem(WorkItem* item) {
  absl::StatusOr<SliceSpec> spec = ParseItem(item->item);
  if (!spec.ok()) {
    item->spec.reset();
    return spec.status();
  }
  item->spec = *std::move(spec);
  return absl::OkStatus();
}

absl::StatusOr<SliceSpec> SpecOf(const WorkItem& item) {
  if (item.spec.has_value()) return *item.spec;
  return ParseItem(item.item);
}

}  // namespace shardq
