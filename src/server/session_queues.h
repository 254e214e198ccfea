// Serves the Session streams of one grpc::Server on completion queues of
// their own, each drained by a thread of its own (gRPC's async API), so
// that the open streams are spread over several queues.
//
// Why not the callback API (as the unary hot calls use): with Debian's
// gRPC 1.51 every callback-API call of the process, on every server and
// every channel, completes on ONE process-wide queue (gRPC's
// CallbackAlternativeCQ: grpc_iomgr_run_in_background() is false with its
// epoll1 poller), and that gRPC is built without NDEBUG, so each completion
// scans the queue's outstanding operations (cq_check_tag) under its mutex.
// Every open session keeps a read and its end notification outstanding, so
// with one queue each message costs a scan of ~2 N entries under one lock
// (bench/results/scale.md). With K queues a scan covers ~2 N / K, and the
// K threads no longer wait for one lock. Several grpc::Server instances on
// one port (SO_REUSEPORT) would not help: they share that same queue.
//
// gRPC assigns each accepted connection to one of the server's queues
// (round robin) and hands a new call to a request posted on its
// connection's queue when there is one, else on the next queue that has
// one; a stream then completes every operation on that queue.
#ifndef SHARDQ_SERVER_SESSION_QUEUES_H_
#define SHARDQ_SERVER_SESSION_QUEUES_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/async_stream.h"
#include "proto/shardq/coordinator.pb.h"

namespace shardq {

class SessionQueue;  // one completion queue and its thread (session_queues.cc)

using SessionStreamIo =
    grpc::ServerAsyncReaderWriter<v1::SessionResponse, v1::SessionRequest>;

// One Session stream, with the shape of gRPC's ServerBidiReactor on top of
// the async API: StartRead / StartWrite / Finish from any thread (at most
// one read and one write in flight, Finish once and not while a write is in
// flight), and the reactions below, which run on the stream's queue thread
// one at a time. OnDone runs once, last, after Finish and every read and
// write have completed (and OnCancel, if the call was cancelled); the
// object may delete itself there. Made by SessionQueues' factory before its
// call arrives; a stream whose call never arrived (the server shut down)
// gets OnDone without OnStarted.
class SessionStream {
 public:
  SessionStream();
  virtual ~SessionStream();
  SessionStream(const SessionStream&) = delete;
  SessionStream& operator=(const SessionStream&) = delete;

 protected:
  // The call: metadata, peer, cancellation (valid from OnStarted on).
  grpc::ServerContext& context() { return ctx_; }
  void StartRead(v1::SessionRequest* request);
  void StartWrite(const v1::SessionResponse* response);
  void Finish(const grpc::Status& status);

  // The call arrived; the stream starts its first read or finishes.
  virtual void OnStarted() = 0;
  // ok false: the client half-closed, or the stream broke.
  virtual void OnReadDone(bool ok) = 0;
  // ok false: the stream broke.
  virtual void OnWriteDone(bool ok) = 0;
  // The call was cancelled (the client went away, the server shut down).
  virtual void OnCancel() = 0;
  virtual void OnDone() = 0;

 private:
  friend class SessionQueue;
  friend class SessionQueues;
  enum class Op { kAccepted, kRead, kWrite, kFinish, kDone };
  // What a completion queue holds: the stream and which operation ended.
  struct Tag {
    SessionStream* stream;
    Op op;
  };
  // Runs on the queue's one thread for each tag of this stream; OnDone is
  // called only from here, so the stream lives while a reaction runs.
  void Complete(Op op, bool ok);
  // Calls OnDone when it is due (see the class comment).
  void MaybeDone();

  grpc::ServerContext ctx_;
  SessionStreamIo io_{&ctx_};
  Tag accepted_{this, Op::kAccepted};
  Tag read_{this, Op::kRead};
  Tag write_{this, Op::kWrite};
  Tag finish_{this, Op::kFinish};
  Tag done_{this, Op::kDone};
  SessionQueue* queue_ = nullptr;  // the queue its call was requested on

  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // reads, writes and the Finish
  bool finished_ ABSL_GUARDED_BY(mu_) = false;     // Finish completed
  bool call_ended_ ABSL_GUARDED_BY(mu_) = false;   // the done notification came
  bool on_done_called_ ABSL_GUARDED_BY(mu_) = false;
};

// The queues and their threads. Thread-safe.
class SessionQueues {
 public:
  // Requests each queue keeps posted for calls still to come: a burst of
  // new streams on one connection waits for the queue's thread to post
  // more only past this many.
  static constexpr int kPostedRequests = 16;

  // Posts a request for the next Session call on `cq` (the generated
  // AsyncService's RequestSession with `cq` as both queues).
  using RequestFn = std::function<void(grpc::ServerContext* ctx, SessionStreamIo* io,
                                       grpc::ServerCompletionQueue* cq, void* tag)>;
  // Makes the stream for the next call (see SessionStream).
  using NewStreamFn = std::function<SessionStream*()>;

  // Adds `count` (>= 1) completion queues to `builder`; call before its
  // BuildAndStart.
  SessionQueues(grpc::ServerBuilder& builder, int count, RequestFn request,
                NewStreamFn new_stream);
  // Shuts the queues down, drains them and joins their threads. Only once
  // the server is shut down (its Shutdown returned: no call is left), and
  // before the server is destroyed: draining finishes the requests that
  // failed at its shutdown, which reads the server.
  ~SessionQueues();

  // After the server started: posts requests for calls on every queue and
  // starts the queues' threads.
  void Start();

  int count() const { return static_cast<int>(queues_.size()); }
  // Session calls that arrived so far on each queue (tests, status).
  std::vector<int64_t> sessions_per_queue() const;

 private:
  friend class SessionQueue;
  // Makes a stream and posts its request for a call on `queue`.
  void Post(SessionQueue* queue);

  const RequestFn request_;
  const NewStreamFn new_stream_;
  std::vector<std::unique_ptr<SessionQueue>> queues_;
  std::vector<std::thread> threads_;
};

}  // namespace shardq

#endif  // SHARDQ_SERVER_SESSION_QUEUES_H_
