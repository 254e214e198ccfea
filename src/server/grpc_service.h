// The gRPC face of the coordinator: a thin adapter whose handlers convert
// the request, call CoordinatorImpl, and convert the answer. All queue logic
// lives in CoordinatorImpl; all conversions in src/rpc/convert.
#ifndef SHARDQ_SERVER_GRPC_SERVICE_H_
#define SHARDQ_SERVER_GRPC_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/server.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/rpc/convert.h"
#include "src/core/process.h"
#include "src/server/coordinator_impl.h"

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
};

// Thread-safe (handlers run on gRPC's threads). Synchronous handlers,
// except Complete with `complete_async` (a coordinator with a state dir):
// then it is a callback method, so that a completion waiting for its group
// commit holds no thread (the journal answers it once durable). In memory,
// where a completion never waits, the synchronous handler answers sooner.
class CoordinatorService final : public v1::Coordinator::Service {
 public:
  // `coordinator` must outlive the service.
  CoordinatorService(CoordinatorImpl* coordinator, std::string token, bool complete_async);

  grpc::Status CreateQueue(grpc::ServerContext* ctx, const v1::CreateQueueRequest* req,
                           v1::QueueInfo* resp) override;
  grpc::Status GetQueue(grpc::ServerContext* ctx, const v1::GetQueueRequest* req,
                        v1::QueueInfo* resp) override;
  grpc::Status Take(grpc::ServerContext* ctx, const v1::TakeRequest* req,
                    v1::TakeResponse* resp) override;
  grpc::Status Complete(grpc::ServerContext* ctx, const v1::CompleteRequest* req,
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
  grpc::Status ExportCheckpoint(grpc::ServerContext* ctx,
                                const v1::ExportCheckpointRequest* req,
                                v1::ExportCheckpointResponse* resp) override;
  grpc::Status RestoreCheckpoint(grpc::ServerContext* ctx,
                                 const v1::RestoreCheckpointRequest* req,
                                 v1::QueueInfo* resp) override;

 private:
  // UNAUTHENTICATED unless the call carries the token (when one is set).
  absl::Status Authorize(const grpc::ServerContextBase& ctx) const;
  // Complete as a callback method (see the class comment).
  grpc::ServerUnaryReactor* CompleteAsync(grpc::CallbackServerContext* ctx,
                                          const v1::CompleteRequest* req,
                                          v1::CompleteResponse* resp);

  CoordinatorImpl* const coordinator_;
  const std::string token_;
};

// A running coordinator: CoordinatorImpl + service + gRPC server.
// Thread-safe.
class CoordinatorServer {
 public:
  // Recovers the state dir (if any), binds and starts serving.
  // INVALID_ARGUMENT for a bad listen address or unreadable TLS files;
  // UNAVAILABLE when the address cannot be bound; the state dir's error
  // when it cannot be recovered.
  static absl::StatusOr<std::unique_ptr<CoordinatorServer>> Start(
      const ServerOptions& options);
  ~CoordinatorServer();

  int port() const { return port_; }
  CoordinatorImpl* coordinator() { return coordinator_.get(); }
  // Blocks until Shutdown() is called from another thread.
  void Wait();
  // Stops accepting calls; in-flight calls get up to `grace` to finish.
  void Shutdown(absl::Duration grace = absl::Seconds(1));

 private:
  CoordinatorServer(std::unique_ptr<CoordinatorImpl> coordinator, const std::string& token,
                    bool durable);

  std::unique_ptr<CoordinatorImpl> coordinator_;
  CoordinatorService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  OwnerProcess owner_;  // see src/core/process.h
};

}  // namespace shardq

#endif  // SHARDQ_SERVER_GRPC_SERVICE_H_
