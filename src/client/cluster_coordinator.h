// Where a multi-process job's coordinator runs when the job names none
// (no explicit address, no SHARDQ_ADDRESS, no "shardq" job in TF_CONFIG):
// inside one of the job's own processes, so there is nothing to start.
//  * TF_CONFIG: task 0 of the "chief" job (else "master", else "ps", else
//    "worker") serves on its own host at SHARDQ_PORT (default 7077); every
//    task connects to that host:port.
//  * torchrun (WORLD_SIZE > 1 and MASTER_ADDR): rank 0 serves on
//    MASTER_ADDR:SHARDQ_PORT (default 7077); every rank connects to it.
// The process that serves needs the gRPC server, which shardq_client does
// not link: the Python package starts it (python/shardq/cluster.py); C++
// workers still get DiscoverCoordinator's FAILED_PRECONDITION. Pure apart
// from the injected environment; thread-safe.
#ifndef SHARDQ_CLIENT_CLUSTER_COORDINATOR_H_
#define SHARDQ_CLIENT_CLUSTER_COORDINATOR_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "src/client/discovery.h"

namespace shardq {

inline constexpr int kDefaultShardqPort = 7077;

struct ClusterCoordinator {
  std::string address;      // host:port every task connects to
  bool serve_here = false;  // this task runs the coordinator
  std::string source;       // "TF_CONFIG" or "torchrun"
};

// nullopt when the job names a coordinator (explicit_address, SHARDQ_ADDRESS,
// a TF_CONFIG "shardq" job), when the environment describes no job of
// several processes, or when SHARDQ_EMBEDDED=1. INVALID_ARGUMENT naming the
// variable for a TF_CONFIG that is not JSON of the expected shape, a
// SHARDQ_PORT that is not a port, or a WORLD_SIZE / RANK that is not a
// number.
absl::StatusOr<std::optional<ClusterCoordinator>> FindClusterCoordinator(
    const std::string& explicit_address, const EnvLookup& env);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_CLUSTER_COORDINATOR_H_
