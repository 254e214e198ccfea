#include "src/core/pass_rule.h"

#include <cstdint>

#include "absl/strings/match.h"

namespace shardq {

bool OnlySiblingsHoldTheRest(const QueueStats& s, const std::string& self,
                             const std::string& siblings) {
  if (s.finished || s.pending > 0) return false;
  // Ranges split off held items (tail rebalancing) are counted in no epoch:
  // the workers' held counts cover them, so every open one must be held.
  int64_t held = 0;
  for (const auto& [worker, w] : s.workers) {
    if (w.held == 0) continue;
    if (worker == self) return false;
    if (!absl::StartsWith(worker, siblings) && w.sessions == 0) return false;
    held += w.held;
  }
  return held > 0 && held >= s.leased + s.split_items_open;
}

}  // namespace shardq
