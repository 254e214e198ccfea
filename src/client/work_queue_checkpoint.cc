// WorkQueue: the progress its readers report, and checkpoints of its queue
// (SaveCheckpoint; restoring one is WorkQueue::RestoreCheckpoint).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "shardq/work_queue.h"
#include "src/client/backend.h"
#include "src/client/checkpoint_file.h"
#include "src/client/work_queue_impl.h"
#include "src/log/log.h"

namespace shardq {

void WorkQueue::Impl::NoteProgress(const WorkItem& item, int64_t offset) {
  absl::MutexLock lock(&mu_);
  if (held_.contains(item.lease_id)) {
    progress_[item.lease_id] = offset;
    progress_unsent_ = true;
  }
}

absl::Status WorkQueue::Impl::ReportProgress() {
  if (absl::Status s = CheckOwner(); !s.ok()) return s;
  std::vector<std::pair<uint64_t, int64_t>> progress;
  {
    absl::MutexLock lock(&mu_);
    progress.assign(progress_.begin(), progress_.end());
    progress_unsent_ = false;
  }
  if (progress.empty()) return absl::OkStatus();
  return backend_->ReportProgress(name_, worker_id_, progress);
}

absl::Status WorkQueue::Impl::SaveCheckpoint(const std::string& path) {
  if (absl::Status s = CheckOwner(); !s.ok()) return s;
  if (absl::Status s = ReportProgress(); !s.ok()) return s;
  // What readers returned beyond the offsets just reported (a shuffle's
  // out-of-order records): read again after a restore from this checkpoint.
  int64_t beyond = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [lease, returned] : returned_) {
      if (held_.contains(lease)) beyond += std::max<int64_t>(0, returned.returned - returned.in_order);
    }
  }
  absl::StatusOr<journal::Checkpoint> checkpoint = backend_->ExportCheckpoint(name_);
  if (!checkpoint.ok()) return checkpoint.status();
  if (absl::Status s = WriteCheckpointFile(path, *checkpoint); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    records_beyond_checkpoint_ = beyond;
  }
  if (beyond > 0) {
    SHARDQ_LOG_WARN(
        "queue '{}', worker '{}': checkpoint '{}' resumes this worker's items after the records "
        "their readers returned in order; {} records returned beyond that (out of order, through "
        "a shuffle) will be returned again after a restore from it",
        name_, worker_id_, path, beyond);
  }
  return absl::OkStatus();
}

int64_t WorkQueue::Impl::records_beyond_checkpoint() const {
  absl::MutexLock lock(&mu_);
  return records_beyond_checkpoint_;
}

}  // namespace shardq
