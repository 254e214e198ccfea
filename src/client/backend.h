// The interface between a WorkQueue and wherever its queue lives: in this
// process (EmbeddedBackend) or in a coordinator reached over the network
// (the remote backend). Callers of WorkQueue never see which. The embedded
// backend is its own target (src/client/embedded_backend.h): only it sees the
// server's CoordinatorImpl.
//
// Implementations are thread-safe.
#ifndef SHARDQ_CLIENT_BACKEND_H_
#define SHARDQ_CLIENT_BACKEND_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/shardq/journal.pb.h"
#include "shardq/work_item.h"
#include "src/core/pass_rule.h"
#include "src/types/queue_types.h"

namespace shardq {

// What a worker's session pushes to it (see QueueBackend::BeginSession).
// Called on the session's own thread: an implementation returns quickly and
// does not call the backend from there (it hands the work to a thread of
// its own).
class SessionListener {
 public:
  virtual ~SessionListener() = default;
  // Split proposals for this worker's leases, the moment they are made (a
  // proposal is repeated until answered with AcceptSplit).
  virtual void OnSplitProposals(const std::vector<SplitProposal>& proposals) = 0;
  // Leases this worker no longer holds (they expired while no session of
  // it was open).
  virtual void OnLostLeases(const std::vector<uint64_t>& lease_ids) = 0;
};

// The answer to QueueBackend::CompleteAndTake: the completion's outcome and
// the take's, each as Complete and Take would return it.
struct CompleteAndTakeReply {
  absl::StatusOr<CompleteOutcome> completed = CompleteOutcome::kCompleted;
  absl::StatusOr<std::vector<WorkItem>> taken = std::vector<WorkItem>{};
};

class QueueBackend {
 public:
  virtual ~QueueBackend() = default;

  // Creates the queue or attaches to it (see CoordinatorImpl::CreateQueue).
  virtual absl::StatusOr<QueueInfo> CreateQueue(const QueueConfig& config) = 0;
  // Describes an existing queue; NOT_FOUND when there is none.
  virtual absl::StatusOr<QueueInfo> GetQueue(absl::string_view queue) = 0;

  // Leases up to max_items items; blocks at most until `deadline`, then
  // returns an empty vector. OUT_OF_RANGE at end of input. `ahead`: the
  // items the worker keeps ready beyond those it reads (its take_ahead),
  // which it may hold beyond num_clients (QueueState::Take).
  virtual absl::StatusOr<std::vector<WorkItem>> Take(absl::string_view queue,
                                                     absl::string_view worker,
                                                     int64_t max_items,
                                                     absl::Time deadline,
                                                     int64_t ahead) = 0;
  // The same, keeping nothing ready (ahead 0): a client that takes items
  // one by one.
  absl::StatusOr<std::vector<WorkItem>> Take(absl::string_view queue, absl::string_view worker,
                                             int64_t max_items, absl::Time deadline) {
    return Take(queue, worker, max_items, deadline, /*ahead=*/0);
  }
  // `records`: how many records the worker read from the item (0: not
  // counted; see QueueState::Complete).
  virtual absl::StatusOr<CompleteOutcome> Complete(absl::string_view queue,
                                                   absl::string_view worker,
                                                   uint64_t lease_id, int64_t records) = 0;
  virtual absl::Status Release(absl::string_view queue,
                               absl::string_view worker, uint64_t lease_id) = 0;
  // Completes `lease_id`, then leases up to max_items items as Take would
  // (the take is tried whatever became of the completion). Over a session
  // both travel in one message and are answered by one; elsewhere it is
  // Complete then Take. A failure of the call itself (the coordinator is
  // unreachable) is in both fields.
  virtual CompleteAndTakeReply CompleteAndTake(absl::string_view queue,
                                               absl::string_view worker, uint64_t lease_id,
                                               int64_t records, int64_t max_items,
                                               absl::Time deadline, int64_t ahead) {
    CompleteAndTakeReply reply;
    reply.completed = Complete(queue, worker, lease_id, records);
    reply.taken = Take(queue, worker, max_items, deadline, ahead);
    return reply;
  }
  // Opens `worker`'s session with `queue`. True: from now on this backend
  // carries that worker's calls for that queue over one session, whose open
  // stream keeps the worker's leases alive (no Heartbeat is needed) and
  // which pushes proposals and lost leases to `listener` until EndSession.
  // False: this backend has no sessions (in-process, sessions turned off,
  // or a coordinator that predates them): heartbeat as before. An error
  // (NOT_FOUND queue, FAILED_PRECONDITION for an incompatible protocol
  // version) names what went wrong.
  virtual absl::StatusOr<bool> BeginSession(absl::string_view queue, absl::string_view worker,
                                            SessionListener* listener) {
    return false;
  }
  // Closes the session BeginSession opened; `listener` is not called once
  // this returns. No-op without one.
  virtual void EndSession(absl::string_view queue, absl::string_view worker) {}

  // A failed attempt at the item (see CoordinatorImpl::Fail): true when the
  // item is now set aside as failed.
  virtual absl::StatusOr<bool> Fail(absl::string_view queue, absl::string_view worker,
                                    uint64_t lease_id, absl::string_view reason) {
    return absl::UnimplementedError("this backend cannot report failed attempts");
  }
  // Renews the leases and records progress (lease id, consumed offset);
  // returns the leases the worker no longer holds and the split proposals
  // awaiting its answer. While splits are possible the coordinator may hold
  // the answer up to `wait` for a proposal (CoordinatorImpl::Heartbeat).
  virtual absl::StatusOr<HeartbeatReply> Heartbeat(
      absl::string_view queue, absl::string_view worker,
      const std::vector<uint64_t>& lease_ids,
      const std::vector<std::pair<uint64_t, int64_t>>& progress, absl::Duration wait) = 0;
  // Answers a split proposal (see CoordinatorImpl::AcceptSplit).
  virtual absl::StatusOr<bool> AcceptSplit(absl::string_view queue, absl::string_view worker,
                                           uint64_t lease_id, int64_t split_point) = 0;
  // Records progress synchronously (see CoordinatorImpl::ReportProgress).
  virtual absl::Status ReportProgress(
      absl::string_view queue, absl::string_view worker,
      const std::vector<std::pair<uint64_t, int64_t>>& progress) = 0;
  // Equal steps across ranks (see CoordinatorImpl::AgreeSteps).
  virtual absl::StatusOr<StepTally> AgreeSteps(absl::string_view queue,
                                               const StepReport& report) {
    return absl::UnimplementedError("this backend cannot agree on steps");
  }
  virtual absl::StatusOr<journal::Checkpoint> ExportCheckpoint(absl::string_view queue) = 0;
  virtual absl::StatusOr<QueueInfo> RestoreCheckpoint(const journal::Checkpoint& checkpoint,
                                                      const std::string& name) = 0;
  virtual absl::StatusOr<QueueStats> Stats(absl::string_view queue) = 0;
  // Whether `worker`, a DataLoader worker whose siblings' ids start with
  // `siblings`, may end its pass (CoordinatorImpl::PassOver). By default
  // the rule over Stats() (src/core/pass_rule.h): what a backend without a
  // cheaper way answers.
  virtual absl::StatusOr<bool> PassOver(absl::string_view queue, absl::string_view worker,
                                        absl::string_view siblings) {
    absl::StatusOr<QueueStats> stats = Stats(queue);
    if (!stats.ok()) return stats.status();
    return OnlySiblingsHoldTheRest(*stats, std::string(worker), std::string(siblings));
  }
  // Every queue of the coordinator, sorted by name.
  virtual absl::StatusOr<std::vector<QueueStats>> AllStats() = 0;
  // Who led the job at the last Stats/AllStats answer, when the coordinator
  // is one of a highly available job (`serve --etcd`); nullopt otherwise.
  virtual std::optional<Leadership> LastLeadership() const { return std::nullopt; }
  // HOST:PORT of the coordinator's status page (`serve --http`) at the last
  // Stats/AllStats answer; empty when it serves none or is in this process.
  virtual std::string LastStatusPage() const { return ""; }

  // From now on, calls are tried once (with a short deadline) instead of
  // retried, and calls already retrying stop at their next failed attempt:
  // the owner is closing and must not wait out a long outage.
  virtual void BeginShutdown() {}

  // Whether calls go over the network to a coordinator, so that one may
  // wait out an outage (retrying for up to RetryPolicy::total_budget);
  // false for a coordinator in this process.
  virtual bool Remote() const { return false; }
};

// The backend of a WorkQueue without an address: the process-wide embedded
// coordinator (src/client/embedded_backend.h) in shardq::client; in
// shardq::remote_client, which links no coordinator, FAILED_PRECONDITION
// saying that an address is needed (src/client/no_embedded.cc). Which one a
// program gets is decided by the target it links.
absl::StatusOr<std::shared_ptr<QueueBackend>> InProcessBackend();

// How long a remote client waits for its coordinator's first answer before
// a call fails with UNAVAILABLE (see RemoteOptions::connect_timeout).
inline constexpr absl::Duration kDefaultConnectTimeout = absl::Seconds(60);

// The backend that an address (or, when empty, the environment: see
// discovery.h) selects, and the worker name to use: `worker_id` if set,
// else the one the environment gives (possibly empty). A remote backend
// waits at most `connect_timeout` for the coordinator's first answer.
// FAILED_PRECONDITION when the environment describes a multi-process job
// without a coordinator (see DiscoverCoordinator).
struct ConnectedBackend {
  std::shared_ptr<QueueBackend> backend;
  std::string worker_id;
  std::string address;  // empty: embedded
};
absl::StatusOr<ConnectedBackend> ConnectBackend(const std::string& address,
                                                const std::string& token,
                                                const std::string& tls_ca_file,
                                                const std::string& worker_id,
                                                absl::Duration connect_timeout =
                                                    kDefaultConnectTimeout);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_BACKEND_H_
