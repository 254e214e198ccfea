#include "src/client/coordinator_channels.h"

#include <utility>

namespace shardq {

CoordinatorChannels::CoordinatorChannels(std::unique_ptr<LeaderResolver> resolver,
                                         MakeChannel make_channel)
    : resolver_(std::move(resolver)), make_channel_(std::move(make_channel)) {}

std::shared_ptr<CoordinatorChannels> CoordinatorChannels::Fixed(
    const std::string& address, std::shared_ptr<grpc::Channel> channel) {
  CoordinatorAddress one;
  one.spec = address;
  one.coordinators = {address};
  return std::make_shared<CoordinatorChannels>(
      std::make_unique<LeaderResolver>(std::move(one), nullptr),
      [channel = std::move(channel)](const std::string&)
          -> absl::StatusOr<std::shared_ptr<grpc::Channel>> { return channel; });
}

absl::StatusOr<CoordinatorChannels::Target> CoordinatorChannels::Current() {
  absl::StatusOr<std::string> address = resolver_->Current();
  if (!address.ok()) return address.status();
  {
    absl::MutexLock lock(&mu_);
    auto it = targets_.find(*address);
    if (it != targets_.end()) return it->second;
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = make_channel_(*address);
  if (!channel.ok()) return channel.status();
  Target made;
  made.address = *address;
  made.channel = *std::move(channel);
  made.stub = v1::Coordinator::NewStub(made.channel);
  absl::MutexLock lock(&mu_);
  // Another thread may have made one meanwhile: every caller uses the first.
  return targets_.emplace(*address, std::move(made)).first->second;
}

void CoordinatorChannels::Failed(const std::string& address, absl::string_view leader_hint) {
  resolver_->Failed(address, leader_hint);
}

std::string LeaderHint(const grpc::ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  auto it = trailers.find(kLeaderMetadataKey);
  if (it == trailers.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace shardq
