// WorkQueues over a given QueueBackend, for code inside shardq that connects
// itself (the CLI's worker, benchmarks) and for tests over a CoordinatorImpl.
// Users make WorkQueues from WorkQueueOptions (shardq/work_queue.h).
#ifndef SHARDQ_CLIENT_WORK_QUEUE_BACKEND_H_
#define SHARDQ_CLIENT_WORK_QUEUE_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "shardq/options.h"
#include "shardq/work_queue.h"
#include "src/client/backend.h"

namespace shardq {

class WorkQueueFactory {
 public:
  // As WorkQueue::Create, over `backend`; options.worker_id empty: a unique
  // name.
  static absl::StatusOr<std::unique_ptr<WorkQueue>> Create(
      const WorkQueueOptions& options, std::shared_ptr<QueueBackend> backend);

  // As WorkQueue::Attach, over `backend`; empty worker_id: a unique name.
  // `take_ahead` as WorkQueueOptions::take_ahead (>= 0).
  static absl::StatusOr<std::unique_ptr<WorkQueue>> Attach(
      const std::string& name, std::shared_ptr<QueueBackend> backend,
      const std::string& worker_id, int64_t take_ahead = 1);

  // As WorkQueue::RestoreCheckpoint, over `backend`; empty worker_id: a
  // unique name.
  static absl::StatusOr<std::unique_ptr<WorkQueue>> RestoreCheckpoint(
      std::shared_ptr<QueueBackend> backend, const std::string& path,
      const std::string& name, const std::string& worker_id);
};

}  // namespace shardq

#endif  // SHARDQ_CLIENT_WORK_QUEUE_BACKEND_H_
