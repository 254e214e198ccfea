#include "src/client/cluster_coordinator.h"

#include <map>
#include <string>

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

constexpr char kCluster[] =
    R"({"cluster": {"chief": ["c0:2222"], "ps": ["p0:2222"], "worker": ["w0:2222", "w1:2222"]},)";

TEST(ClusterCoordinator, ChiefTaskZeroServesOnItsHostAtTheDefaultPort) {
  const std::string chief_task = R"("task": {"type": "chief", "index": 0}})";
  auto chief = FindClusterCoordinator("", Env({{"TF_CONFIG", kCluster + chief_task}}));
  ASSERT_TRUE(chief.ok()) << chief.status();
  ASSERT_TRUE(chief->has_value());
  EXPECT_EQ((*chief)->address, "c0:7077");
  EXPECT_TRUE((*chief)->serve_here);
  EXPECT_EQ((*chief)->source, "TF_CONFIG");

  auto worker = FindClusterCoordinator(
      "", Env({{"TF_CONFIG", std::string(kCluster) + R"("task": {"type": "worker", "index": 0}})"},
               {"SHARDQ_PORT", "9000"}}));
  ASSERT_TRUE(worker.ok() && worker->has_value());
  EXPECT_EQ((*worker)->address, "c0:9000");
  EXPECT_FALSE((*worker)->serve_here);
}

TEST(ClusterCoordinator, WithoutChiefThePsTaskZeroServesElseWorkerZero) {
  auto ps = FindClusterCoordinator(
      "", Env({{"TF_CONFIG",
                R"({"cluster": {"ps": ["p0:1", "p1:1"], "worker": ["w0:1", "w1:1"]},
                    "task": {"type": "ps", "index": 0}})"}}));
  ASSERT_TRUE(ps.ok() && ps->has_value());
  EXPECT_EQ((*ps)->address, "p0:7077");
  EXPECT_TRUE((*ps)->serve_here);
  auto worker = FindClusterCoordinator(
      "", Env({{"TF_CONFIG", R"({"cluster": {"worker": ["w0:1", "w1:1"]},
                                 "task": {"type": "worker", "index": 1}})"}}));
  ASSERT_TRUE(worker.ok() && worker->has_value());
  EXPECT_EQ((*worker)->address, "w0:7077");
  EXPECT_FALSE((*worker)->serve_here);
}

TEST(ClusterCoordinator, TorchrunRankZeroServesOnMasterAddr) {
  auto rank0 = FindClusterCoordinator(
      "", Env({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "10.0.0.1"}}));
  ASSERT_TRUE(rank0.ok() && rank0->has_value());
  EXPECT_EQ((*rank0)->address, "10.0.0.1:7077");
  EXPECT_TRUE((*rank0)->serve_here);
  auto rank1 = FindClusterCoordinator(
      "", Env({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"},
               {"SHARDQ_PORT", "7100"}}));
  ASSERT_TRUE(rank1.ok() && rank1->has_value());
  EXPECT_EQ((*rank1)->address, "10.0.0.1:7100");
  EXPECT_FALSE((*rank1)->serve_here);
}

TEST(ClusterCoordinator, NoneWhenTheJobNamesACoordinatorOrHasOneProcess) {
  EXPECT_FALSE(FindClusterCoordinator("h:1", Env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}}))
                   ->has_value());
  EXPECT_FALSE(FindClusterCoordinator("", Env({{"SHARDQ_ADDRESS", "h:1"}, {"WORLD_SIZE", "2"},
                                              {"MASTER_ADDR", "m"}}))
                   ->has_value());
  EXPECT_FALSE(FindClusterCoordinator(
                   "", Env({{"TF_CONFIG", R"({"cluster": {"shardq": ["s:1"], "worker": ["a:1",
                            "b:1"]}, "task": {"type": "worker", "index": 0}})"}}))
                   ->has_value());
  EXPECT_FALSE(FindClusterCoordinator("", Env({{"WORLD_SIZE", "1"}, {"MASTER_ADDR", "m"}}))
                   ->has_value());
  EXPECT_FALSE(FindClusterCoordinator("", Env({}))->has_value());
  EXPECT_FALSE(FindClusterCoordinator("", Env({{"SHARDQ_EMBEDDED", "1"}, {"WORLD_SIZE", "2"},
                                              {"MASTER_ADDR", "m"}}))
                   ->has_value());
}

TEST(ClusterCoordinator, BadVariablesAreNamed) {
  auto port = FindClusterCoordinator(
      "", Env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"SHARDQ_PORT", "70000"}}));
  EXPECT_TRUE(absl::IsInvalidArgument(port.status()));
  EXPECT_NE(port.status().message().find("SHARDQ_PORT"), std::string::npos);
  auto rank = FindClusterCoordinator(
      "", Env({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "m"}, {"RANK", "first"}}));
  EXPECT_NE(rank.status().message().find("RANK"), std::string::npos);
  auto json = FindClusterCoordinator("", Env({{"TF_CONFIG", "{"}}));
  EXPECT_NE(json.status().message().find("TF_CONFIG"), std::string::npos);
}

}  // namespace
}  // namespace shardq
