// The values that client and coordinator exchange: a queue's config, what
// a client learns about a queue, and the answers of Complete and Heartbeat.
// Plain structs shared by core (QueueState), server (CoordinatorImpl), rpc
// (their wire form) and client (QueueBackend), so that none of those has to
// include another's headers for them. No logic lives here.
#ifndef SHARDQ_TYPES_QUEUE_TYPES_H_
#define SHARDQ_TYPES_QUEUE_TYPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace shardq {

// The most leases a worker may hold beyond num_clients for the items its
// client keeps ready (WorkQueueOptions::take_ahead; QueueState::Take): a
// larger take_ahead counts as this many.
inline constexpr int64_t kMaxTakeAhead = 64;

// Everything that defines a queue. Two clients naming the same queue must
// agree on it (see ConfigDifferences in src/core/queue_state.h, which also
// holds the limits ValidateConfig enforces).
struct QueueConfig {
  std::string name;
  std::vector<std::string> items;  // the slice plan, one epoch
  int64_t num_epochs = 1;
  bool shuffle = true;
  std::optional<uint64_t> seed;    // unset only in requests; resolved state always has one
  int64_t num_clients = 1;
  absl::Duration lease_timeout = absl::Seconds(30);
  // Tail rebalancing (see the top of src/core/queue_state.h). Clients attaching to a
  // queue must agree on it like on every other field (ConfigDifferences).
  bool split = true;
  // Smallest range split off, in item units (bytes, or rows for tables).
  int64_t split_min_residual = kDefaultSplitMinResidual;
  // Failed attempts (QueueState::Fail) after which an item is set aside as
  // failed. Not part of a queue's identity: the creator's setting holds.
  int64_t max_attempts = kDefaultMaxAttempts;

  static constexpr int64_t kDefaultSplitMinResidual = 1;
  static constexpr int64_t kDefaultMaxAttempts = 3;
};

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

// The answer to a completion: counted, or a duplicate that changed nothing
// (see QueueState::Complete).
enum class CompleteOutcome { kCompleted, kDuplicate };

// "Stop reading lease `lease_id` at `split_point`", for the lease's holder.
struct SplitProposal {
  uint64_t lease_id = 0;
  int64_t split_point = 0;
  int64_t min_residual = 1;  // refuse if less than this would be split off
};

// What a heartbeat tells the worker.
struct HeartbeatReply {
  std::vector<uint64_t> lost;          // leases the worker no longer holds
  std::vector<SplitProposal> splits;   // proposals awaiting its answer
};

// Who serves a highly available job (`shardq serve --etcd`), as its
// leader tells it in its status answer.
struct Leadership {
  std::string job;
  std::string leader;                  // the leader's advertised address
  int64_t term = 0;                    // its election key's create revision
  std::vector<std::string> standbys;   // advertised addresses, in etcd's key order
  int64_t failovers = 0;               // times the leader took over after standing by
};

}  // namespace shardq

#endif  // SHARDQ_TYPES_QUEUE_TYPES_H_
