#include "src/client/discovery.h"

#include <map>

#include "gtest/gtest.h"

namespace shardq {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const char* kTfConfig = R"({"cluster": {"worker": ["w0:1", "w1:1"], "ps": ["p:1"],
                            "shardq": ["coord:7077"]},
                            "task": {"type": "worker", "index": 1}})";

TEST(DiscoverCoordinator, ExplicitAddressWinsOverEverything) {
  auto d = DiscoverCoordinator("here:1", Env({{"SHARDQ_ADDRESS", "env:2"},
                                              {"TF_CONFIG", kTfConfig}}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->address, "here:1");
  EXPECT_EQ(d->source, "explicit");
}

TEST(DiscoverCoordinator, ShardqAddressComesBeforeTfConfig) {
  auto d = DiscoverCoordinator("", Env({{"SHARDQ_ADDRESS", "env:2"},
                                        {"TF_CONFIG", kTfConfig}}));
  EXPECT_EQ(d->address, "env:2");
}

TEST(DiscoverCoordinator, TfConfigShardqJobGivesAddressAndWorkerName) {
  auto d = DiscoverCoordinator("", Env({{"TF_CONFIG", kTfConfig},
                                        {"MASTER_ADDR", "m"}, {"SHARDQ_PORT", "9"}}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->address, "coord:7077");
  EXPECT_EQ(d->worker_id, "worker-1");
  EXPECT_EQ(d->source, "TF_CONFIG");
}

TEST(DiscoverCoordinator, TfConfigWithoutShardqJobFallsThroughToTorchrun) {
  auto d = DiscoverCoordinator("", Env({{"TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}})"},
                                        {"MASTER_ADDR", "10.0.0.1"},
                                        {"SHARDQ_PORT", "7077"},
                                        {"RANK", "5"}}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->address, "10.0.0.1:7077");
  EXPECT_EQ(d->worker_id, "rank-5");
  EXPECT_EQ(d->source, "torchrun");
}

TEST(DiscoverCoordinator, MasterAddrAloneIsEmbedded) {
  auto d = DiscoverCoordinator("", Env({{"MASTER_ADDR", "10.0.0.1"}}));
  EXPECT_EQ(d->address, "");
  EXPECT_EQ(d->source, "embedded");
}

TEST(DiscoverCoordinator, BadValuesNameTheVariable) {
  auto d = DiscoverCoordinator("", Env({{"TF_CONFIG", "{not json"}}));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("TF_CONFIG"), std::string::npos);
  d = DiscoverCoordinator("", Env({{"MASTER_ADDR", "m"}, {"SHARDQ_PORT", "99999"}}));
  EXPECT_NE(d.status().message().find("SHARDQ_PORT"), std::string::npos);
  d = DiscoverCoordinator("", Env({{"TF_CONFIG", R"({"cluster": {"shardq": []}})"}}));
  EXPECT_NE(d.status().message().find("cluster.shardq"), std::string::npos);
}

TEST(DiscoverCoordinator, TfConfigShardqJobOfSeveralTasksIsTheListOfItsCoordinators) {
  auto d = DiscoverCoordinator(
      "", Env({{"TF_CONFIG", R"({"cluster": {"shardq": ["c1:7077", "c2:7077"]}})"}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->address, "c1:7077,c2:7077");
  d = DiscoverCoordinator(
      "", Env({{"TF_CONFIG", R"({"cluster": {"shardq": ["etcd://e:2379/train"]}})"}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->address, "etcd://e:2379/train");
  d = DiscoverCoordinator("", Env({{"TF_CONFIG", R"({"cluster": {"shardq": ["c1:1", 7]}})"}}));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("cluster.shardq"), std::string::npos);
}

constexpr const char* kTfConfigWithoutShardq =
    R"({"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"], "ps": ["p:1"]},
        "task": {"type": "worker", "index": 0}})";

TEST(DiscoverCoordinator, TfClusterOfSeveralWorkersWithoutShardqJobIsRefused) {
  auto d = DiscoverCoordinator("", Env({{"TF_CONFIG", kTfConfigWithoutShardq}}));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(d.status().message());
  EXPECT_NE(message.find("TF_CONFIG describes 3 worker tasks"), std::string::npos) << message;
  EXPECT_NE(message.find("no \"shardq\" job"), std::string::npos) << message;
  EXPECT_NE(message.find("shardq serve"), std::string::npos) << message;
  EXPECT_NE(message.find("SHARDQ_ADDRESS"), std::string::npos) << message;
  EXPECT_NE(message.find("SHARDQ_EMBEDDED=1"), std::string::npos) << message;
}

TEST(DiscoverCoordinator, TfClusterWithoutShardqJobStillUsesAnAddressGivenElsewhere) {
  auto d = DiscoverCoordinator("", Env({{"TF_CONFIG", kTfConfigWithoutShardq},
                                        {"SHARDQ_ADDRESS", "env:2"}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->address, "env:2");
  d = DiscoverCoordinator("here:1", Env({{"TF_CONFIG", kTfConfigWithoutShardq}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->address, "here:1");
}

TEST(DiscoverCoordinator, ShardqEmbeddedOptsIntoOneQueuePerProcess) {
  auto d = DiscoverCoordinator("", Env({{"TF_CONFIG", kTfConfigWithoutShardq},
                                        {"SHARDQ_EMBEDDED", "1"}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->address, "");
  EXPECT_EQ(d->source, "embedded");
  d = DiscoverCoordinator("", Env({{"WORLD_SIZE", "4"}, {"SHARDQ_EMBEDDED", "1"}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->source, "embedded");
}

TEST(DiscoverCoordinator, TfClusterOfOneTaskOrAnEvaluatorIsEmbedded) {
  auto d = DiscoverCoordinator(
      "", Env({{"TF_CONFIG", R"({"cluster": {"worker": ["a:1"], "ps": ["p:1", "p:2"]}})"}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->source, "embedded");
  // An evaluator reads its own data whole, beside a cluster of workers.
  d = DiscoverCoordinator("", Env({{"TF_CONFIG", R"({"cluster": {"worker": ["a:1", "b:1"]},
                                                    "task": {"type": "evaluator", "index": 0}})"}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->source, "embedded");
}

TEST(DiscoverCoordinator, TorchrunWorldOfSeveralRanksWithoutCoordinatorIsRefused) {
  auto d = DiscoverCoordinator("", Env({{"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"}}));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(d.status().message());
  EXPECT_NE(message.find("WORLD_SIZE=4"), std::string::npos) << message;
  EXPECT_NE(message.find("SHARDQ_PORT"), std::string::npos) << message;
  EXPECT_NE(message.find("SHARDQ_EMBEDDED=1"), std::string::npos) << message;
  // One rank, or a coordinator, is fine.
  EXPECT_TRUE(DiscoverCoordinator("", Env({{"WORLD_SIZE", "1"}})).ok());
  d = DiscoverCoordinator("", Env({{"WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"},
                                   {"SHARDQ_PORT", "7077"}}));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->address, "10.0.0.1:7077");
  d = DiscoverCoordinator("", Env({{"WORLD_SIZE", "many"}}));
  EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("WORLD_SIZE"), std::string::npos);
}

}  // namespace
}  // namespace shardq
