#include "src/server/grpc_service.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>
#include <thread>

#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "grpc/grpc.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "src/core/process.h"
#include "src/rpc/convert.h"
#include "src/server/listen_address.h"
#include "src/server/session_service.h"

namespace shardq {
namespace {

// Longest a single Take waits server-side; clients re-issue.
constexpr int64_t kMaxWaitMs = 60'000;

absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          absl::string_view what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " file '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// INVALID_ARGUMENT naming the flag and file unless `cert_pem` holds a PEM
// certificate and `key_pem` an unencrypted PEM private key that belongs to
// it. (gRPC only logs such problems and then fails to bind, which would
// read as a port problem.)
absl::Status CheckTlsPair(const std::string& cert_file, const std::string& cert_pem,
                          const std::string& key_file, const std::string& key_pem) {
  // Never prompt for a passphrase: an encrypted key is an error.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  std::unique_ptr<BIO, decltype(&BIO_free)> cert_bio(
      BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())), &BIO_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(cert_bio.get(), nullptr, no_passphrase, nullptr), &X509_free);
  std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())), &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr), &EVP_PKEY_free);
  absl::Status result = absl::OkStatus();
  if (cert == nullptr) {
    result = absl::InvalidArgumentError(absl::StrCat(
        "--tls-cert '", cert_file, "' holds no PEM certificate (BEGIN CERTIFICATE)"));
  } else if (key == nullptr) {
    result = absl::InvalidArgumentError(absl::StrCat(
        "--tls-key '", key_file, "' holds no PEM private key (BEGIN PRIVATE KEY), or the key "
        "is encrypted (shardq needs it without a passphrase)"));
  } else if (X509_check_private_key(cert.get(), key.get()) != 1) {
    result = absl::InvalidArgumentError(absl::StrCat("--tls-key '", key_file,
                                                     "' is not the key of the certificate in "
                                                     "--tls-cert '", cert_file, "'"));
  }
  ERR_clear_error();  // leave no stale errors for gRPC's own TLS code
  return result;
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
                                       std::function<Leadership()> leadership,
                                       std::function<std::string()> status_page)
    : coordinator_(coordinator),
      token_(std::move(token)),
      leadership_(std::move(leadership)),
      status_page_(std::move(status_page)) {}

CoordinatorService::~CoordinatorService() {
  if (!owner_.current()) return;
  absl::MutexLock lock(&take_waiters_->mu);
  while (take_waiters_->running > 0) take_waiters_->done.Wait(&take_waiters_->mu);
}

absl::Status AuthorizeCall(const grpc::ServerContextBase& ctx, const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  auto it = ctx.client_metadata().find("authorization");
  if (it == ctx.client_metadata().end()) {
    return absl::UnauthenticatedError("missing 'authorization' metadata (a token is required)");
  }
  absl::string_view value(it->second.data(), it->second.size());
  if (!absl::ConsumePrefix(&value, "Bearer ") || !ConstantTimeEquals(value, token)) {
    return absl::UnauthenticatedError("invalid token");
  }
  return absl::OkStatus();
}

absl::Status CoordinatorService::Authorize(const grpc::ServerContextBase& ctx) const {
  return AuthorizeCall(ctx, token_);
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

grpc::ServerUnaryReactor* CoordinatorService::Take(grpc::CallbackServerContext* ctx,
                                                   const v1::TakeRequest* req,
                                                   v1::TakeResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (absl::Status s = Authorize(*ctx); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  const int64_t wait_ms = std::clamp<int64_t>(req->wait_ms(), 0, kMaxWaitMs);
  // Answer a little before the caller's own deadline, so it gets "ask
  // again" rather than DEADLINE_EXCEEDED.
  absl::Time deadline = absl::Now() + absl::Milliseconds(wait_ms);
  const absl::Time call_deadline = absl::FromChrono(ctx->deadline());
  deadline = std::min(deadline, call_deadline - absl::Milliseconds(100));
  // `resp` lives until Finish.
  auto answer = [reactor, resp](absl::StatusOr<std::vector<WorkItem>> items) {
    if (absl::IsOutOfRange(items.status())) {
      resp->set_end_of_input(true);
      reactor->Finish(grpc::Status::OK);
      return;
    }
    if (items.ok()) {
      for (const WorkItem& item : *items) ToProto(item, resp->add_items());
    }
    reactor->Finish(ToGrpcStatus(items.status()));
  };
  // First without waiting, on this callback thread.
  absl::StatusOr<std::vector<WorkItem>> items =
      coordinator_->Take(req->queue(), req->worker(), req->max_items(), absl::InfinitePast(),
                         req->ahead());
  if (!items.ok() || !items->empty() || absl::Now() >= deadline) {
    answer(std::move(items));
    return reactor;
  }
  // Nothing to hand out yet: wait on a thread of its own, so that the
  // callback threads stay free for the completions this take waits for.
  {
    absl::MutexLock lock(&take_waiters_->mu);
    if (take_waiters_->running >= kMaxWaitingTakes) {
      answer(std::vector<WorkItem>());  // "ask again"
      return reactor;
    }
    ++take_waiters_->running;
  }
  auto wait = [coordinator = coordinator_, waiters = take_waiters_, answer,
               queue = req->queue(), worker = req->worker(), max_items = req->max_items(),
               ahead = req->ahead(), deadline] {
    NameThisThread("take-wait");
    answer(coordinator->Take(queue, worker, max_items, deadline, ahead));
    absl::MutexLock lock(&waiters->mu);
    if (--waiters->running == 0) waiters->done.SignalAll();
  };
  try {
    std::thread(std::move(wait)).detach();
  } catch (const std::system_error&) {  // no thread to be had: "ask again"
    {
      absl::MutexLock lock(&take_waiters_->mu);
      if (--take_waiters_->running == 0) take_waiters_->done.SignalAll();
    }
    answer(std::vector<WorkItem>());
  }
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Complete(grpc::CallbackServerContext* ctx,
                                                       const v1::CompleteRequest* req,
                                                       v1::CompleteResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (absl::Status s = Authorize(*ctx); !s.ok()) {
    reactor->Finish(ToGrpcStatus(s));
    return reactor;
  }
  // Answered at once in memory; on a durable server by the journal once
  // the completion is on disk. `resp` lives until Finish.
  coordinator_->CompleteAsync(
      req->queue(), req->worker(), req->lease_id(),
      [reactor, resp](absl::StatusOr<CompleteOutcome> outcome) {
        if (outcome.ok()) resp->set_duplicate(*outcome == CompleteOutcome::kDuplicate);
        reactor->Finish(ToGrpcStatus(outcome.status()));
      },
      req->records());
  return reactor;
}

grpc::Status CoordinatorService::Release(grpc::ServerContext* ctx,
                                         const v1::ReleaseRequest* req,
                                         v1::ReleaseResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  if (req->failed()) {
    absl::StatusOr<bool> failed =
        coordinator_->Fail(req->queue(), req->worker(), req->lease_id(), req->reason());
    if (failed.ok()) resp->set_item_failed(*failed);
    return ToGrpcStatus(failed.status());
  }
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
  if (leadership_) ToProto(leadership_(), resp->mutable_leadership());
  if (status_page_) resp->set_status_page(status_page_());
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

grpc::Status CoordinatorService::AgreeSteps(grpc::ServerContext* ctx,
                                            const v1::AgreeStepsRequest* req,
                                            v1::AgreeStepsResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<StepTally> tally = coordinator_->AgreeSteps(req->queue(), FromProto(*req));
  if (tally.ok()) ToProto(*tally, resp);
  return ToGrpcStatus(tally.status());
}

grpc::Status CoordinatorService::PassOver(grpc::ServerContext* ctx,
                                          const v1::PassOverRequest* req,
                                          v1::PassOverResponse* resp) {
  if (absl::Status s = Authorize(*ctx); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<bool> over = coordinator_->PassOver(req->queue(), req->worker(), req->siblings());
  if (over.ok()) resp->set_over(*over);
  return ToGrpcStatus(over.status());
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
                                     const std::string& token,
                                     std::function<Leadership()> leadership,
                                     std::function<std::string()> status_page)
    : coordinator_(std::move(coordinator)),
      service_(coordinator_.get(), token, std::move(leadership), std::move(status_page)) {}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const ServerOptions& options) {
  if (options.tls_cert_file.empty() && options.tls_key_file.empty()) {
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_cert_file.empty() || options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  absl::StatusOr<std::string> cert = ReadWholeFile(options.tls_cert_file, "--tls-cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadWholeFile(options.tls_key_file, "--tls-key");
  if (!key.ok()) return key.status();
  if (absl::Status s = CheckTlsPair(options.tls_cert_file, *cert, options.tls_key_file, *key);
      !s.ok()) {
    return s;
  }
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const ServerOptions& options) {
  EnableGrpcFork();
  if (absl::Status usable = CheckGrpcUsable(); !usable.ok()) return usable;
  // HOST:PORT, or gRPC's unix:PATH (a local socket file).
  absl::string_view unix_path = options.listen;
  const bool unix_socket = absl::ConsumePrefix(&unix_path, "unix:");
  absl::StatusOr<ListenAddress> listen =
      unix_socket ? ListenAddress{options.listen, 0}
                  : ParseListenAddress("--listen", options.listen);
  if (!listen.ok()) return listen.status();
  if (options.max_request_bytes < 1 ||
      options.max_request_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the largest request (", options.max_request_bytes, " bytes) must be in 1..",
        std::numeric_limits<int>::max()));
  }
  if (options.session_queues < 1 || options.session_queues > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session_queues (", options.session_queues, ") must be in 1..64"));
  }
  if (options.max_sessions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_sessions (", options.max_sessions, ") must be at least 1"));
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFor(options);
  if (!credentials.ok()) return credentials.status();
  // A port someone holds is refused before the state dir is opened (the
  // holder may be a coordinator of the same state dir); the bind below is
  // what decides.
  if (unix_socket) {
    if (absl::Status s = CheckUnixSocketFree("--listen", unix_path); !s.ok()) return s;
  } else if (listen->port != 0) {
    if (absl::Status s = ExplainBindFailure("--listen", *listen); !s.ok()) return s;
  }
  absl::StatusOr<std::unique_ptr<CoordinatorImpl>> coordinator;
  if (options.open_coordinator) {
    coordinator = options.open_coordinator();
  } else {
    CoordinatorOptions coordinator_options;
    coordinator_options.state_dir = options.state_dir;
    coordinator_options.clock = options.clock;
    coordinator = CoordinatorImpl::Create(coordinator_options);
  }
  if (!coordinator.ok()) return coordinator.status();
  std::unique_ptr<CoordinatorServer> server(
      new CoordinatorServer(*std::move(coordinator), options.token, options.leadership,
                            options.status_page));
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, *credentials, &server->port_);
  builder.RegisterService(&server->service_);
  CoordinatorService* service = &server->service_;
  server->session_limit_ = std::make_shared<SessionLimit>(options.max_sessions);
  server->session_queues_ = std::make_unique<SessionQueues>(
      builder, options.session_queues,
      [service](grpc::ServerContext* ctx, SessionStreamIo* io, grpc::ServerCompletionQueue* cq,
                void* tag) { service->RequestSession(ctx, io, cq, cq, tag); },
      [service, coordinator = server->coordinator_.get(), limit = server->session_limit_] {
        return NewSessionStream(
            coordinator,
            [service](const grpc::ServerContextBase& ctx) { return service->Authorize(ctx); },
            limit);
      });
  // gRPC sets SO_REUSEPORT by default, with which a second coordinator on
  // the same port binds too and the kernel splits the clients between them.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_request_bytes));
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  // gRPC's defaults (1 to 2 idle pollers) end a thread after nearly every
  // call that blocks (a take waiting for items, a held heartbeat, a commit)
  // and start another for the next: tens of thousands of thread creations
  // per second under load. Idle threads are cheap; keep them.
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 2);
  builder.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 64);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    server->server_.reset();
    if (!unix_socket) {
      if (absl::Status s = ExplainBindFailure("--listen", *listen); !s.ok()) return s;
    }
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options.listen, " (--listen); gRPC's log above says why"));
  }
  server->session_queues_->Start();
  return server;
}

CoordinatorServer::~CoordinatorServer() {
  if (!owner_.current()) {
    // Inherited through fork(): the server's threads live in the parent.
    server_.release();          // NOLINT: intentional leak
    session_queues_.release();  // NOLINT: intentional leak (its threads too)
    coordinator_.release();     // NOLINT: intentional leak
    return;
  }
  Shutdown();
  // gRPC's order: the server shut down, then its completion queues shut
  // down and drained, and only then the server destroyed (a request that
  // failed at shutdown may still sit in a queue, and finishing it reads
  // the server).
  session_queues_.reset();
}

void CoordinatorServer::Wait() { server_->Wait(); }

void CoordinatorServer::Shutdown(absl::Duration grace) {
  coordinator_->Shutdown();
  if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now() + grace));
}

}  // namespace shardq
