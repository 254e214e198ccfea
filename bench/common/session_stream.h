// bench/common: one worker's Session stream (coordinator.proto, rpc Session)
// on gRPC's callback API, shared by the benchmarks that speak the session
// protocol directly (bench/scale's load generator, bench/coordinator_
// throughput's session row).
//
// A SessionStream keeps one read outstanding for its whole life, writes one
// message at a time from a queue, and matches answers to requests in order.
// It knows nothing of what a worker does with its items: the owner sends
// requests, gets each answer in a callback, and hears of the stream's
// `opened`, every message read and the stream's end through a
// SessionStreamListener. Callbacks run on gRPC's threads; many streams
// share those threads (no thread per stream).
#ifndef SHARDQ_BENCH_COMMON_SESSION_STREAM_H_
#define SHARDQ_BENCH_COMMON_SESSION_STREAM_H_

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "grpcpp/support/client_callback.h"
#include "proto/shardq/coordinator.grpc.pb.h"

namespace shardq::bench {

// The answer to one request (valid during the call only) and its round
// trip, or why none came (the stream ended).
using SessionAnswerFn = std::function<void(
    absl::StatusOr<const v1::SessionResponse*> answer, int64_t latency_ns)>;
// Whether an unanswered message was written.
using SessionWrittenFn = std::function<void(bool written)>;

// What a stream tells its owner, on a gRPC thread. `worker` is the number
// the stream was created with. A stream's calls never overlap one another.
class SessionStreamListener {
 public:
  virtual ~SessionStreamListener() = default;
  // The stream's first message, `opened`, was read.
  virtual void StreamOpened(int worker, bool reopen, const v1::SessionOpened& opened) = 0;
  // Every later message read, pushed or an answer (before the answer's
  // callback runs).
  virtual void Pushed(int worker, const v1::SessionResponse& response) = 0;
  // The stream's last call: every pending answer has been failed. The owner
  // may delete the stream from here on (not from inside this call's caller
  // chain before it returns: it is the last thing OnDone does).
  virtual void StreamEnded(int worker, bool cancelled, const grpc::Status& status) = 0;
};

// One stream of one worker. The owner keeps it alive until its
// StreamEnded. Thread-safe.
class SessionStream final
    : public grpc::ClientBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  // `open`: the first message (see SessionOpenRequest). `reopen` is passed
  // back in StreamOpened.
  SessionStream(SessionStreamListener& listener, int worker, bool reopen,
                v1::SessionRequest open);

  // Starts the call (the `open` first); before it, Send only queues.
  void Start(v1::Coordinator::Stub& stub);

  // Queues `request`; with `on_answer`, it gets the next request id and is
  // answered by exactly one call (its answer, or the stream's end), timed
  // from here (or from `opened`, for requests queued before it). With
  // `written`, that is called once the message is written or cannot be.
  // False when the stream takes no more messages: nothing was queued.
  bool Send(v1::SessionRequest request, SessionAnswerFn on_answer,
            SessionWrittenFn written = nullptr);

  // Half-closes after the queued messages: the coordinator then ends the
  // stream OK once its answers are written.
  void HalfClose();

  // Ends the stream (CANCELLED); StreamEnded says `cancelled`.
  void Cancel();

  // Ends the stream after a message that breaks the protocol (no read is
  // started after it); not counted as cancelled.
  void Abort();

  // True once OnDone has begun: the stream takes nothing more.
  bool done() const;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnWritesDoneDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  using SteadyClock = std::chrono::steady_clock;
  struct Pending {
    uint64_t request_id;
    SessionAnswerFn on_answer;
    SteadyClock::time_point sent;
  };
  struct Outgoing {
    v1::SessionRequest request;
    SessionWrittenFn written;
  };

  // Starts the next write or the half-close when none is in flight, and
  // lets OnDone come once nothing more can be written. Called unlocked.
  void Pump();
  void WriteFinished(bool ok);

  SessionStreamListener& listener_;
  const int worker_;
  const std::string name_;  // the worker's name, from `open`
  const bool reopen_;
  grpc::ClientContext ctx_;
  v1::SessionResponse response_;  // the read in flight; read again after it is handled

  mutable absl::Mutex mu_;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;  // Send queues messages
  bool opened_ ABSL_GUARDED_BY(mu_) = false;    // `opened` was read
  bool writing_ ABSL_GUARDED_BY(mu_) = false;   // a write or the half-close in flight
  bool half_close_ ABSL_GUARDED_BY(mu_) = false;
  bool half_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ended_ ABSL_GUARDED_BY(mu_) = false;  // the read failed: the stream is over
  bool held_ ABSL_GUARDED_BY(mu_) = true;         // AddHold not yet removed
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_request_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> outgoing_ ABSL_GUARDED_BY(mu_);
  Outgoing current_ ABSL_GUARDED_BY(mu_);  // the write in flight
};

// A session's first message: `open` of `queue` by `worker` at this build's
// protocol version, naming the leases it already holds.
v1::SessionRequest SessionOpenRequest(absl::string_view queue, absl::string_view worker,
                                      absl::Span<const uint64_t> held_lease_ids = {});

// OK for code 0, else the status with `what` before its message.
absl::Status FromOp(const v1::OpStatus& op, absl::string_view what);

// The completion of `lease_id` in `answer`: an error (naming `who`) unless
// the answer carries exactly one completion result, for that lease, with an
// OK status; then whether the coordinator counted it as a duplicate.
absl::StatusOr<bool> CompletionOf(const v1::SessionResponse& answer, uint64_t lease_id,
                                  absl::string_view who);

// `count` stubs for the coordinator at `address` (host:port), each on a
// channel with a TCP connection of its own (a local subchannel pool and a
// distinct channel argument), rather than gRPC's one shared connection.
std::vector<std::unique_ptr<v1::Coordinator::Stub>> OwnConnectionStubs(const std::string& address,
                                                                       int count);

}  // namespace shardq::bench

#endif  // SHARDQ_BENCH_COMMON_SESSION_STREAM_H_
