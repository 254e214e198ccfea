#include "src/server/grpc_service.h"

#include <fstream>
#include <sstream>

#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "src/rpc/convert.h"

namespace shardq {
namespace {

// Longest a single Take waits server-side; clients re-issue.
constexpr int64_t kMaxWaitMs = 60'000;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " file '", path, "'"));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::vector<uint64_t> ToVector(const google::protobuf::RepeatedField<uint64_t>& ids) {
  return std::vector<uint64_t>(ids.begin(), ids.end());
}

std::vector<std::pair<uint64_t, int64_t>> ToPairs(
    const google::protobuf::RepeatedPtrField<v1::LeaseProgress>& progress) {
  std::vector<std::pair<uint64_t, int64_t>> out;
  for (const v1::LeaseProgress& p : progress) out.emplace_back(p.lease_id(), p.offset());
  return out;
}

}  // namespace

CoordinatorService::CoordinatorService(CoordinatorImpl* coordinator, std::string token,
                                       bool complete_async)
    : coordinator_(coordinator), token_(std::move(token)) {
  if (!complete_async) return;
  // What the generated WithCallbackMethod_Complete does, chosen at run
  // time; the method's index is its place in the proto service.
  const int index = v1::CompleteRequest::descriptor()
                        ->file()
                        ->FindServiceByName("Coordinator")
                        ->FindMethodByName("Complete")
                        ->index();
  MarkMethodCallback(
      index, new grpc::internal::CallbackUnaryHandler<v1::CompleteRequest, v1::CompleteResponse>(
                 [this](grpc::CallbackServerContext* ctx, const v1::CompleteRequest* req,
                        v1::CompleteResponse* resp) { return CompleteAsync(ctx, req, resp); }));
}

absl::Status CoordinatorService::Authorize(const grpc::ServerContextBase& ctx) const {
  if (token_.empty()) return absl::OkStatus();
  auto it = ctx.client_metadata().find("authorization");
  if (it == ctx.client_metadata().end()) {
    return absl::UnauthenticatedError("missing 'authorization' metadata (a token is required)");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ") || !ConstantTimeEquals(value, token_)) {
    return absl::UnauthenticatedError("invalid token");
  }
  return absl::OkStatus();
}

grpc::Status CoordinatorService::CreateQueue(grpc::ServerContext* ctx,
                                             const v1::CreateQueueRequest* req,
                                             v1::QueueInfo* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<QueueInfo> info = coordinator_->CreateQueue(FromProto(req->config()));
  if (info.ok()) ToProto(*info, resp);
  return ToGrpcStatus(info.status());
}

grpc::Status CoordinatorService::GetQueue(grpc::ServerContext* ctx,
                                          const v1::GetQueueRequest* req,
                                          v1::QueueInfo* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<QueueInfo> info = coordinator_->GetQueue(req->queue());
  if (info.ok()) ToProto(*info, resp);
  return ToGrpcStatus(info.status());
}

grpc::Status CoordinatorService::Take(grpc::ServerContext* ctx,
                                      const v1::TakeRequest* req,
                                      v1::TakeResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  const int64_t wait_ms = std::clamp<int64_t>(req->wait_ms(), 0, kMaxWaitMs);
  // Answer a little before the caller's own deadline, so it gets "ask
  // again" rather than DEADLINE_EXCEEDED.
  absl::Time deadline = absl::Now() + absl::Milliseconds(wait_ms);
  const absl::Time call_deadline = absl::FromChrono(ctx->deadline());
  deadline = std::min(deadline, call_deadline - absl::Milliseconds(100));
  absl::StatusOr<std::vector<WorkItem>> items =
      coordinator_->Take(req->queue(), req->worker(), req->max_items(), deadline);
  if (absl::IsOutOfRange(items.status())) {
    resp->set_end_of_input(true);
    return grpc::Status::OK;
  }
  if (items.ok()) {
    for (const WorkItem& item : *items) ToProto(item, resp->add_items());
  }
  return ToGrpcStatus(items.status());
}

grpc::Status CoordinatorService::Complete(grpc::ServerContext* ctx,
                                          const v1::CompleteRequest* req,
                                          v1::CompleteResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<CompleteOutcome> outcome =
      coordinator_->Complete(req->queue(), req->worker(), req->lease_id());
  if (outcome.ok()) resp->set_duplicate(*outcome == CompleteOutcome::kDuplicate);
  return ToGrpcStatus(outcome.status());
}

grpc::ServerUnaryReactor* CoordinatorService::CompleteAsync(grpc::CallbackServerContext* ctx,
                                                            const v1::CompleteRequest* req,
                                                            v1::CompleteResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (absl::Status s = Authorize(*ctx); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  // `resp` lives until Finish; the callback may run on the journal's thread.
  coordinator_->CompleteAsync(
      req->queue(), req->worker(), req->lease_id(),
      [reactor, resp](absl::StatusOr<CompleteOutcome> outcome) {
        if (outcome.ok()) resp->set_duplicate(*outcome == CompleteOutcome::kDuplicate);
        reactor->Finish(ToGrpcStatus(outcome.status()));
      });
  return reactor;
}

grpc::Status CoordinatorService::Release(grpc::ServerContext* ctx,
                                         const v1::ReleaseRequest* req,
                                         v1::ReleaseResponse*) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  return ToGrpcStatus(coordinator_->Release(req->queue(), req->worker(), req->lease_id()));
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* ctx,
                                           const v1::HeartbeatRequest* req,
                                           v1::HeartbeatResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  if (req->progress_size() > 0) {
    // Progress of leases this worker no longer holds is simply dropped.
    coordinator_->ReportProgress(req->queue(), req->worker(), ToPairs(req->progress()))
        .IgnoreError();
  }
  absl::StatusOr<HeartbeatReply> reply =
      coordinator_->Heartbeat(req->queue(), req->worker(), ToVector(req->lease_ids()),
                              absl::Milliseconds(std::max<int64_t>(0, req->wait_ms())));
  if (reply.ok()) ToProto(*reply, resp);
  return ToGrpcStatus(reply.status());
}

grpc::Status CoordinatorService::AcceptSplit(grpc::ServerContext* ctx,
                                             const v1::AcceptSplitRequest* req,
                                             v1::AcceptSplitResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<bool> accepted = coordinator_->AcceptSplit(
      req->queue(), req->worker(), req->lease_id(), req->split_point());
  if (accepted.ok()) resp->set_accepted(*accepted);
  return ToGrpcStatus(accepted.status());
}

grpc::Status CoordinatorService::Status(grpc::ServerContext* ctx,
                                        const v1::StatusRequest* req,
                                        v1::StatusResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  if (req->queue().empty()) {
    for (const QueueStats& stats : coordinator_->AllStats()) {
      ToProto(stats, resp->add_queues());
    }
    return grpc::Status::OK;
  }
  absl::StatusOr<QueueStats> stats = coordinator_->Stats(req->queue());
  if (stats.ok()) ToProto(*stats, resp->add_queues());
  return ToGrpcStatus(stats.status());
}

grpc::Status CoordinatorService::ReportProgress(grpc::ServerContext* ctx,
                                                const v1::ReportProgressRequest* req,
                                                v1::ReportProgressResponse*) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  return ToGrpcStatus(
      coordinator_->ReportProgress(req->queue(), req->worker(), ToPairs(req->progress())));
}

grpc::Status CoordinatorService::ExportCheckpoint(grpc::ServerContext* ctx,
                                                  const v1::ExportCheckpointRequest* req,
                                                  v1::ExportCheckpointResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<journal::Checkpoint> checkpoint = coordinator_->ExportCheckpoint(req->queue());
  if (checkpoint.ok()) checkpoint->SerializeToString(resp->mutable_checkpoint());
  return ToGrpcStatus(checkpoint.status());
}

grpc::Status CoordinatorService::RestoreCheckpoint(grpc::ServerContext* ctx,
                                                   const v1::RestoreCheckpointRequest* req,
                                                   v1::QueueInfo* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  journal::Checkpoint checkpoint;
  if (!checkpoint.ParseFromString(req->checkpoint())) {
    return ToGrpcStatus(absl::InvalidArgumentError("the checkpoint is not a shardq checkpoint"));
  }
  absl::StatusOr<QueueInfo> info = coordinator_->RestoreCheckpoint(checkpoint, req->name());
  if (info.ok()) ToProto(*info, resp);
  return ToGrpcStatus(info.status());
}

CoordinatorServer::CoordinatorServer(std::unique_ptr<CoordinatorImpl> coordinator,
                                     const std::string& token, bool durable)
    : coordinator_(std::move(coordinator)),
      service_(coordinator_.get(), token, /*complete_async=*/durable) {}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const ServerOptions& options) {
  if (options.listen.empty() || options.listen.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen '", options.listen, "' is not HOST:PORT"));
  }
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
    }
    absl::StatusOr<std::string> cert = ReadWholeFile(options.tls_cert_file, "TLS certificate");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadWholeFile(options.tls_key_file, "TLS key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    credentials = grpc::SslServerCredentials(ssl);
  } else {
    credentials = grpc::InsecureServerCredentials();
  }
  CoordinatorOptions coordinator_options;
  coordinator_options.state_dir = options.state_dir;
  absl::StatusOr<std::unique_ptr<CoordinatorImpl>> coordinator =
      CoordinatorImpl::Create(coordinator_options);
  if (!coordinator.ok()) return coordinator.status();
  std::unique_ptr<CoordinatorServer> server(
      new CoordinatorServer(*std::move(coordinator), options.token, !options.state_dir.empty()));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &server->port_);
  builder.RegisterService(&server->service_);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC's defaults (1 to 2 idle pollers) end a thread after nearly every
  // call that blocks (a take waiting for items, a held heartbeat, a commit)
  // and start another for the next: tens of thousands of thread creations
  // per second under load. Idle threads are cheap; keep them.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 64);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on '", options.listen, "' (address in use or not local?)"));
  }
  return server;
}

CoordinatorServer::~CoordinatorServer() {
  if (!owner_.current()) {
    // Inherited through fork(): the server's threads live in the parent.
    server_.release();        // NOLINT: intentional leak
    coordinator_.release();   // NOLINT: intentional leak
    return;
  }
  Shutdown();
}

void CoordinatorServer::Wait() { server_->Wait(); }

void CoordinatorServer::Shutdown(absl::Duration grace) {
  coordinator_->Shutdown();
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

}  // namespace shardq
