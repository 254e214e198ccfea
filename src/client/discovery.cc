#include "src/client/discovery.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace shardq {
namespace {

std::optional<std::string> NonEmpty(const EnvLookup& env, const std::string& name) {
  std::optional<std::string> value = env(name);
  if (value.has_value() && value->empty()) return std::nullopt;
  return value;
}

// nullopt when TF_CONFIG has no "shardq" job.
absl::StatusOr<std::optional<Discovered>> FromTfConfig(const std::string& text) {
  nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("TF_CONFIG is not a JSON object");
  }
  auto cluster = config.find("cluster");
  if (cluster == config.end() || !cluster->is_object()) return std::nullopt;
  auto job = cluster->find("shardq");
  if (job == cluster->end()) return std::nullopt;
  if (!job->is_array() || job->empty() || !(*job)[0].is_string()) {
    return absl::InvalidArgumentError(
        "TF_CONFIG cluster.shardq must be a non-empty list of \"host:port\" strings");
  }
  Discovered d;
  d.address = (*job)[0].get<std::string>();
  d.source = "TF_CONFIG";
  auto task = config.find("task");
  if (task != config.end() && task->is_object()) {
    auto type = task->find("type");
    auto index = task->find("index");
    if (type != task->end() && type->is_string() && index != task->end() &&
        index->is_number_integer()) {
      d.worker_id = absl::StrCat(type->get<std::string>(), "-", index->get<int64_t>());
    }
  }
  return d;
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<Discovered> DiscoverCoordinator(const std::string& explicit_address,
                                               const EnvLookup& env) {
  Discovered d;
  if (!explicit_address.empty()) {
    d.address = explicit_address;
    d.source = "explicit";
    return d;
  }
  if (std::optional<std::string> a = NonEmpty(env, "SHARDQ_ADDRESS")) {
    d.address = *a;
    d.source = "SHARDQ_ADDRESS";
    return d;
  }
  if (std::optional<std::string> tf = NonEmpty(env, "TF_CONFIG")) {
    absl::StatusOr<std::optional<Discovered>> from_tf = FromTfConfig(*tf);
    if (!from_tf.ok()) return from_tf.status();
    if (from_tf->has_value()) return **from_tf;
  }
  std::optional<std::string> master = NonEmpty(env, "MASTER_ADDR");
  std::optional<std::string> port = NonEmpty(env, "SHARDQ_PORT");
  if (master.has_value() && port.has_value()) {
    int port_number = 0;
    if (!absl::SimpleAtoi(*port, &port_number) || port_number < 1 || port_number > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("SHARDQ_PORT='", *port, "' is not a port number"));
    }
    d.address = absl::StrCat(*master, ":", port_number);
    d.source = "torchrun";
    if (std::optional<std::string> rank = NonEmpty(env, "RANK")) {
      d.worker_id = absl::StrCat("rank-", *rank);
    }
    return d;
  }
  d.source = "embedded";
  return d;
}

}  // namespace shardq
