#include "src/client/discovery.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace shardq {
namespace {

// What TF_CONFIG says: the coordinator (nullopt when it has no "shardq"
// job) and how many training tasks the cluster has.
struct TfConfig {
  std::optional<Discovered> coordinator;
  int64_t training_tasks = 0;
  bool this_task_trains = true;  // false for an evaluator or a ps task
};

// The jobs whose tasks read training data: TF's chief (or the older
// "master") and its workers. Parameter servers and evaluators do not.
constexpr const char* kTrainingJobs[] = {"chief", "master", "worker"};

absl::StatusOr<TfConfig> FromTfConfig(const std::string& text) {
  nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError("TF_CONFIG is not a JSON object");
  }
  TfConfig out;
  auto cluster = config.find("cluster");
  if (cluster == config.end() || !cluster->is_object()) return out;
  for (const char* name : kTrainingJobs) {
    auto tasks = cluster->find(name);
    if (tasks != cluster->end() && tasks->is_array()) {
      out.training_tasks += static_cast<int64_t>(tasks->size());
    }
  }
  auto this_task = config.find("task");
  if (this_task != config.end() && this_task->is_object()) {
    auto type = this_task->find("type");
    if (type != this_task->end() && type->is_string()) {
      out.this_task_trains = std::find(std::begin(kTrainingJobs), std::end(kTrainingJobs),
                                       type->get<std::string>()) != std::end(kTrainingJobs);
    }
  }
  auto job = cluster->find("shardq");
  if (job == cluster->end()) return out;
  auto is_string = [](const nlohmann::json& task) { return task.is_string(); };
  const bool all_strings = job->is_array() && std::all_of(job->begin(), job->end(), is_string);
  if (!job->is_array() || job->empty() || !all_strings) {
    return absl::InvalidArgumentError(
        "TF_CONFIG cluster.shardq must be a non-empty list of \"host:port\" strings");
  }
  Discovered d;
  // Several tasks: the job's coordinators, one leading (a list address).
  for (const nlohmann::json& task : *job) {
    if (!d.address.empty()) d.address += ",";
    d.address += task.get<std::string>();
  }
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
  out.coordinator = std::move(d);
  return out;
}

// OK when the job runs in one process (or opted into a queue per process);
// else FAILED_PRECONDITION naming the fix.
absl::Status CheckOneProcess(int64_t tf_training_tasks, const EnvLookup& env) {
  if (NonEmptyEnv(env, "SHARDQ_EMBEDDED").value_or("") == "1") return absl::OkStatus();
  constexpr absl::string_view kOptIn =
      "set SHARDQ_EMBEDDED=1 to opt into one queue per process (every process then "
      "reads the whole data set)";
  if (tf_training_tasks > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TF_CONFIG describes ", tf_training_tasks,
        " worker tasks (chief, master and worker jobs) but no \"shardq\" job: start "
        "`shardq serve` and add its address to the cluster spec as a \"shardq\" job, set "
        "SHARDQ_ADDRESS, or ", kOptIn));
  }
  if (std::optional<std::string> world = NonEmptyEnv(env, "WORLD_SIZE")) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(*world, &size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("WORLD_SIZE='", *world, "' is not a number"));
    }
    if (size > 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "WORLD_SIZE=", size, " (torchrun) but no coordinator: run `shardq serve` on "
          "MASTER_ADDR and set SHARDQ_PORT to its port, set SHARDQ_ADDRESS, or ", kOptIn));
    }
  }
  return absl::OkStatus();
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
  if (std::optional<std::string> a = NonEmptyEnv(env, "SHARDQ_ADDRESS")) {
    d.address = *a;
    d.source = "SHARDQ_ADDRESS";
    return d;
  }
  int64_t tf_training_tasks = 0;
  if (std::optional<std::string> tf = NonEmptyEnv(env, "TF_CONFIG")) {
    absl::StatusOr<TfConfig> from_tf = FromTfConfig(*tf);
    if (!from_tf.ok()) return from_tf.status();
    if (from_tf->coordinator.has_value()) return *from_tf->coordinator;
    // An evaluator reads its own data set whole; only training tasks share.
    if (from_tf->this_task_trains) tf_training_tasks = from_tf->training_tasks;
  }
  std::optional<std::string> master = NonEmptyEnv(env, "MASTER_ADDR");
  std::optional<std::string> port = NonEmptyEnv(env, "SHARDQ_PORT");
  if (master.has_value() && port.has_value()) {
    int port_number = 0;
    if (!absl::SimpleAtoi(*port, &port_number) || port_number < 1 || port_number > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("SHARDQ_PORT='", *port, "' is not a port number"));
    }
    d.address = absl::StrCat(*master, ":", port_number);
    d.source = "torchrun";
    if (std::optional<std::string> rank = NonEmptyEnv(env, "RANK")) {
      d.worker_id = absl::StrCat("rank-", *rank);
    }
    return d;
  }
  if (absl::Status one = CheckOneProcess(tf_training_tasks, env); !one.ok()) return one;
  d.source = "embedded";
  return d;
}

std::optional<std::string> NonEmptyEnv(const EnvLookup& env, const std::string& name) {
  std::optional<std::string> value = env(name);
  if (value.has_value() && value->empty()) return std::nullopt;
  return value;
}

}  // namespace shardq
