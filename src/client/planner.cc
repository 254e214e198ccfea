#include "src/client/planner.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/core/slice_plan.h"
#include "src/io/file.h"

namespace shardq {
namespace {

absl::StatusOr<int64_t> WorkSize(const std::string& name) {
  if (absl::StartsWith(name, "sqlite:")) {
    return absl::UnimplementedError(absl::StrCat(
        "work '", name, "': table works are not supported by this build yet"));
  }
  return FileSize(name);
}

}  // namespace

absl::StatusOr<std::vector<std::string>> PlanWorks(
    const std::vector<std::string>& works, const std::string& prefix,
    std::optional<int64_t> num_slices) {
  if (works.empty()) {
    return absl::InvalidArgumentError("works is empty: give at least one work");
  }
  if (num_slices.has_value() && *num_slices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_slices must be >= 1, got ", *num_slices));
  }
  std::vector<SizedWork> sized;
  sized.reserve(works.size());
  int64_t total = 0;
  for (const std::string& work : works) {
    if (work.empty()) {
      return absl::InvalidArgumentError("works contains an empty work name");
    }
    SizedWork w;
    w.name = prefix + work;
    absl::StatusOr<int64_t> size = WorkSize(w.name);
    if (!size.ok()) return size.status();
    w.size = *size;
    total += w.size;
    sized.push_back(std::move(w));
  }
  if (num_slices.has_value() && total == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all ", works.size(), " works are empty: nothing to slice"));
  }
  return PlanSlices(sized, num_slices);
}

}  // namespace shardq
