#include "src/client/embedded_backend.h"

#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

class CoordinatorBackend final : public QueueBackend {
 public:
  explicit CoordinatorBackend(CoordinatorImpl* coordinator)
      : coordinator_(coordinator) {}

  absl::StatusOr<QueueInfo> CreateQueue(const QueueConfig& config) override {
    return coordinator_->CreateQueue(config);
  }
  absl::StatusOr<QueueInfo> GetQueue(absl::string_view queue) override {
    return coordinator_->GetQueue(queue);
  }
  absl::StatusOr<std::vector<WorkItem>> Take(absl::string_view queue,
                                             absl::string_view worker,
                                             int64_t max_items, absl::Time deadline,
                                             int64_t ahead) override {
    return coordinator_->Take(queue, worker, max_items, deadline, ahead);
  }
  absl::StatusOr<CompleteOutcome> Complete(absl::string_view queue,
                                           absl::string_view worker,
                                           uint64_t lease_id, int64_t records) override {
    return coordinator_->Complete(queue, worker, lease_id, records);
  }
  absl::Status Release(absl::string_view queue, absl::string_view worker,
                       uint64_t lease_id) override {
    return coordinator_->Release(queue, worker, lease_id);
  }
  absl::StatusOr<bool> Fail(absl::string_view queue, absl::string_view worker,
                            uint64_t lease_id, absl::string_view reason) override {
    return coordinator_->Fail(queue, worker, lease_id, reason);
  }
  absl::StatusOr<HeartbeatReply> Heartbeat(
      absl::string_view queue, absl::string_view worker,
      const std::vector<uint64_t>& lease_ids,
      const std::vector<std::pair<uint64_t, int64_t>>& progress,
      absl::Duration wait) override {
    if (!progress.empty()) coordinator_->ReportProgress(queue, worker, progress).IgnoreError();
    return coordinator_->Heartbeat(queue, worker, lease_ids, wait);
  }
  absl::StatusOr<bool> AcceptSplit(absl::string_view queue, absl::string_view worker,
                                   uint64_t lease_id, int64_t split_point) override {
    return coordinator_->AcceptSplit(queue, worker, lease_id, split_point);
  }
  absl::Status ReportProgress(
      absl::string_view queue, absl::string_view worker,
      const std::vector<std::pair<uint64_t, int64_t>>& progress) override {
    return coordinator_->ReportProgress(queue, worker, progress);
  }
  absl::StatusOr<StepTally> AgreeSteps(absl::string_view queue,
                                       const StepReport& report) override {
    return coordinator_->AgreeSteps(queue, report);
  }
  absl::StatusOr<journal::Checkpoint> ExportCheckpoint(absl::string_view queue) override {
    return coordinator_->ExportCheckpoint(queue);
  }
  absl::StatusOr<QueueInfo> RestoreCheckpoint(const journal::Checkpoint& checkpoint,
                                              const std::string& name) override {
    return coordinator_->RestoreCheckpoint(checkpoint, name);
  }
  absl::StatusOr<QueueStats> Stats(absl::string_view queue) override {
    return coordinator_->Stats(queue);
  }
  absl::StatusOr<std::vector<QueueStats>> AllStats() override {
    return coordinator_->AllStats();
  }
  absl::StatusOr<bool> PassOver(absl::string_view queue, absl::string_view worker,
                                absl::string_view siblings) override {
    return coordinator_->PassOver(queue, worker, siblings);
  }

 private:
  CoordinatorImpl* const coordinator_;
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
