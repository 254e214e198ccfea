// Clients find the leader (issue 18): an etcd://.../JOB address follows
// the election key from one coordinator to another, and a list of
// coordinators finds the one that answers, past dead ones and standbys.
// The coordinators are in-process servers; etcd is a real one
// (src/store/etcd_testing.h), whose election key the tests write by hand
// as the election would.
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/etcd/etcd_store.pb.h"
#include "shardq/work_queue.h"
#include "src/client/remote_backend.h"
#include "src/client/standby_testing.h"
#include "src/client/work_queue_backend.h"
#include "src/server/grpc_service.h"
#include "src/store/etcd_client.h"
#include "src/store/etcd_leader.h"
#include "src/store/etcd_testing.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::unique_ptr<CoordinatorServer> StartServer() {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

std::string AddressOf(const CoordinatorServer& server) {
  return absl::StrCat("127.0.0.1:", server.port());
}

// Creates queue "q" on `server` with items "<tag>-0" .. "<tag>-9", in order.
void CreateQueue(const CoordinatorServer& server, const std::string& tag) {
  RemoteOptions options;
  options.address = AddressOf(server);
  std::shared_ptr<QueueBackend> backend = *ConnectRemote(options);
  QueueConfig config;
  config.name = "q";
  config.shuffle = false;
  config.split = false;
  for (int i = 0; i < 10; ++i) config.items.push_back(absl::StrCat(tag, "-", i));
  absl::StatusOr<QueueInfo> created = backend->CreateQueue(config);
  ASSERT_TRUE(created.ok()) << created.status();
}

// A worker of queue "q" at `address`; generous bounds: a failover in these
// tests takes a re-read of etcd and a reconnect, well under a second.
std::unique_ptr<WorkQueue> Worker(const std::string& address, bool use_sessions) {
  RemoteOptions options;
  options.address = address;
  options.use_sessions = use_sessions;
  options.connect_timeout = absl::Seconds(60);
  options.retry.total_budget = absl::Seconds(60);
  absl::StatusOr<std::shared_ptr<QueueBackend>> backend = ConnectRemote(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  if (!backend.ok()) return nullptr;
  absl::StatusOr<std::unique_ptr<WorkQueue>> queue =
      WorkQueueFactory::Attach("q", *backend, "w", /*take_ahead=*/0);
  EXPECT_TRUE(queue.ok()) << queue.status();
  return queue.ok() ? *std::move(queue) : nullptr;
}

// Takes an item and completes it; returns the item ("" on an error, which
// the test reports).
std::string TakeAndComplete(WorkQueue& queue) {
  absl::StatusOr<WorkItem> item = queue.Take();
  EXPECT_TRUE(item.ok()) << item.status();
  if (!item.ok()) return "";
  absl::Status done = queue.Complete(*item);
  EXPECT_TRUE(done.ok()) << done;
  return item->item;
}

class EtcdLeader : public testing::Test {
 protected:
  void SetUp() override {
    if (EtcdTestCluster::FindBinary().empty()) GTEST_SKIP() << EtcdTestCluster::kMissing;
    absl::Status started = cluster_.Start();
    ASSERT_TRUE(started.ok()) << started;
    EtcdClientOptions options;
    options.endpoints = cluster_.endpoint_list();
    etcd_ = *EtcdClient::Create(options);
  }

  // Writes the election key of job "train" as the election would when the
  // coordinator at `advertise` wins (without a lease: the test moves it).
  void PointLeaderAt(const std::string& advertise) {
    etcdstore::LeaderInfo info;
    info.set_advertise(advertise);
    info.set_host("test-host");
    info.set_pid(getpid());
    etcdserverpb::PutRequest put;
    put.set_key(EtcdLeaderKey("train"));
    put.set_value(info.SerializeAsString());
    absl::StatusOr<etcdserverpb::PutResponse> r = etcd_->Put(put);
    ASSERT_TRUE(r.ok()) << r.status();
  }

  std::string EtcdAddress() const {
    return absl::StrCat("etcd://", cluster_.endpoints(), "/train");
  }

  EtcdTestCluster cluster_{1};
  std::unique_ptr<EtcdClient> etcd_;
};

// Parameter: the worker uses sessions (true) or unary calls.
class EtcdLeaderFollowing : public EtcdLeader, public testing::WithParamInterface<bool> {};

INSTANTIATE_TEST_SUITE_P(SessionsAndUnary, EtcdLeaderFollowing, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "Sessions" : "Unary";
                         });

TEST_P(EtcdLeaderFollowing, ClientFollowsTheElectionKeyToTheNewLeader) {
  std::unique_ptr<CoordinatorServer> a = StartServer();
  std::unique_ptr<CoordinatorServer> b = StartServer();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  CreateQueue(*a, "a");
  CreateQueue(*b, "b");
  PointLeaderAt(AddressOf(*a));

  std::unique_ptr<WorkQueue> queue = Worker(EtcdAddress(), /*use_sessions=*/GetParam());
  ASSERT_NE(queue, nullptr);
  EXPECT_EQ(TakeAndComplete(*queue), "a-0");
  EXPECT_EQ(TakeAndComplete(*queue), "a-1");

  // A failover: the key names B, then A goes away.
  PointLeaderAt(AddressOf(*b));
  a->Shutdown();
  a.reset();
  EXPECT_EQ(TakeAndComplete(*queue), "b-0");
  EXPECT_EQ(TakeAndComplete(*queue), "b-1");
}

TEST_F(EtcdLeader, NobodyLeadingFailsAfterTheConnectTimeoutNamingEtcdAndTheJob) {
  RemoteOptions options;
  options.address = EtcdAddress();
  options.connect_timeout = absl::Seconds(1);
  std::shared_ptr<QueueBackend> backend = *ConnectRemote(options);
  absl::Status s = backend->GetQueue("q").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("nobody leads job 'train' yet"));
  EXPECT_THAT(s.message(), HasSubstr(cluster_.endpoints()));
}

TEST_F(EtcdLeader, ALeaderThatAppearsWhileTheClientWaitsIsUsed) {
  std::unique_ptr<CoordinatorServer> a = StartServer();
  ASSERT_NE(a, nullptr);
  CreateQueue(*a, "a");
  RemoteOptions options;
  options.address = EtcdAddress();
  options.connect_timeout = absl::Seconds(60);
  std::shared_ptr<QueueBackend> backend = *ConnectRemote(options);
  // Nobody leads when the client starts waiting (its first read finds no
  // key, whatever the threads' timing), then A wins.
  absl::StatusOr<QueueInfo> info;
  std::thread waiter([&] { info = backend->GetQueue("q"); });
  PointLeaderAt(AddressOf(*a));
  waiter.join();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_items, 10);
}

TEST(ListAddress, ADeadFirstCoordinatorIsPassedOver) {
  std::unique_ptr<CoordinatorServer> dead = StartServer();
  std::unique_ptr<CoordinatorServer> b = StartServer();
  ASSERT_NE(dead, nullptr);
  ASSERT_NE(b, nullptr);
  const std::string dead_address = AddressOf(*dead);
  dead->Shutdown();
  dead.reset();
  CreateQueue(*b, "b");
  for (bool sessions : {true, false}) {
    std::unique_ptr<WorkQueue> queue =
        Worker(absl::StrCat(dead_address, ",", AddressOf(*b)), sessions);
    ASSERT_NE(queue, nullptr);
    EXPECT_THAT(TakeAndComplete(*queue), StartsWith("b-"));
  }
}

TEST(ListAddress, AStandbysHintLeadsStraightToTheLeader) {
  std::unique_ptr<CoordinatorServer> b = StartServer();
  ASSERT_NE(b, nullptr);
  CreateQueue(*b, "b");
  StandbyServer hinting(AddressOf(*b));
  StandbyServer skipped(AddressOf(*b));
  for (bool sessions : {true, false}) {
    std::unique_ptr<WorkQueue> queue = Worker(
        absl::StrCat(hinting.address(), ",", skipped.address(), ",", AddressOf(*b)), sessions);
    ASSERT_NE(queue, nullptr);
    EXPECT_THAT(TakeAndComplete(*queue), StartsWith("b-"));
  }
  EXPECT_GE(hinting.calls(), 2);
  EXPECT_EQ(skipped.calls(), 0);  // the hint went past it
}

TEST(ListAddress, AllDownFailsAfterTheConnectTimeoutNamingTheList) {
  std::unique_ptr<CoordinatorServer> x = StartServer();
  std::unique_ptr<CoordinatorServer> y = StartServer();
  const std::string list = absl::StrCat(AddressOf(*x), ",", AddressOf(*y));
  x.reset();
  y.reset();
  RemoteOptions options;
  options.address = list;
  options.connect_timeout = absl::Seconds(1);
  std::shared_ptr<QueueBackend> backend = *ConnectRemote(options);
  absl::Status s = backend->GetQueue("q").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr(list));
}

TEST(ListAddress, AMalformedAddressIsRefusedAtConnect) {
  RemoteOptions options;
  options.address = "127.0.0.1:1,127.0.0.1:x";
  absl::Status s = ConnectRemote(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("'127.0.0.1:x'"));
  options.address = "etcd://127.0.0.1:2379/";
  s = ConnectRemote(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("empty job"));
}

}  // namespace
}  // namespace shardq
