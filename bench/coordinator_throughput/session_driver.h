// bench/coordinator_throughput: shardq's like-for-like row, the worker
// Session stream (coordinator.proto, rpc Session) spoken directly.
//
// Each client opens one Session stream per queue (outside the measured
// time), over a channel with a TCP connection of its own (as each Redis
// client has its own connection), and keeps one item in flight: the
// completion of the previous item and the take of the next travel in one
// SessionRequest, answered by one SessionResponse. A completion is checked
// in that answer: anything but "completed, not a duplicate" fails the run.
#ifndef SHARDQ_BENCH_COORDINATOR_THROUGHPUT_SESSION_DRIVER_H_
#define SHARDQ_BENCH_COORDINATOR_THROUGHPUT_SESSION_DRIVER_H_

#include <memory>
#include <string>

#include "bench/coordinator_throughput/harness.h"

namespace shardq::throughput {

// Session clients of the `shardq serve` at `address` (host:port). Queues
// are created and checked through `control`, a system against the same
// server whose queues let a worker hold one item (num_clients 1). Thread-
// safe as System requires; each ClientSession is used by one thread.
std::unique_ptr<System> NewSessionSystem(std::string address, std::unique_ptr<System> control);

}  // namespace shardq::throughput

#endif  // SHARDQ_BENCH_COORDINATOR_THROUGHPUT_SESSION_DRIVER_H_
