// Finds the coordinator a worker should use, from what the training job
// already has. In this order:
//   1. the explicit address (WorkQueueOptions::address, --address);
//   2. SHARDQ_ADDRESS;
//   3. TF_CONFIG: the address of a "shardq" job in its cluster spec (a
//      job of several tasks: their list "H1:P1,H2:P2", coordinators of
//      which one leads; a task may also be etcd://...); the task
//      ("worker", 3) names the worker "worker-3";
//   4. torchrun: MASTER_ADDR with SHARDQ_PORT; RANK names the worker
//      "rank-<RANK>";
//   5. none: the embedded queue in this process. Refused (see below) when
//      the environment says the job has several processes: each would get
//      a queue of its own and read the whole data set.
// Pure apart from the injected environment lookup; thread-safe.
#ifndef SHARDQ_CLIENT_DISCOVERY_H_
#define SHARDQ_CLIENT_DISCOVERY_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace shardq {

struct Discovered {
  // Empty: embedded. Else an address spec as ParseCoordinatorAddress
  // (coordinator_address.h) reads it: one coordinator, a list, or etcd://.
  std::string address;
  std::string worker_id;  // empty: no name from the environment
  std::string source;     // "explicit", "SHARDQ_ADDRESS", "TF_CONFIG", "torchrun", "embedded"
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// The process environment.
EnvLookup ProcessEnv();

// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> NonEmptyEnv(const EnvLookup& env, const std::string& name);

// INVALID_ARGUMENT when TF_CONFIG is not valid JSON of the expected shape
// or SHARDQ_PORT / WORLD_SIZE is not a number (the message names the
// variable). FAILED_PRECONDITION, naming the fix, when no coordinator is
// found but TF_CONFIG's cluster has more than one training task (chief,
// master and worker jobs together; asked from such a task, not from an
// evaluator or ps) or torchrun's WORLD_SIZE is above 1, unless
// SHARDQ_EMBEDDED=1 opts into one queue per process.
absl::StatusOr<Discovered> DiscoverCoordinator(const std::string& explicit_address,
                                               const EnvLookup& env);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_DISCOVERY_H_
