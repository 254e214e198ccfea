#include "src/client/embedded_backend.h"

#include <unistd.h>

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/core/process.h"
#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

// Every call naming a queue is checked first (CheckNotInherited): a process
// forked from the one that made the coordinator has a copy of it, and a
// copied queue would hand out again, in the child, every item its original
// hands out in the parent (a DataLoader worker would read the whole data
// set).
class CoordinatorBackend final : public QueueBackend {
 public:
  explicit CoordinatorBackend(CoordinatorImpl* coordinator)
      : coordinator_(coordinator) {}

  absl::StatusOr<QueueInfo> CreateQueue(const QueueConfig& config) override {
    if (absl::Status s = CheckNotInherited(config.name); !s.ok()) return s;
    return coordinator_->CreateQueue(config);
  }
  absl::StatusOr<QueueInfo> GetQueue(absl::string_view queue) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->GetQueue(queue);
  }
  absl::StatusOr<std::vector<WorkItem>> Take(absl::string_view queue,
                                             absl::string_view worker,
                                             int64_t max_items, absl::Time deadline,
                                             int64_t ahead) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->Take(queue, worker, max_items, deadline, ahead);
  }
  absl::StatusOr<CompleteOutcome> Complete(absl::string_view queue,
                                           absl::string_view worker,
                                           uint64_t lease_id, int64_t records) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->Complete(queue, worker, lease_id, records);
  }
  absl::Status Release(absl::string_view queue, absl::string_view worker,
                       uint64_t lease_id) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->Release(queue, worker, lease_id);
  }
  absl::StatusOr<bool> Fail(absl::string_view queue, absl::string_view worker,
                            uint64_t lease_id, absl::string_view reason) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->Fail(queue, worker, lease_id, reason);
  }
  absl::StatusOr<HeartbeatReply> Heartbeat(
      absl::string_view queue, absl::string_view worker,
      const std::vector<uint64_t>& lease_ids,
      const std::vector<std::pair<uint64_t, int64_t>>& progress,
      absl::Duration wait) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    if (!progress.empty()) coordinator_->ReportProgress(queue, worker, progress).IgnoreError();
    return coordinator_->Heartbeat(queue, worker, lease_ids, wait);
  }
  absl::StatusOr<bool> AcceptSplit(absl::string_view queue, absl::string_view worker,
                                   uint64_t lease_id, int64_t split_point) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->AcceptSplit(queue, worker, lease_id, split_point);
  }
  absl::Status ReportProgress(
      absl::string_view queue, absl::string_view worker,
      const std::vector<std::pair<uint64_t, int64_t>>& progress) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->ReportProgress(queue, worker, progress);
  }
  absl::StatusOr<StepTally> AgreeSteps(absl::string_view queue,
                                       const StepReport& report) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->AgreeSteps(queue, report);
  }
  absl::StatusOr<journal::Checkpoint> ExportCheckpoint(absl::string_view queue) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->ExportCheckpoint(queue);
  }
  absl::StatusOr<QueueInfo> RestoreCheckpoint(const journal::Checkpoint& checkpoint,
                                              const std::string& name) override {
    if (absl::Status s = CheckNotInherited(name); !s.ok()) return s;
    return coordinator_->RestoreCheckpoint(checkpoint, name);
  }
  absl::StatusOr<QueueStats> Stats(absl::string_view queue) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->Stats(queue);
  }
  absl::StatusOr<std::vector<QueueStats>> AllStats() override {
    return coordinator_->AllStats();
  }
  absl::StatusOr<bool> PassOver(absl::string_view queue, absl::string_view worker,
                                absl::string_view siblings) override {
    if (absl::Status s = CheckNotInherited(queue); !s.ok()) return s;
    return coordinator_->PassOver(queue, worker, siblings);
  }

 private:
  // OK in the process that made this backend. In a process forked from it:
  // FAILED_PRECONDITION for a queue that was already there when this
  // process first used the backend (the parent's, copied by the fork);
  // queues this process makes afterwards are its own.
  absl::Status CheckNotInherited(absl::string_view queue) {
    if (owner_.current()) return absl::OkStatus();
    const pid_t pid = getpid();
    absl::MutexLock lock(&mu_);
    if (copied_in_ != pid) {  // this process's first call
      copied_in_ = pid;
      inherited_.clear();
      absl::StatusOr<std::vector<QueueStats>> all = coordinator_->AllStats();
      if (all.ok()) {
        for (const QueueStats& q : *all) inherited_.insert(q.name);
      }
    }
    if (!inherited_.contains(queue)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        "queue '", queue, "' is in the embedded coordinator of process ", owner_.pid(),
        " (a WorkQueue made without an address); this process (pid ", pid,
        ") is a fork of it and has only a copy, which would hand out here again every item "
        "the parent hands out. Serve the queue (`shardq serve`) and give its address to every "
        "process (shardq.torch.WorkQueueDataset does so itself), or make the queue only in "
        "the processes that read it"));
  }

  CoordinatorImpl* const coordinator_;
  const OwnerProcess owner_;
  absl::Mutex mu_;
  pid_t copied_in_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_set<std::string> inherited_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::shared_ptr<QueueBackend> EmbeddedBackend() {
  // Process-wide by design (the embedded default); never destroyed so that
  // worker threads outliving main() cannot touch a dead coordinator.
  static CoordinatorImpl* coordinator = new CoordinatorImpl();
  static std::shared_ptr<QueueBackend>* backend =
      new std::shared_ptr<QueueBackend>(
          std::make_shared<CoordinatorBackend>(coordinator));
  return *backend;
}

absl::StatusOr<std::shared_ptr<QueueBackend>> InProcessBackend() { return EmbeddedBackend(); }

std::shared_ptr<QueueBackend> BackendForCoordinator(CoordinatorImpl* coordinator) {
  return std::make_shared<CoordinatorBackend>(coordinator);
}

}  // namespace shardq
