#include "src/client/planner.h"

#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/core/slice_plan.h"
#include "src/io/compression.h"
#include "src/io/file.h"
#include "src/io/sqlite_table.h"
#include "src/log/log.h"

namespace shardq {
namespace {

// Rows of a table work, counted (planning cuts row ranges).
absl::StatusOr<int64_t> TableRows(const std::string& name) {
  absl::StatusOr<SliceSpec> spec = ParseItem(name);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<TableRef> ref = ParseTableRef(*spec);
  if (!ref.ok()) return ref.status();
  return CountTableRows(*ref);
}

// Bytes of a file work, rows of a table work. A compressed file cannot be
// cut: it is one whole item (the path with no range) whatever num_slices
// is, and a note on stderr tells the user so.
absl::StatusOr<SizedWork> MeasureWork(std::string name) {
  SizedWork work;
  work.name = std::move(name);
  absl::StatusOr<int64_t> size =
      IsTableItem(work.name) ? TableRows(work.name) : FileSize(work.name);
  if (!size.ok()) return size.status();
  work.size = *size;
  if (IsTableItem(work.name)) return work;
  absl::StatusOr<FileCompression> compression = DetectCompression(work.name);
  if (!compression.ok()) return compression.status();
  if (*compression == FileCompression::kNone) return work;
  work.splittable = false;
  SHARDQ_LOG_WARN("'{}' is {}-compressed and cannot be cut: it is planned as one whole item",
                  work.name, std::string(CompressionName(*compression)));
  return work;
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
    // The prefix goes before the path of a table work, not its scheme.
    constexpr absl::string_view kTable = "sqlite:";
    absl::StatusOr<SizedWork> w = MeasureWork(
        absl::StartsWith(work, kTable)
            ? absl::StrCat(kTable, prefix, work.substr(kTable.size()))
            : prefix + work);
    if (!w.ok()) return w.status();
    total += w->size;
    sized.push_back(*std::move(w));
  }
  if (num_slices.has_value() && total == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all ", works.size(), " works are empty: nothing to slice"));
  }
  return PlanSlices(sized, num_slices);
}

}  // namespace shardq
