#include "src/server/standby_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/server_builder.h"
#include "src/server/listen_address.h"

namespace shardq {

// Finishes every call as it arrives, with the standby's answer.
class StandbyServer::Service final : public grpc::CallbackGenericService {
 public:
  explicit Service(const StandbyServer* standby) : standby_(standby) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    class Reactor final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(grpc::Status status) { Finish(std::move(status)); }
      void OnDone() override { delete this; }
    };
    standby_->calls_.fetch_add(1);
    // Who leads is told only to callers with the job's token.
    if (absl::Status s = AuthorizeCall(*ctx, standby_->token_); !s.ok()) {
      return new Reactor(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(s.message())));
    }
    std::string message;
    std::string leader;
    standby_->Answer(&message, &leader);
    if (!leader.empty()) ctx->AddTrailingMetadata(kLeaderMetadataKey, leader);
    return new Reactor(grpc::Status(grpc::StatusCode::UNAVAILABLE, std::move(message)));
  }

 private:
  const StandbyServer* const standby_;
};

StandbyServer::StandbyServer(std::string job, std::string token)
    : job_(std::move(job)), token_(std::move(token)) {
  SetLeader("", "", 0);
}

absl::StatusOr<std::unique_ptr<StandbyServer>> StandbyServer::Start(const ServerOptions& options,
                                                                    std::string job) {
  absl::StatusOr<ListenAddress> listen = ParseListenAddress("--listen", options.listen);
  if (!listen.ok()) return listen.status();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      ServerCredentialsFor(options);
  if (!credentials.ok()) return credentials.status();
  if (listen->port != 0) {
    if (absl::Status s = ExplainBindFailure("--listen", *listen); !s.ok()) return s;
  }
  std::unique_ptr<StandbyServer> standby(new StandbyServer(std::move(job), options.token));
  standby->service_ = std::make_unique<Service>(standby.get());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, *credentials, &standby->port_);
  builder.RegisterCallbackGenericService(standby->service_.get());
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  standby->server_ = builder.BuildAndStart();
  if (standby->server_ == nullptr || standby->port_ == 0) {
    standby->server_.reset();
    if (absl::Status s = ExplainBindFailure("--listen", *listen); !s.ok()) return s;
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options.listen, " (--listen); gRPC's log above says why"));
  }
  return standby;
}

StandbyServer::~StandbyServer() {
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)));
    server_->Wait();
  }
}

void StandbyServer::SetLeader(const std::string& self, const std::string& leader,
                              int64_t term) {
  std::string message =
      leader.empty()
          ? absl::StrCat("not leader: nobody leads job '", job_,
                         "' yet (an election is under way); this coordinator (", self,
                         ") stands by")
          : absl::StrCat("not leader: job '", job_, "' is led by ", leader, " (term ", term,
                         "); this coordinator (", self, ") stands by");
  absl::MutexLock lock(&mu_);
  message_ = std::move(message);
  leader_ = leader;
}

void StandbyServer::SetUnknown(const std::string& self, const std::string& why) {
  absl::MutexLock lock(&mu_);
  message_ = absl::StrCat("not leader: this coordinator (", self, ") of job '", job_,
                          "' does not know who leads: ", why, "; it stands by");
  leader_.clear();
}

void StandbyServer::Answer(std::string* message, std::string* leader) const {
  absl::MutexLock lock(&mu_);
  *message = message_;
  *leader = leader_;
}

}  // namespace shardq
