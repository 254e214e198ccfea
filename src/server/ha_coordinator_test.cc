#include "src/server/ha_coordinator.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "proto/etcd/etcd_store.pb.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/store/etcd_store.h"
#include "src/store/etcd_test_fixture.h"

namespace shardq {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Waits on a condition of another thread's making, with a generous bound.
template <typename Predicate>
bool Eventually(Predicate predicate, absl::Duration bound = absl::Seconds(60)) {
  const absl::Time give_up = absl::Now() + bound;
  while (!predicate()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

class HaCoordinatorTest : public EtcdTest {
 protected:
  std::unique_ptr<HaCoordinator> Start() {
    HaOptions options;
    options.etcd = cluster_.endpoints();
    options.job = "train";
    options.lease_ttl_seconds = 2;
    options.server.listen = "127.0.0.1:0";
    absl::StatusOr<std::unique_ptr<HaCoordinator>> ha = HaCoordinator::Start(options);
    EXPECT_TRUE(ha.ok()) << ha.status();
    return ha.ok() ? *std::move(ha) : nullptr;
  }

  static std::unique_ptr<v1::Coordinator::Stub> Stub(const HaCoordinator& ha) {
    return v1::Coordinator::NewStub(
        grpc::CreateChannel(ha.advertise(), grpc::InsecureChannelCredentials()));
  }

  static grpc::Status CreateQueue(v1::Coordinator::Stub& stub, const std::string& name) {
    v1::CreateQueueRequest req;
    v1::QueueConfig* c = req.mutable_config();
    c->set_name(name);
    for (int i = 0; i < 4; ++i) c->add_items(absl::StrCat("f", i, ".txt"));
    c->set_num_epochs(1);
    c->set_num_clients(1);
    c->set_lease_timeout_ms(60000);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::QueueInfo info;
    return stub.CreateQueue(&ctx, req, &info);
  }

  static grpc::Status Status(v1::Coordinator::Stub& stub, v1::StatusResponse* resp,
                             std::string* leader_metadata = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status status = stub.Status(&ctx, v1::StatusRequest(), resp);
    if (leader_metadata != nullptr) {
      auto it = ctx.GetServerTrailingMetadata().find(kLeaderMetadataKey);
      if (it != ctx.GetServerTrailingMetadata().end()) {
        *leader_metadata = std::string(it->second.data(), it->second.size());
      }
    }
    return status;
  }

};

TEST_F(HaCoordinatorTest, OneLeadsTheStandbyRefusesNamingItAndTakesOverWithTheState) {
  std::unique_ptr<HaCoordinator> a = Start();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(Eventually([&] { return a->leading(); }));
  std::unique_ptr<HaCoordinator> b = Start();
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(Eventually([&] { return b->leadership().leader == a->advertise(); }));
  EXPECT_FALSE(b->leading());

  // The standby answers every call UNAVAILABLE "not leader", naming a.
  std::unique_ptr<v1::Coordinator::Stub> to_b = Stub(*b);
  v1::StatusResponse refused;
  std::string named;
  grpc::Status s = Status(*to_b, &refused, &named);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(s.error_message(), HasSubstr("not leader"));
  EXPECT_THAT(s.error_message(), HasSubstr(a->advertise()));
  EXPECT_EQ(named, a->advertise());
  EXPECT_EQ(CreateQueue(*to_b, "q").error_code(), grpc::StatusCode::UNAVAILABLE);

  // The leader serves and says who leads, its term and the standbys.
  std::unique_ptr<v1::Coordinator::Stub> to_a = Stub(*a);
  grpc::Status created = CreateQueue(*to_a, "q");
  ASSERT_TRUE(created.ok()) << created.error_message();
  v1::StatusResponse status;
  ASSERT_TRUE(Status(*to_a, &status).ok());
  EXPECT_EQ(status.leadership().job(), "train");
  EXPECT_EQ(status.leadership().leader(), a->advertise());
  EXPECT_GT(status.leadership().term(), 0);
  EXPECT_THAT(status.leadership().standbys(), ElementsAre(b->advertise()));
  EXPECT_EQ(a->failovers(), 0);
  const int64_t first_term = status.leadership().term();

  // A clean stop hands over at once; b recovers the queue from etcd.
  a.reset();
  ASSERT_TRUE(Eventually([&] { return b->leading(); }));
  EXPECT_EQ(b->failovers(), 1);
  v1::StatusResponse after;
  grpc::Status answered = Status(*to_b, &after);
  ASSERT_TRUE(answered.ok()) << answered.error_message();
  ASSERT_EQ(after.queues_size(), 1);
  EXPECT_EQ(after.queues(0).name(), "q");
  EXPECT_EQ(after.leadership().leader(), b->advertise());
  EXPECT_GT(after.leadership().term(), first_term);
  EXPECT_TRUE(after.leadership().standbys().empty());
}

TEST_F(HaCoordinatorTest, ALeaderWhoseTermWasTakenCommitsNothingAndStepsDownByItself) {
  std::unique_ptr<HaCoordinator> a = Start();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(Eventually([&] { return a->leading(); }));
  std::unique_ptr<v1::Coordinator::Stub> to_a = Stub(*a);
  ASSERT_TRUE(CreateQueue(*to_a, "before").ok());

  // Another coordinator's term, as after a's lease had expired in a pause.
  const std::string key = EtcdStore::JobPrefix("train") + "leader";
  etcdserverpb::DeleteRangeRequest del;
  del.set_key(key);
  ASSERT_TRUE(client_->DeleteRange(del).ok());
  etcdstore::LeaderInfo other;
  other.set_advertise("10.9.9.9:7077");
  etcdserverpb::PutRequest put;
  put.set_key(key);
  put.set_value(other.SerializeAsString());
  ASSERT_TRUE(client_->Put(put).ok());

  // What it is asked now fails: its commit is refused by etcd.
  grpc::Status refused = CreateQueue(*to_a, "after");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  ASSERT_TRUE(Eventually([&] { return !a->leading(); }));
  ASSERT_TRUE(Eventually([&] { return a->leadership().leader == "10.9.9.9:7077"; }));
  v1::StatusResponse status;
  std::string named;
  grpc::Status s = Status(*to_a, &status, &named);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(named, "10.9.9.9:7077");
  EXPECT_TRUE(a->fatal().ok());

  // Nothing of "after" reached etcd: the state holds "before" only.
  RecoveredState recovered;
  EtcdStoreOptions read;
  read.client = client_;
  read.job = "train";
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(read, &recovered);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_EQ(recovered.queues.size(), 1u);
  EXPECT_EQ(recovered.queues[0].name, "before");
}

TEST_F(HaCoordinatorTest, DamagedStateInEtcdEndsTheProcessNamingTheKeyInsteadOfLeading) {
  etcdserverpb::PutRequest put;
  put.set_key(EtcdStore::JobPrefix("train") + "j/71/00000000000000000001");
  put.set_value("not a batch");
  ASSERT_TRUE(client_->Put(put).ok());
  std::unique_ptr<HaCoordinator> a = Start();
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(Eventually([&] { return !a->fatal().ok(); }));
  EXPECT_EQ(a->fatal().code(), absl::StatusCode::kDataLoss) << a->fatal();
  EXPECT_THAT(a->fatal().message(), HasSubstr("j/71/00000000000000000001"));
  EXPECT_FALSE(a->leading());
}

TEST(StandbyServer, NamesTheLeaderOnlyToCallersWithTheToken) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.token = "secret";
  absl::StatusOr<std::unique_ptr<StandbyServer>> standby = StandbyServer::Start(options, "train");
  ASSERT_TRUE(standby.ok()) << standby.status();
  (*standby)->SetLeader("127.0.0.1:1", "10.0.0.1:7077", 3);
  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*standby)->port()), grpc::InsecureChannelCredentials()));
  for (const std::string token : {"", "wrong", "secret"}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    v1::StatusResponse resp;
    grpc::Status s = stub->Status(&ctx, v1::StatusRequest(), &resp);
    const bool named = ctx.GetServerTrailingMetadata().count(kLeaderMetadataKey) > 0;
    if (token == "secret") {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
      EXPECT_THAT(s.error_message(), HasSubstr("10.0.0.1:7077"));
      EXPECT_TRUE(named);
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
      EXPECT_THAT(s.error_message(), testing::Not(HasSubstr("10.0.0.1")));
      EXPECT_FALSE(named);
    }
  }
  EXPECT_EQ((*standby)->calls(), 3);
}

TEST(HaCoordinator, RefusesBadOptionsNamingTheFlag) {
  HaOptions options;
  options.etcd = "127.0.0.1:1";
  options.server.listen = "127.0.0.1:0";
  options.job = "";
  EXPECT_THAT(HaCoordinator::Start(options).status().message(), HasSubstr("--job"));
  options.job = "a/b";
  EXPECT_THAT(HaCoordinator::Start(options).status().message(), HasSubstr("--job"));
  options.job = "j";
  options.server.state_dir = "/tmp/x";
  EXPECT_THAT(HaCoordinator::Start(options).status().message(), HasSubstr("--state-dir"));
  options.server.state_dir.clear();
  options.lease_ttl_seconds = 0;
  EXPECT_THAT(HaCoordinator::Start(options).status().message(), HasSubstr("--etcd-lease-ttl"));
  options.lease_ttl_seconds = 5;
  options.etcd = "127.0.0.1:";
  absl::Status bad = HaCoordinator::Start(options).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_THAT(bad.message(), HasSubstr("--etcd"));
}

}  // namespace
}  // namespace shardq
