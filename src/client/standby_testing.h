// For tests: a coordinator that stands by, as a standby of an HA job
// answers (issue 18): every call, unary or stream, fails with UNAVAILABLE
// "not leader: ..." and names the leader in the trailing metadata
// kLeaderMetadataKey. It counts the calls it refused.
#ifndef SHARDQ_CLIENT_STANDBY_TESTING_H_
#define SHARDQ_CLIENT_STANDBY_TESTING_H_

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "src/client/coordinator_address.h"

namespace shardq {

class FakeStandby final : public grpc::CallbackGenericService {
 public:
  // `leader` "" sends no hint.
  explicit FakeStandby(std::string leader) : leader_(std::move(leader)) {}

  std::atomic<int> calls{0};

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    ++calls;
    if (!leader_.empty()) context->AddTrailingMetadata(kLeaderMetadataKey, leader_);
    return new Refusal(absl::StrCat("not leader: job 'train' is led by ",
                                    leader_.empty() ? "nobody yet" : leader_,
                                    "; this coordinator stands by"));
  }

 private:
  class Refusal final : public grpc::ServerGenericBidiReactor {
   public:
    explicit Refusal(const std::string& message) {
      Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, message));
    }
    void OnDone() override { delete this; }
  };

  const std::string leader_;
};

// A FakeStandby serving on a free loopback port until destroyed.
class StandbyServer {
 public:
  explicit StandbyServer(const std::string& leader) : service_(leader) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterCallbackGenericService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~StandbyServer() { server_->Shutdown(); }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int calls() const { return service_.calls.load(); }

 private:
  FakeStandby service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace shardq

#endif  // SHARDQ_CLIENT_STANDBY_TESTING_H_
