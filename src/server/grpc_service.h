// The gRPC face of the coordinator: a thin adapter whose handlers convert
// the request, call CoordinatorImpl, and convert the answer. All queue logic
// lives in CoordinatorImpl; all conversions in src/rpc/convert.
#ifndef SHARDQ_SERVER_GRPC_SERVICE_H_
#define SHARDQ_SERVER_GRPC_SERVICE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/rpc/convert.h"
#include "src/rpc/grpc_fork.h"
#include "src/core/process.h"
#include "src/server/coordinator_impl.h"
#include "src/server/session_queues.h"
#include "src/server/session_service.h"

namespace shardq {

struct ServerOptions {
  // "host:port"; port 0 picks a free port (see CoordinatorServer::port()).
  // Loopback by default: exposing the queue is an explicit choice.
  std::string listen = "127.0.0.1:7077";
  // Non-empty: every call must carry "authorization: Bearer <token>".
  std::string token;
  // PEM files; both set: serve TLS only.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Non-empty: journal every change here and recover from it at start.
  std::string state_dir;
  // Largest request the server reads (1 .. 2^31-1 bytes): a larger one is
  // refused with RESOURCE_EXHAUSTED before it is held in memory, and the
  // server goes on. 64 MiB carries a CreateQueue of ~600,000 items of
  // ~100 bytes; `shardq serve --max-request-mb` changes it.
  int64_t max_request_bytes = int64_t{64} << 20;
  // The coordinator's clock (leases, progress); nullptr: the real clock.
  // Tests pass a FakeClock; it must outlive the server.
  Clock* clock = nullptr;
  // Makes the coordinator instead of `state_dir` (the etcd store's leader:
  // src/server/ha_serve.h). Called once the listen port was checked free.
  std::function<absl::StatusOr<std::unique_ptr<CoordinatorImpl>>()> open_coordinator;
  // Set for a highly available job: every Status answer carries it.
  std::function<Leadership()> leadership;
  // Set when the process also serves the status page (`serve --http`):
  // every Status answer carries its HOST:PORT (empty while none is up), so
  // that `shardq report` given this server's address finds the page.
  std::function<std::string()> status_page;
  // Completion queues, each drained by a thread of its own, that the
  // Session streams are spread over (src/server/session_queues.h): with
  // Debian's gRPC each message on a stream costs a scan of the operations
  // outstanding on its queue (~2 per open stream), so more queues mean
  // shorter scans and less waiting for one lock; each queue costs an idle
  // thread. 16 keeps 10,000 open streams to ~1,250 entries a queue. 1..64.
  int session_queues = 16;
  // Session streams held at once (>= 1); one more is refused with
  // RESOURCE_EXHAUSTED naming the limit (src/server/session_service.h:
  // SessionLimit). Each open stream holds ~20 KiB of gRPC state, so the
  // default bounds them to about 2 GB; `shardq serve --max-sessions`.
  int64_t max_sessions = 100'000;
};

// OK when `token` is empty or the call carries "authorization: Bearer
// <token>"; UNAUTHENTICATED saying which is wrong otherwise.
absl::Status AuthorizeCall(const grpc::ServerContextBase& ctx, const std::string& token);

// The credentials `options` asks for (TLS from its files, else insecure).
// INVALID_ARGUMENT naming the flag and file when they cannot be read, hold
// no PEM certificate/key or do not match.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const ServerOptions& options);

// Thread-safe (handlers run on gRPC's threads). Take and Complete, the
// calls every worker makes per item, are callback methods: their handlers
// run on gRPC's callback threads and never park one. A Take that must wait
// for an item waits on a thread of its own (TakeWaiters); a durable
// Complete is answered by the journal once its group commit is on disk.
// Session (a worker's stream) is an async method, served by
// CoordinatorServer's SessionQueues (src/server/session_queues.h) with a
// reactor per stream (src/server/session_service.h). The other calls are
// synchronous
// handlers. (A server mixing the two kinds for its hot calls pays a
// hand-off between gRPC's two thread pools on every call.)
class CoordinatorService final
    : public v1::Coordinator::WithAsyncMethod_Session<v1::Coordinator::WithCallbackMethod_Take<
          v1::Coordinator::WithCallbackMethod_Complete<v1::Coordinator::Service>>> {
 public:
  // `coordinator` must outlive the service. `leadership` and
  // `status_page`, when set, are added to every Status answer.
  CoordinatorService(CoordinatorImpl* coordinator, std::string token,
                     std::function<Leadership()> leadership = nullptr,
                     std::function<std::string()> status_page = nullptr);
  // Waits for the Takes still waiting on their own threads (the
  // coordinator's Shutdown ends their waits); in a fork()ed child, which
  // has none of those threads, it does not wait.
  ~CoordinatorService() override;

  grpc::Status CreateQueue(grpc::ServerContext* ctx, const v1::CreateQueueRequest* req,
                           v1::QueueInfo* resp) override;
  grpc::Status GetQueue(grpc::ServerContext* ctx, const v1::GetQueueRequest* req,
                        v1::QueueInfo* resp) override;
  grpc::ServerUnaryReactor* Take(grpc::CallbackServerContext* ctx, const v1::TakeRequest* req,
                                 v1::TakeResponse* resp) override;
  grpc::ServerUnaryReactor* Complete(grpc::CallbackServerContext* ctx,
                                     const v1::CompleteRequest* req,
                                     v1::CompleteResponse* resp) override;
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req,
                       v1::ReleaseResponse* resp) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override;
  grpc::Status AcceptSplit(grpc::ServerContext* ctx, const v1::AcceptSplitRequest* req,
                           v1::AcceptSplitResponse* resp) override;
  grpc::Status Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                      v1::StatusResponse* resp) override;
  grpc::Status ReportProgress(grpc::ServerContext* ctx, const v1::ReportProgressRequest* req,
                              v1::ReportProgressResponse* resp) override;
  grpc::Status AgreeSteps(grpc::ServerContext* ctx, const v1::AgreeStepsRequest* req,
                          v1::AgreeStepsResponse* resp) override;
  grpc::Status PassOver(grpc::ServerContext* ctx, const v1::PassOverRequest* req,
                        v1::PassOverResponse* resp) override;
  grpc::Status ExportCheckpoint(grpc::ServerContext* ctx,
                                const v1::ExportCheckpointRequest* req,
                                v1::ExportCheckpointResponse* resp) override;
  grpc::Status RestoreCheckpoint(grpc::ServerContext* ctx,
                                 const v1::RestoreCheckpointRequest* req,
                                 v1::QueueInfo* resp) override;
  // UNAUTHENTICATED unless the call carries the token (when one is set).
  absl::Status Authorize(const grpc::ServerContextBase& ctx) const;

 private:
  // Takes waiting for items, each on a thread of its own, counted so that
  // the destructor can wait for them. Shared with those threads, which may
  // outlive the service by the last instructions after their count.
  struct TakeWaiters {
    absl::Mutex mu;
    absl::CondVar done;
    int64_t running ABSL_GUARDED_BY(mu) = 0;
  };
  // At most this many Takes wait at once; more are answered "ask again".
  static constexpr int64_t kMaxWaitingTakes = 4096;

  CoordinatorImpl* const coordinator_;
  const std::string token_;
  const std::function<Leadership()> leadership_;
  const std::function<std::string()> status_page_;
  const std::shared_ptr<TakeWaiters> take_waiters_ = std::make_shared<TakeWaiters>();
  OwnerProcess owner_;  // see src/core/process.h
};

// A running coordinator: CoordinatorImpl + service + gRPC server.
// Thread-safe.
class CoordinatorServer {
 public:
  // Recovers the state dir (if any), binds and starts serving. The port is
  // bound exclusively (no SO_REUSEPORT): a second coordinator on a port in
  // use fails instead of sharing its clients.
  // INVALID_ARGUMENT for a bad listen address (port outside 0..65535), a
  // bad max_request_bytes, or TLS files that cannot be read, hold no PEM
  // certificate/key or do not match (each naming the flag and file);
  // UNAVAILABLE "address H:P already in use" when another process holds
  // the port (checked before the state dir is opened, and again by the
  // bind itself), UNAVAILABLE naming the errno for other bind failures;
  // the state dir's error when it cannot be recovered; INVALID_ARGUMENT
  // for session_queues outside 1..64 or max_sessions below 1.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const ServerOptions& options);
  ~CoordinatorServer();

  int port() const { return port_; }
  CoordinatorImpl* coordinator() { return coordinator_.get(); }
  // Blocks until Shutdown() is called from another thread.
  void Wait();
  // Stops accepting calls; in-flight calls get up to `grace` to finish.
  void Shutdown(absl::Duration grace = absl::Seconds(1));
  // Session streams that arrived so far on each session queue (tests).
  std::vector<int64_t> sessions_per_queue() const {
    return session_queues_->sessions_per_queue();
  }
  // Session streams open now (counted against ServerOptions::max_sessions).
  int64_t live_sessions() const { return session_limit_->live(); }
  int64_t max_sessions() const { return session_limit_->max(); }

 private:
  CoordinatorServer(std::unique_ptr<CoordinatorImpl> coordinator, const std::string& token,
                    std::function<Leadership()> leadership,
                    std::function<std::string()> status_page);

  // First: counted as live gRPC state from before the server starts until
  // after it is gone (src/rpc/grpc_fork.h).
  GrpcInUse serving_;
  std::unique_ptr<CoordinatorImpl> coordinator_;
  CoordinatorService service_;
  // Shared with every Session stream (ServerOptions::max_sessions).
  std::shared_ptr<SessionLimit> session_limit_;
  // Reset by the destructor once the server is shut down and before it is
  // destroyed (see there).
  std::unique_ptr<SessionQueues> session_queues_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  OwnerProcess owner_;  // see src/core/process.h
};

}  // namespace shardq

#endif  // SHARDQ_SERVER_GRPC_SERVICE_H_
