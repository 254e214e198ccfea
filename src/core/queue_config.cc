// Checks and comparisons of a QueueConfig (declared in queue_state.h):
// what a queue may be, and how a second creator's config differs from the
// queue's. Pure: no I/O, no clock.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/core/queue_state.h"
#include "src/core/validate.h"

namespace shardq {
namespace {

// ConfigDifferences, given whether the plans agree.
std::vector<std::string> Differences(const QueueConfig& existing, size_t existing_items,
                                     bool same_items, const QueueConfig& requested) {
  std::vector<std::string> diffs;
  if (!same_items) {
    diffs.push_back(absl::StrCat("items (existing ", existing_items,
                                 " items, requested ", requested.items.size(),
                                 existing_items == requested.items.size()
                                     ? " items with different names)"
                                     : " items)"));
  }
  if (existing.num_epochs != requested.num_epochs) {
    diffs.push_back(absl::StrCat("num_epochs (existing ", existing.num_epochs,
                                 ", requested ", requested.num_epochs, ")"));
  }
  if (existing.shuffle != requested.shuffle) {
    diffs.push_back(absl::StrCat("shuffle (existing ", existing.shuffle,
                                 ", requested ", requested.shuffle, ")"));
  }
  if (requested.seed.has_value() && existing.seed != requested.seed) {
    diffs.push_back(absl::StrCat("seed (existing ", existing.seed.value_or(0),
                                 ", requested ", *requested.seed, ")"));
  }
  if (existing.num_clients != requested.num_clients) {
    diffs.push_back(absl::StrCat("num_clients (existing ", existing.num_clients,
                                 ", requested ", requested.num_clients, ")"));
  }
  if (existing.lease_timeout != requested.lease_timeout) {
    diffs.push_back(absl::StrCat(
        "lease_timeout (existing ", absl::FormatDuration(existing.lease_timeout),
        ", requested ", absl::FormatDuration(requested.lease_timeout), ")"));
  }
  if (existing.split != requested.split) {
    diffs.push_back(absl::StrCat("split (existing ", existing.split ? "on" : "off (--no-split)",
                                 ", requested ", requested.split ? "on" : "off (--no-split)",
                                 ")"));
  } else if (existing.split &&
             existing.split_min_residual != requested.split_min_residual) {
    // Without splitting the smallest split-off range means nothing.
    diffs.push_back(absl::StrCat("split_min_residual (existing ", existing.split_min_residual,
                                 ", requested ", requested.split_min_residual, ")"));
  }
  return diffs;
}

}  // namespace

std::vector<std::string> ConfigDifferences(const QueueConfig& existing,
                                           const QueueConfig& requested) {
  return Differences(existing, existing.items.size(), existing.items == requested.items,
                     requested);
}

std::vector<std::string> ConfigDifferences(const QueueConfig& existing,
                                           const ItemTable& existing_items,
                                           const QueueConfig& requested) {
  bool same = existing_items.size() == static_cast<int64_t>(requested.items.size());
  for (int64_t i = 0; same && i < existing_items.size(); ++i) {
    same = existing_items.Equals(i, requested.items[static_cast<size_t>(i)]);
  }
  return Differences(existing, static_cast<size_t>(existing_items.size()), same, requested);
}

absl::Status ValidateCompactConfig(const QueueConfig& config, int64_t num_items) {
  const std::string queue = absl::StrCat("queue '", config.name, "': ");
  if (absl::Status s = ValidateName("queue name", config.name); !s.ok()) return s;
  if (num_items < 1 || num_items > kMaxItemsPerQueue) {
    return absl::InvalidArgumentError(absl::StrCat(queue, "the plan has ", num_items,
                                                   " items; it must have 1 to ",
                                                   kMaxItemsPerQueue));
  }
  if (config.num_epochs < 1 || config.num_epochs > kMaxEpochs ||
      config.num_epochs > kMaxHandOutSlots / num_items) {
    return absl::InvalidArgumentError(absl::StrCat(queue, "num_epochs ", config.num_epochs,
                                                   " is out of range for ", num_items,
                                                   " items"));
  }
  if (config.num_clients < 1 || config.split_min_residual < 1 ||
      config.lease_timeout <= absl::ZeroDuration() || config.max_attempts < 1 ||
      config.max_attempts > kMaxAttemptsLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        queue, "num_clients ", config.num_clients, ", split_min_residual ",
        config.split_min_residual, ", lease_timeout ", absl::FormatDuration(config.lease_timeout),
        " or max_attempts ", config.max_attempts, " is out of range"));
  }
  return absl::OkStatus();
}

absl::Status ValidateConfig(const QueueConfig& config) {
  if (absl::Status s = ValidateName("queue name", config.name); !s.ok()) return s;
  if (config.items.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config.name, "': the plan has no items (are all works empty?)"));
  }
  if (config.num_epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config.name, "': num_epochs must be >= 1, got ",
        config.num_epochs));
  }
  if (config.num_clients < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config.name, "': num_clients must be >= 1, got ",
        config.num_clients));
  }
  if (config.split_min_residual < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config.name, "': split_min_residual must be >= 1, got ",
        config.split_min_residual));
  }
  if (config.lease_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config.name, "': lease_timeout must be positive, got ",
        absl::FormatDuration(config.lease_timeout)));
  }
  const int64_t items = static_cast<int64_t>(config.items.size());
  if (config.num_epochs > kMaxHandOutSlots / items) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config.name, "': ", items, " items x ", config.num_epochs,
        " epochs exceeds the limit of ", kMaxHandOutSlots, " hand-outs"));
  }
  for (size_t i = 0; i < config.items.size(); ++i) {
    if (absl::Status s = ValidateItemString(config.name, i, config.items[i]); !s.ok()) return s;
  }
  return ValidateLimits(config);
}

absl::Status ValidateLimits(const QueueConfig& config) {
  const std::string queue = absl::StrCat("queue '", config.name, "': ");
  if (config.num_epochs > kMaxEpochs) {
    return absl::InvalidArgumentError(absl::StrCat(queue, "num_epochs ", config.num_epochs,
                                                   " exceeds the limit of ", kMaxEpochs));
  }
  const int64_t items = static_cast<int64_t>(config.items.size());
  if (items > kMaxItemsPerQueue) {
    return absl::InvalidArgumentError(absl::StrCat(queue, "the plan has ", items,
                                                   " items, more than the limit of ",
                                                   kMaxItemsPerQueue));
  }
  int64_t plan_bytes = 0;
  for (size_t i = 0; i < config.items.size(); ++i) {
    const int64_t bytes = static_cast<int64_t>(config.items[i].size());
    if (bytes > kMaxItemBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          queue, "item ", i, " has ", bytes, " bytes, more than the limit of ", kMaxItemBytes,
          " ('", config.items[i].substr(0, 80), "...')"));
    }
    plan_bytes += bytes;
  }
  if (plan_bytes > kMaxPlanBytes) {
    return absl::InvalidArgumentError(absl::StrCat(queue, "the plan's items have ", plan_bytes,
                                                   " bytes in all, more than the limit of ",
                                                   kMaxPlanBytes));
  }
  if (config.max_attempts < 1 || config.max_attempts > kMaxAttemptsLimit) {
    return absl::InvalidArgumentError(absl::StrCat(queue, "max_attempts must be 1 to ",
                                                   kMaxAttemptsLimit, ", got ",
                                                   config.max_attempts));
  }
  return absl::OkStatus();
}

}  // namespace shardq
