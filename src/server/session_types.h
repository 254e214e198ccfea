// The values of a worker session as CoordinatorImpl sees them (no wire
// types): the operations of one session request, their results, and the
// interface through which the coordinator answers and pushes to the
// session's transport. See CoordinatorImpl::OpenSession.
#ifndef SHARDQ_SERVER_SESSION_TYPES_H_
#define SHARDQ_SERVER_SESSION_TYPES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "shardq/work_item.h"
#include "src/types/queue_types.h"

namespace shardq {

// One session request's operations, applied in this order (the order of
// coordinator.proto's SessionRequest). Reused from request to request
// (Clear keeps the vectors' capacity).
struct SessionOps {
  struct SplitAnswer {
    uint64_t lease_id = 0;
    int64_t split_point = 0;
  };
  struct Release {
    uint64_t lease_id = 0;
    bool failed = false;
    std::string reason;
  };
  std::vector<SplitAnswer> split_answers;
  std::vector<std::pair<uint64_t, int64_t>> progress;  // (lease id, offset)
  std::vector<uint64_t> completions;
  // Records read from each item of `completions`, in the same order
  // (QueueState::Complete); shorter: the rest not counted.
  std::vector<int64_t> completion_records;
  std::vector<Release> releases;
  // > 0: lease up to this many items, waiting up to take_wait while every
  // remaining item is held by other workers.
  int64_t take = 0;
  absl::Duration take_wait;
  // Items the worker keeps ready beyond those it reads (QueueState::Take).
  int64_t take_ahead = 0;

  void Clear() {
    split_answers.clear();
    progress.clear();
    completions.clear();
    completion_records.clear();
    releases.clear();
    take = 0;
    take_wait = absl::ZeroDuration();
    take_ahead = 0;
  }
};

// The answer to one SessionOps, result by result.
struct SessionResult {
  struct Split {
    uint64_t lease_id = 0;
    absl::Status status;
    bool accepted = false;
  };
  struct Completion {
    uint64_t lease_id = 0;
    absl::Status status;
    bool duplicate = false;
  };
  struct Release {
    uint64_t lease_id = 0;
    absl::Status status;
    bool item_failed = false;
  };
  std::vector<Split> splits;
  absl::Status progress;  // the first progress report that failed
  std::vector<Completion> completions;
  std::vector<Release> releases;
  // The take's answer (OK with no items and no end of input: ask again).
  absl::Status take;
  std::vector<WorkItem> items;
  bool end_of_input = false;
  // Proposals awaiting this worker's answer (each sent until answered).
  std::vector<SplitProposal> proposals;

  void Clear() {
    splits.clear();
    progress = absl::OkStatus();
    completions.clear();
    releases.clear();
    take = absl::OkStatus();
    items.clear();
    end_of_input = false;
    proposals.clear();
  }
};

// What OpenSession tells the worker.
struct SessionOpening {
  QueueInfo queue;
  std::vector<uint64_t> lost_lease_ids;  // of the lease ids it named
  std::vector<SplitProposal> proposals;  // awaiting its answer
};

// The transport side of one session (the gRPC reactor). Its methods are
// called from any thread, never with a coordinator lock held, and must be
// quick (queue a message; no I/O wait).
class SessionSink {
 public:
  virtual ~SessionSink() = default;
  // The SessionResult of the step started with `cookie` is complete (see
  // CoordinatorImpl::SessionStep). Called exactly once per such step.
  virtual void StepDone(uint64_t cookie) = 0;
  // A split proposal for one of this worker's leases, made just now.
  virtual void PushSplit(const SplitProposal& proposal) = 0;
  // The coordinator is shutting down: end the session.
  virtual void CoordinatorShuttingDown() = 0;
};

}  // namespace shardq

#endif  // SHARDQ_SERVER_SESSION_TYPES_H_
