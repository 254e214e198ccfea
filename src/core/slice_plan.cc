#include "src/core/slice_plan.h"

#include <algorithm>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace {

using u128 = unsigned __int128;

int64_t MulDiv(int64_t a, int64_t b, int64_t c) {
  return static_cast<int64_t>(static_cast<u128>(a) * static_cast<u128>(b) /
                              static_cast<u128>(c));
}

std::vector<int64_t> AllocateByShare(const std::vector<SizedWork>& works,
                                     int64_t num_slices) {
  std::vector<int64_t> count(works.size(), 0);
  int64_t total = 0;
  for (const SizedWork& w : works) total += w.size;
  if (total == 0) return count;
  // Largest-remainder apportionment of num_slices by size, with a floor of
  // one slice per non-empty work and a ceiling of one slice per byte/row.
  std::vector<std::pair<int64_t, size_t>> remainders;  // (remainder, index)
  int64_t assigned = 0;
  for (size_t i = 0; i < works.size(); ++i) {
    if (works[i].size == 0) continue;
    u128 scaled = static_cast<u128>(num_slices) * works[i].size;
    int64_t quota = static_cast<int64_t>(scaled / total);
    int64_t remainder = static_cast<int64_t>(scaled % total);
    count[i] = std::min(std::max<int64_t>(quota, 1), works[i].size);
    assigned += count[i];
    if (quota >= 1) remainders.emplace_back(remainder, i);
  }
  // Stable: ties go to the earlier work, so the plan is deterministic.
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [remainder, i] : remainders) {
    if (assigned >= num_slices) break;
    if (count[i] < works[i].size) {
      ++count[i];
      ++assigned;
    }
  }
  // The one-slice floor of small works may overshoot: take slices back from
  // the works whose slices are smallest, so the total stays num_slices
  // (or the number of non-empty works, if that is larger).
  auto smaller_slices = [&](size_t a, size_t b) {  // heap top: smallest slices
    return static_cast<u128>(works[a].size) * count[b] >
           static_cast<u128>(works[b].size) * count[a];
  };
  std::vector<size_t> heap;
  for (size_t i = 0; i < works.size(); ++i) {
    if (count[i] > 1) heap.push_back(i);
  }
  std::make_heap(heap.begin(), heap.end(), smaller_slices);
  while (assigned > num_slices && !heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), smaller_slices);
    const size_t i = heap.back();
    heap.pop_back();
    --count[i];
    --assigned;
    if (count[i] > 1) {
      heap.push_back(i);
      std::push_heap(heap.begin(), heap.end(), smaller_slices);
    }
  }
  return count;
}

}  // namespace

std::vector<int64_t> AllocateSlices(const std::vector<SizedWork>& works,
                                    int64_t num_slices) {
  std::vector<int64_t> count(works.size(), 0);
  std::vector<SizedWork> splittable;
  std::vector<size_t> index;  // of each splittable work in `works`
  int64_t whole = 0;
  for (size_t i = 0; i < works.size(); ++i) {
    if (works[i].splittable) {
      splittable.push_back(works[i]);
      index.push_back(i);
    } else if (works[i].size > 0) {
      count[i] = 1;
      ++whole;
    }
  }
  const std::vector<int64_t> shares =
      AllocateByShare(splittable, std::max<int64_t>(num_slices - whole, 0));
  for (size_t k = 0; k < shares.size(); ++k) count[index[k]] = shares[k];
  return count;
}

absl::StatusOr<std::vector<std::string>> PlanSlices(
    const std::vector<SizedWork>& works, std::optional<int64_t> num_slices) {
  if (works.empty()) {
    return absl::InvalidArgumentError("works is empty: give at least one work");
  }
  for (const SizedWork& w : works) {
    if (w.name.empty()) {
      return absl::InvalidArgumentError("works contains an empty work name");
    }
    if (w.size < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("work '", w.name, "' has negative size ", w.size));
    }
  }
  // A work whose name reads as a range of another ("f?start=0&end=9") would
  // be read as that range of f by every reader, whatever the file it names:
  // refused, sliced or not.
  for (const SizedWork& w : works) {
    absl::StatusOr<SliceSpec> spec = ParseItem(w.name);
    if (spec.ok() && !spec->whole()) {
      return absl::InvalidArgumentError(
          absl::StrCat("work '", w.name, "' already has a range; give whole works"));
    }
  }
  std::vector<std::string> items;
  if (!num_slices.has_value()) {
    for (const SizedWork& w : works) items.push_back(w.name);
    return items;
  }
  if (*num_slices < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_slices must be >= 1, got ", *num_slices));
  }
  std::vector<int64_t> count = AllocateSlices(works, *num_slices);
  // Refused before the item strings are made: a plan a coordinator would
  // refuse may be billions of them.
  const int64_t planned = std::accumulate(count.begin(), count.end(), int64_t{0});
  if (planned > kMaxItemsPerQueue) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_slices ", *num_slices, " cuts the works into ", planned,
        " items, more than the limit of ", kMaxItemsPerQueue,
        " items per queue: give fewer slices"));
  }
  for (size_t i = 0; i < works.size(); ++i) {
    const int64_t size = works[i].size;
    if (count[i] == 0) continue;
    // A work may carry parameters of its own (sqlite:db?table=t).
    absl::StatusOr<SliceSpec> base = ParseItem(works[i].name);
    if (!base.ok()) return base.status();
    if (!base->whole()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "work '", works[i].name, "' already has a range; give whole works"));
    }
    if (!works[i].splittable) {
      items.push_back(works[i].name);  // read whole: no range
      continue;
    }
    for (int64_t k = 0; k < count[i]; ++k) {
      SliceSpec spec = *base;
      spec.start = MulDiv(size, k, count[i]);
      spec.end = MulDiv(size, k + 1, count[i]);
      items.push_back(FormatItem(spec));
    }
  }
  return items;
}

}  // namespace shardq
