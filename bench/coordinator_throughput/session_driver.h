// bench/coordinator_throughput: shardq's like-for-like row, the worker
// Session stream (coordinator.proto, rpc Session) spoken directly.
//
// Each client opens one Session stream per queue (outside the measured
// time) and keeps one item in flight: the completion of the previous item
// and the take of the next travel in one SessionRequest, answered by one
// SessionResponse. A completion is checked in that answer: anything but
// "completed, not a duplicate" fails the run. Three drivers speak it:
//  * callback (the default): each client is one bench/common SessionStream
//    (gRPC's callback API, a ClientBidiReactor); the clients' streams are
//    multiplexed on gRPC's callback threads, with no thread per client,
//    over `channels` channels, each with a TCP connection of its own
//    (client i on channel i mod channels).
//  * cq: one thread per row drives every client's stream on one
//    completion queue (gRPC's async API): it reads each answer and writes
//    the next request itself, with no thread hand-off in the client; over
//    `channels` channels as above.
//  * blocking: each client is a harness thread with a synchronous stream
//    (each Write and Read waits) on a channel with a TCP connection of its
//    own, as each Redis client has its own connection and thread.
#ifndef SHARDQ_BENCH_COORDINATOR_THROUGHPUT_SESSION_DRIVER_H_
#define SHARDQ_BENCH_COORDINATOR_THROUGHPUT_SESSION_DRIVER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "bench/coordinator_throughput/harness.h"
#include "proto/shardq/coordinator.pb.h"

namespace shardq::throughput {

// Session clients of the `shardq serve` at `address` (host:port), one
// harness thread each. Queues are created and checked through `control`, a
// system against the same server whose queues let a worker hold one item
// (num_clients 1). Thread-safe as System requires; each ClientSession is
// used by one thread.
std::unique_ptr<System> NewBlockingSessionSystem(std::string address,
                                                 std::unique_ptr<System> control);

// Session clients on the callback API (RunsOwnClients), over `channels`
// channels per row; 0: one per client. Queues are made and checked through
// `control` as above. RunClients is called by one thread at a time.
std::unique_ptr<System> NewCallbackSessionSystem(std::string address, int channels,
                                                 std::unique_ptr<System> control);

// Session clients driven by one thread per row on one completion queue
// (gRPC's async API; RunsOwnClients), over `channels` channels as above.
std::unique_ptr<System> NewCompletionQueueSessionSystem(std::string address, int channels,
                                                        std::unique_ptr<System> control);

// What the drivers share.
// A take that finds every remaining item held by other clients waits this
// long on the server before it is answered with nothing (then asked again).
inline constexpr int64_t kSessionTakeWaitMs = 10'000;

// What a session client does after the answer to its request.
enum class AfterAnswer { kTakeAgain, kDrained };

// Applies the answer to a client's request (the completion of *completing,
// if any, and a take of 1) of `worker`: checks the completion (then clears
// *completing), records it and the take's item and latency in *result when
// `measured`, and keeps the item taken in *completing. kTakeAgain also when
// nothing was taken yet (ask again). Errors: the completion was not the
// item's first, the take failed, or the answer holds more than one item.
absl::StatusOr<AfterAnswer> ApplyTakeAnswer(const ::shardq::v1::SessionResponse& answer,
                                            int64_t latency_ns, absl::string_view worker,
                                            bool measured, std::optional<Taken>* completing,
                                            ClientResult* result);

}  // namespace shardq::throughput

#endif  // SHARDQ_BENCH_COORDINATOR_THROUGHPUT_SESSION_DRIVER_H_
