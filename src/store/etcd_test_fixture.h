// For tests: a googletest fixture with a 1-member etcd on a free loopback
// port (EtcdTestCluster) and a client of it; the test is skipped where
// etcd is not installed.
#ifndef SHARDQ_STORE_ETCD_TEST_FIXTURE_H_
#define SHARDQ_STORE_ETCD_TEST_FIXTURE_H_

#include <memory>

#include "gtest/gtest.h"
#include "src/store/etcd_client.h"
#include "src/store/etcd_testing.h"

namespace shardq {

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdTestCluster::FindBinary().empty()) GTEST_SKIP() << EtcdTestCluster::kMissing;
    absl::Status started = cluster_.Start();
    ASSERT_TRUE(started.ok()) << started;
    EtcdClientOptions options;
    options.endpoints = cluster_.endpoint_list();
    absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  EtcdTestCluster cluster_{1};
  std::shared_ptr<EtcdClient> client_;
};

}  // namespace shardq

#endif  // SHARDQ_STORE_ETCD_TEST_FIXTURE_H_
