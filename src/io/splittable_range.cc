#include "shardq/splittable_range.h"

#include <algorithm>

#include "shardq/work_item.h"

namespace shardq {

SplittableRange::SplittableRange(int64_t start, int64_t end)
    : start_(start), end_(end), claimed_(-1) {}

bool SplittableRange::Claim(int64_t offset) {
  claimed_.store(offset + 1);
  if (offset < end_.load()) return true;
  // Stopping is decided only while no split is moving the end.
  absl::MutexLock lock(&mu_);
  return offset < end_.load();
}

std::optional<int64_t> SplittableRange::Split(int64_t point, int64_t min_residual) {
  absl::MutexLock lock(&mu_);
  const int64_t old_end = end_.load();
  // A reader that never claimed a record may not know about splits (or has
  // not started): refuse rather than risk it reading past the new end.
  const int64_t claimed = claimed_.load();
  if (claimed < 0) return std::nullopt;
  // The head keeps at least one unit: an empty head is no split.
  int64_t at = std::max({point, claimed, start_ + 1});
  while (true) {
    if (at >= old_end || old_end - at < std::max<int64_t>(min_residual, 1)) {
      end_.store(old_end);
      return std::nullopt;
    }
    end_.store(at);
    // A reader that claimed a record at or after `at` before it could see
    // the new end keeps that record: the split moves past it.
    const int64_t now_claimed = claimed_.load();
    if (now_claimed <= at) return at;
    at = now_claimed;
  }
}

bool ClaimRecord(const WorkItem& item, int64_t offset) {
  return item.range == nullptr || item.range->Claim(offset);
}

}  // namespace shardq
