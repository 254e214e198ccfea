// The coordinator: owns every named queue and serialises access to each.
// Knows nothing of any transport: the gRPC service (remote workers) and the
// embedded backend (worker threads in this process) both call it.
//
// Thread-safe. Each queue has its own mutex, never held across I/O or a
// callback; blocked Takes wait on the queue's condition variable and wake on
// every completion, release and expiry.
#ifndef SHARDQ_SERVER_COORDINATOR_IMPL_H_
#define SHARDQ_SERVER_COORDINATOR_IMPL_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/core/clock.h"
#include "src/core/queue_state.h"
#include "shardq/work_item.h"

namespace shardq {

// What a client learns when it creates or attaches to a queue.
struct QueueInfo {
  std::string name;
  uint64_t seed = 0;
  int64_t num_items = 0;
  int64_t num_epochs = 0;
  int64_t num_clients = 1;
  absl::Duration lease_timeout;
  bool created = false;  // false: attached to an existing queue
};

class CoordinatorImpl {
 public:
  // `clock` must outlive the coordinator; nullptr means the real clock.
  explicit CoordinatorImpl(Clock* clock = nullptr);
  CoordinatorImpl(const CoordinatorImpl&) = delete;
  CoordinatorImpl& operator=(const CoordinatorImpl&) = delete;

  // Creates queue `config.name`, or attaches to it when it exists with a
  // compatible config. An unset seed is drawn here. FAILED_PRECONDITION
  // listing the differing fields on a mismatch; INVALID_ARGUMENT on a bad
  // config.
  absl::StatusOr<QueueInfo> CreateQueue(QueueConfig config);

  // Describes an existing queue (NOT_FOUND otherwise), for workers that
  // attach by name without knowing the config.
  absl::StatusOr<QueueInfo> GetQueue(absl::string_view queue);

  // Leases up to `max_items` (>= 1) items to `worker`. Blocks until at least
  // one item is available, the queue is finished, or `deadline` passes.
  // Returns the items (empty at the deadline: "ask again"), or OUT_OF_RANGE
  // when every item of every epoch is completed. NOT_FOUND for an unknown
  // queue; FAILED_PRECONDITION when the worker holds num_clients items.
  absl::StatusOr<std::vector<WorkItem>> Take(absl::string_view queue,
                                             absl::string_view worker,
                                             int64_t max_items,
                                             absl::Time deadline);

  // See QueueState::Complete / Release / Heartbeat.
  absl::StatusOr<CompleteOutcome> Complete(absl::string_view queue,
                                           absl::string_view worker,
                                           uint64_t lease_id);
  absl::Status Release(absl::string_view queue, absl::string_view worker,
                       uint64_t lease_id);
  absl::StatusOr<std::vector<uint64_t>> Heartbeat(
      absl::string_view queue, absl::string_view worker,
      const std::vector<uint64_t>& lease_ids);

  // Wakes every blocked Take (they return no items) and makes later Takes
  // return at once; used before the server stops.
  void Shutdown();

  // NOT_FOUND for an unknown queue.
  absl::StatusOr<QueueStats> Stats(absl::string_view queue);
  // Every queue, sorted by name.
  std::vector<QueueStats> AllStats();

 private:
  struct Entry {
    absl::Mutex mu;
    absl::CondVar changed;  // signalled on completion, release, expiry
    std::unique_ptr<QueueState> state ABSL_GUARDED_BY(mu);
  };

  absl::StatusOr<std::shared_ptr<Entry>> Find(absl::string_view queue);
  static QueueInfo Describe(const QueueConfig& config, bool created);

  Clock* const clock_;
  std::atomic<bool> shutting_down_{false};
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> queues_
      ABSL_GUARDED_BY(mu_);
};

// A seed drawn from the operating system's entropy.
uint64_t DrawSeed();

}  // namespace shardq

#endif  // SHARDQ_SERVER_COORDINATOR_IMPL_H_
