// A worker's session with one queue of a remote coordinator: one gRPC
// bidirectional stream (coordinator.proto, rpc Session) that carries the
// worker's takes, completions, releases, progress and split answers, and
// brings back granted items and the proposals and lost leases the
// coordinator pushes. The open stream is the worker's liveness signal: no
// heartbeats are sent.
//
// Requests are matched to their answers by request_id. A dedicated reader
// thread reads the stream, wakes the caller waiting for each answer, and
// hands pushed messages to the SessionListener. When the stream breaks,
// the reader thread re-opens it under the retry policy, naming the leases
// the worker holds (so it keeps them); calls waiting for an answer on the
// broken stream are sent again on the new one (a completion whose answer
// was lost is answered as a repeat, which changes nothing; a take whose
// grant was lost leaves that lease to expire, as with unary calls).
//
// Thread-safe: any number of threads may call at once.
#ifndef SHARDQ_CLIENT_SESSION_CLIENT_H_
#define SHARDQ_CLIENT_SESSION_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "proto/shardq/coordinator.pb.h"
#include "src/client/backend.h"
#include "src/client/coordinator_channels.h"
#include "src/client/retry.h"
#include "src/core/process.h"

namespace shardq {

struct SessionOptions {
  std::string queue;
  std::string worker;
  // Sent as "authorization: Bearer <token>" when non-empty.
  std::string token;
  // Named in messages ("coordinator ADDR"): the address spec as given.
  std::string address;
  // The first open waits at most this long for the coordinator's answer.
  absl::Duration open_timeout = kDefaultConnectTimeout;
  // A broken stream is re-opened with this policy's backoff until its
  // total budget is spent; then the session ends with UNAVAILABLE. A call
  // gives up after the same budget.
  RetryPolicy retry;
  // How long an answer may take beyond a take's own wait; a stream that
  // stays silent longer is treated as broken and re-opened.
  absl::Duration answer_timeout = absl::Seconds(30);
};

class SessionClient {
 public:
  // Opens the stream and waits for the coordinator's `opened`. UNIMPLEMENTED
  // when the coordinator has no sessions (an older `shardq serve`);
  // NOT_FOUND for an unknown queue; FAILED_PRECONDITION for an incompatible
  // protocol version (the message names both versions); UNAVAILABLE when no
  // answer came within open_timeout. `listener` (may be null) must outlive
  // the session.
  //
  // Each open (the first and every re-open) goes to the coordinator
  // `channels` names then; an open or a stream that fails tells `channels`
  // (with the leader a standby named), so that a re-open after a failover
  // goes to the new leader, naming the leases the worker holds.
  static absl::StatusOr<std::unique_ptr<SessionClient>> Open(
      std::shared_ptr<CoordinatorChannels> channels, SessionOptions options,
      SessionListener* listener);
  // The same, always on `channel` (named options.address in messages).
  static absl::StatusOr<std::unique_ptr<SessionClient>> Open(
      std::shared_ptr<grpc::Channel> channel, SessionOptions options,
      SessionListener* listener);

  // Closes the stream (half-close, then cancel if the coordinator does not
  // end it within a moment) and joins the reader thread; calls still
  // waiting fail with FAILED_PRECONDITION. In a child that inherited the
  // session through fork(), the session is left alone (its thread and
  // stream belong to the parent).
  ~SessionClient();

  // The operations, as the QueueBackend methods of the same names (the
  // queue and worker are the session's). Each is retried across re-opens
  // of the stream until the retry budget is spent.
  absl::StatusOr<std::vector<WorkItem>> Take(int64_t max_items, absl::Time deadline,
                                             int64_t ahead = 0);
  CompleteAndTakeReply CompleteAndTake(uint64_t lease_id, int64_t records, int64_t max_items,
                                       absl::Time deadline, int64_t ahead = 0);
  absl::StatusOr<CompleteOutcome> Complete(uint64_t lease_id, int64_t records);
  absl::Status Release(uint64_t lease_id);
  absl::StatusOr<bool> Fail(uint64_t lease_id, absl::string_view reason);
  absl::StatusOr<bool> AcceptSplit(uint64_t lease_id, int64_t split_point);
  absl::Status ReportProgress(const std::vector<std::pair<uint64_t, int64_t>>& progress);

  // One request and its answer (request_id is set here), retried as above;
  // `wait` is how long the coordinator may hold the answer (a take's wait).
  absl::StatusOr<v1::SessionResponse> Call(v1::SessionRequest request, absl::Duration wait);

  // From now on calls are tried once, briefly (the owner is closing).
  void BeginShutdown();

  // A take's wait is capped at this so that a silent stream is noticed.
  static constexpr absl::Duration kLongPoll = absl::Seconds(10);

  // The session's queue (options.queue).
  const std::string& queue() const;

  // True while a take with a wait is on its way: the coordinator may hold
  // its answer until an item comes, and the answers of requests sent after
  // it queue behind that one (answers come in request order). A caller that
  // must not wait so long (a completion, a split answer) uses the unary
  // RPC meanwhile, then ForgetLease for a lease it gave up that way.
  bool TakeWaiting() const { return waiting_takes_.load() > 0; }
  // The lease was completed or released outside this session (a unary
  // call): a re-opened stream no longer names it.
  void ForgetLease(uint64_t lease_id);

  // What the coordinator said when the session opened (the queue).
  const QueueInfo& queue_info() const { return queue_info_; }
  // Leases this session knows the worker holds (sent when re-opening).
  std::vector<uint64_t> HeldLeases() const;
  // Streams opened so far: 1, plus one per re-open.
  int64_t streams_opened() const;

  class Impl;  // src/client/session_client.cc

 private:
  explicit SessionClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::atomic<int> waiting_takes_{0};  // calls in Call with a take and a wait
  OwnerProcess owner_;  // see src/core/process.h
  QueueInfo queue_info_;
};

}  // namespace shardq

#endif  // SHARDQ_CLIENT_SESSION_CLIENT_H_
