// CoordinatorImpl::AgreeSteps: equal steps across ranks. The agreement
// lives beside the queue it belongs to, under the queue's mutex (a short
// hold: a map update), and is not journaled (see step_agreement.h).
#include <memory>

#include "src/server/coordinator_impl.h"

namespace shardq {

absl::StatusOr<StepTally> CoordinatorImpl::AgreeSteps(absl::string_view queue,
                                                      const StepReport& report) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  absl::MutexLock lock(&(*entry)->mu);
  if ((*entry)->steps == nullptr) {
    (*entry)->steps = std::make_unique<StepAgreements>(std::string(queue));
  }
  return (*entry)->steps->Report(report);
}

}  // namespace shardq
