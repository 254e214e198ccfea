#include "src/log/mutex_mode.h"

#include <cstdlib>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace shardq {

void UseProductionMutexMode() {
  const char* keep = std::getenv("SHARDQ_MUTEX_DEADLOCK_CHECK");
  if (keep != nullptr && std::strcmp(keep, "1") == 0) return;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace shardq
