// The gRPC channel to the coordinator a client should call now: the
// LeaderResolver's choice (src/client/coordinator_address.h), with one
// channel per address it has named, made on first use and kept (a list or
// a job's leaders are a handful of addresses). The remote backend's unary
// calls and its worker sessions share one.
//
// Thread-safe.
#ifndef SHARDQ_CLIENT_COORDINATOR_CHANNELS_H_
#define SHARDQ_CLIENT_COORDINATOR_CHANNELS_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/client/coordinator_address.h"

namespace shardq {

class CoordinatorChannels {
 public:
  using MakeChannel =
      std::function<absl::StatusOr<std::shared_ptr<grpc::Channel>>(const std::string& address)>;

  // `make_channel` makes the channel to one address (credentials and
  // arguments are its business; its error, such as a fork child that cannot
  // use gRPC, is Current()'s); called without a lock held.
  CoordinatorChannels(std::unique_ptr<LeaderResolver> resolver, MakeChannel make_channel);

  // Always `channel`, named `address` in messages (a test's coordinator).
  static std::shared_ptr<CoordinatorChannels> Fixed(const std::string& address,
                                                    std::shared_ptr<grpc::Channel> channel);

  struct Target {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::shared_ptr<v1::Coordinator::Stub> stub;  // on `channel`
  };

  // The coordinator to call now and its channel; the errors of
  // LeaderResolver::Current (UNAVAILABLE while etcd names no reachable
  // leader) and of make_channel.
  absl::StatusOr<Target> Current();

  // The call to `address` got no answer, or a "not leader" one naming
  // `leader_hint` (LeaderHint of its context; "" when none): the next
  // Current() may name another coordinator (LeaderResolver::Failed).
  void Failed(const std::string& address, absl::string_view leader_hint);

  const CoordinatorAddress& address() const { return resolver_->address(); }
  // One fixed coordinator (the statuses and notes name it, as before
  // issue 18).
  bool single() const { return resolver_->address().single(); }

 private:
  const std::unique_ptr<LeaderResolver> resolver_;
  const MakeChannel make_channel_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Target> targets_ ABSL_GUARDED_BY(mu_);
};

// The leader a standby names in the trailing metadata of a finished call
// (kLeaderMetadataKey); "" when it names none.
std::string LeaderHint(const grpc::ClientContext& context);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_COORDINATOR_CHANNELS_H_
