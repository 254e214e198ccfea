// The gRPC side of worker sessions (coordinator.proto, rpc Session): one
// reactor per stream (a SessionStream, served on the session completion
// queues of src/server/session_queues.h), a thin adapter over CoordinatorImpl's
// session calls (OpenSession, SessionStep, CloseSession).
//
// Per stream: the first message must carry `open` (else INVALID_ARGUMENT);
// a client of another major protocol version (src/rpc/protocol_version.h)
// is refused with FAILED_PRECONDITION naming both versions, another minor
// version is served. Then requests are applied in arrival order, each
// under one hold of its queue's mutex, and answered in the same order (a
// request waiting for an item or for the disk holds back the answers
// after it, not their effects). At most one write is in flight; answers
// and pushed split proposals (request_id 0) queue behind it. Handlers
// never block: a waiting take sits in its queue's waiter list, a durable
// answer is sent by the journal's callback. At most kMaxUnanswered
// requests are read ahead of their answers; then reading pauses.
// The stream ends OK after the client half-closes (its waiting takes are
// answered at once with no items), CANCELLED when the client goes away,
// UNAVAILABLE when the coordinator shuts down; closing it starts the
// worker's lease timeout (CoordinatorImpl::CloseSession).
#ifndef SHARDQ_SERVER_SESSION_SERVICE_H_
#define SHARDQ_SERVER_SESSION_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "proto/shardq/coordinator.pb.h"
#include "src/server/coordinator_impl.h"
#include "src/server/session_queues.h"

namespace shardq {

// Requests a session reads ahead of their answers.
inline constexpr size_t kMaxUnanswered = 64;

// The service's token check of a call: an error ends the stream with it
// at once.
using SessionAuthorizer = std::function<absl::Status(const grpc::ServerContextBase&)>;

// How many Session streams one server holds at once (ServerOptions::
// max_sessions). A stream counts from its arrival (authorized), before its
// `open`, until it ends; one beyond the limit ends at once with
// RESOURCE_EXHAUSTED naming the limit and `shardq serve --max-sessions`,
// so that a client that leaks streams (or a hostile one) cannot grow the
// coordinator's memory without bound (each open stream holds ~20 KiB of
// gRPC state). Thread-safe.
class SessionLimit {
 public:
  explicit SessionLimit(int64_t max) : max_(max) {}
  // Counts a stream in; false (and nothing counted) at the limit.
  bool TryEnter();
  void Leave();
  int64_t live() const { return live_.load(std::memory_order_relaxed); }
  int64_t max() const { return max_; }

 private:
  const int64_t max_;
  std::atomic<int64_t> live_{0};
};

// The reactor of the next Session stream, for SessionQueues' factory;
// `authorize` runs when its call arrives, then `limit` counts it.
// `coordinator` must outlive the stream. The stream owns itself until its
// OnDone.
SessionStream* NewSessionStream(CoordinatorImpl* coordinator, SessionAuthorizer authorize,
                                std::shared_ptr<SessionLimit> limit);

}  // namespace shardq

#endif  // SHARDQ_SERVER_SESSION_SERVICE_H_
