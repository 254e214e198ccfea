#include "src/client/cluster_coordinator.h"

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace shardq {
namespace {

absl::StatusOr<int> Port(const EnvLookup& env) {
  std::optional<std::string> text = NonEmptyEnv(env, "SHARDQ_PORT");
  if (!text.has_value()) return kDefaultShardqPort;
  int port = 0;
  if (!absl::SimpleAtoi(*text, &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("SHARDQ_PORT='", *text,
                                                   "' is not a port number"));
  }
  return port;
}

// The host of a "host:port" task address ("[v6]:port" keeps its brackets).
std::string HostOf(const std::string& task_address) {
  const size_t colon = task_address.rfind(':');
  if (colon == std::string::npos || task_address.back() == ']') return task_address;
  return task_address.substr(0, colon);
}

// The serving jobs, in order of preference.
constexpr const char* kServingJobs[] = {"chief", "master", "ps", "worker"};
constexpr const char* kTrainingJobs[] = {"chief", "master", "worker"};

absl::StatusOr<std::optional<ClusterCoordinator>> FromTfConfig(const std::string& text,
                                                               const EnvLookup& env) {
  nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("TF_CONFIG is not a JSON object");
  }
  auto cluster = config.find("cluster");
  if (cluster == config.end() || !cluster->is_object() || cluster->contains("shardq")) {
    return std::nullopt;
  }
  int64_t training_tasks = 0;
  for (const char* name : kTrainingJobs) {
    auto tasks = cluster->find(name);
    if (tasks != cluster->end() && tasks->is_array()) training_tasks += tasks->size();
  }
  if (training_tasks < 2) return std::nullopt;
  for (const char* job : kServingJobs) {
    auto tasks = cluster->find(job);
    if (tasks == cluster->end() || !tasks->is_array() || tasks->empty()) continue;
    if (!(*tasks)[0].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TF_CONFIG cluster.", job, "[0] is not a \"host:port\" string"));
    }
    absl::StatusOr<int> port = Port(env);
    if (!port.ok()) return port.status();
    ClusterCoordinator out;
    out.address = absl::StrCat(HostOf((*tasks)[0].get<std::string>()), ":", *port);
    out.source = "TF_CONFIG";
    auto task = config.find("task");
    if (task != config.end() && task->is_object()) {
      auto type = task->find("type");
      auto index = task->find("index");
      out.serve_here = type != task->end() && type->is_string() && *type == job &&
                       index != task->end() && index->is_number_integer() && *index == 0;
    }
    return out;
  }
  return std::nullopt;
}

absl::StatusOr<std::optional<ClusterCoordinator>> FromTorchrun(const EnvLookup& env) {
  std::optional<std::string> world = NonEmptyEnv(env, "WORLD_SIZE");
  std::optional<std::string> master = NonEmptyEnv(env, "MASTER_ADDR");
  if (!world.has_value() || !master.has_value()) return std::nullopt;
  int64_t size = 0;
  if (!absl::SimpleAtoi(*world, &size)) {
    return absl::InvalidArgumentError(absl::StrCat("WORLD_SIZE='", *world, "' is not a number"));
  }
  if (size < 2) return std::nullopt;
  absl::StatusOr<int> port = Port(env);
  if (!port.ok()) return port.status();
  ClusterCoordinator out;
  out.address = absl::StrCat(*master, ":", *port);
  out.source = "torchrun";
  if (std::optional<std::string> rank = NonEmptyEnv(env, "RANK")) {
    int64_t r = 0;
    if (!absl::SimpleAtoi(*rank, &r)) {
      return absl::InvalidArgumentError(absl::StrCat("RANK='", *rank, "' is not a number"));
    }
    out.serve_here = r == 0;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::optional<ClusterCoordinator>> FindClusterCoordinator(
    const std::string& explicit_address, const EnvLookup& env) {
  if (!explicit_address.empty() || NonEmptyEnv(env, "SHARDQ_ADDRESS").has_value() ||
      NonEmptyEnv(env, "SHARDQ_EMBEDDED").value_or("") == "1") {
    return std::nullopt;
  }
  if (std::optional<std::string> tf = NonEmptyEnv(env, "TF_CONFIG")) {
    absl::StatusOr<std::optional<ClusterCoordinator>> found = FromTfConfig(*tf, env);
    if (!found.ok() || found->has_value()) return found;
  }
  return FromTorchrun(env);
}

}  // namespace shardq
