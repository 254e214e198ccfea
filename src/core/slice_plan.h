// Slice planning: works with their sizes -> the item strings of one epoch.
// Pure: sizes are measured by the caller. Thread-compatible.
#ifndef SHARDQ_CORE_SLICE_PLAN_H_
#define SHARDQ_CORE_SLICE_PLAN_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace shardq {

struct SizedWork {
  std::string name;  // already prefixed
  int64_t size = 0;  // bytes for files, rows for tables
  // False for a work that can only be read whole (a GZIP/ZLIB compressed
  // file: a stream cannot be entered mid-way).
  bool splittable = true;
};

// num_slices unset: one item per work, the work name itself (sizes unused).
// num_slices = N (>= 1): about N near-equal slices by size in total, never
// crossing a work; every non-empty work gets at least one slice (so the plan
// may exceed N when N < the number of non-empty works), empty works none,
// and no slice is empty. Slice k of a work of size S cut into K slices
// covers [S*k/K, S*(k+1)/K). Items are "<name>?start=<s>&end=<e>".
// A non-empty work that is not splittable is one item, its name with no
// range (read whole), and counts as one of the N: the splittable works
// share the other N - U slices (U: the unsplittable works) by size.
// INVALID_ARGUMENT when works is empty, num_slices < 1, a size < 0, a work
// name reads as a range of a work ("f?start=0&end=9", sliced or not), or the
// plan would have more than kMaxItemsPerQueue items (src/core/queue_state.h;
// refused before any item string is made).
absl::StatusOr<std::vector<std::string>> PlanSlices(
    const std::vector<SizedWork>& works, std::optional<int64_t> num_slices);

// How many slices each work gets (the allocation step of PlanSlices): one
// for each non-empty unsplittable work, the rest by size.
std::vector<int64_t> AllocateSlices(const std::vector<SizedWork>& works,
                                    int64_t num_slices);

}  // namespace shardq

#endif  // SHARDQ_CORE_SLICE_PLAN_H_
