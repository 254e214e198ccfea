// For tests: a standby coordinator of a highly available job (the real
// src/server/standby_server.h) on a free loopback port, refusing every
// call with UNAVAILABLE "not leader" and naming `leader` ("" : none) in
// the trailing metadata kLeaderMetadataKey.
#ifndef SHARDQ_CLIENT_STANDBY_TESTING_H_
#define SHARDQ_CLIENT_STANDBY_TESTING_H_

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "src/server/standby_server.h"

namespace shardq {

inline std::unique_ptr<StandbyServer> StartStandby(const std::string& leader) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<StandbyServer>> standby = StandbyServer::Start(options, "train");
  EXPECT_TRUE(standby.ok()) << standby.status();
  if (!standby.ok()) return nullptr;
  (*standby)->SetLeader(absl::StrCat("127.0.0.1:", (*standby)->port()), leader,
                        /*term=*/leader.empty() ? 0 : 7);
  return *std::move(standby);
}

inline std::string AddressOf(const StandbyServer& standby) {
  return absl::StrCat("127.0.0.1:", standby.port());
}

}  // namespace shardq

#endif  // SHARDQ_CLIENT_STANDBY_TESTING_H_
