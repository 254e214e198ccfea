#include "src/server/coordinator_impl.h"

#include <algorithm>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardq {
namespace {

// A blocked Take re-checks at least this often, so that expiries are noticed
// even when nothing else signals.
constexpr absl::Duration kMaxWaitSlice = absl::Seconds(1);
// Request limits: names travel in every request and are kept per worker.
constexpr size_t kMaxNameBytes = 256;
constexpr int64_t kMaxItemsPerTake = 1024;
constexpr size_t kMaxLeasesPerHeartbeat = 1 << 16;

absl::Status ValidateName(absl::string_view kind, absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind, " name must have 1 to ", kMaxNameBytes, " bytes, got ", name.size()));
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(kind, " name contains a control character"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateNames(absl::string_view queue, absl::string_view worker) {
  if (absl::Status s = ValidateName("queue", queue); !s.ok()) return s;
  return ValidateName("worker", worker);
}

}  // namespace

uint64_t DrawSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

CoordinatorImpl::CoordinatorImpl(Clock* clock)
    : clock_(clock != nullptr ? clock : RealClock::Get()) {}

absl::StatusOr<QueueInfo> CoordinatorImpl::CreateQueue(QueueConfig config) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  std::shared_ptr<Entry> entry;
  bool created = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = queues_.find(config.name);
    if (it == queues_.end()) {
      QueueConfig resolved = config;
      if (!resolved.seed.has_value()) resolved.seed = DrawSeed();
      absl::StatusOr<std::unique_ptr<QueueState>> state =
          QueueState::Create(std::move(resolved));
      if (!state.ok()) return state.status();
      entry = std::make_shared<Entry>();
      {
        absl::MutexLock entry_lock(&entry->mu);
        entry->state = *std::move(state);
      }
      queues_[config.name] = entry;
      created = true;
    } else {
      entry = it->second;
    }
  }
  absl::MutexLock lock(&entry->mu);
  const QueueConfig& existing = entry->state->config();
  if (!created) {
    std::vector<std::string> diffs = ConfigDifferences(existing, config);
    if (!diffs.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("queue '", config.name,
                       "' exists with a different config: ",
                       absl::StrJoin(diffs, "; ")));
    }
  }
  return Describe(existing, created);
}

QueueInfo CoordinatorImpl::Describe(const QueueConfig& config, bool created) {
  QueueInfo info;
  info.name = config.name;
  info.seed = config.seed.value_or(0);
  info.num_items = static_cast<int64_t>(config.items.size());
  info.num_epochs = config.num_epochs;
  info.num_clients = config.num_clients;
  info.lease_timeout = config.lease_timeout;
  info.created = created;
  return info;
}

absl::StatusOr<QueueInfo> CoordinatorImpl::GetQueue(absl::string_view queue) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  absl::MutexLock lock(&(*entry)->mu);
  return Describe((*entry)->state->config(), false);
}

absl::StatusOr<std::shared_ptr<CoordinatorImpl::Entry>> CoordinatorImpl::Find(
    absl::string_view queue) {
  absl::MutexLock lock(&mu_);
  auto it = queues_.find(queue);
  if (it == queues_.end()) {
    return absl::NotFoundError(absl::StrCat("no queue named '", queue, "'"));
  }
  return it->second;
}

absl::StatusOr<std::vector<WorkItem>> CoordinatorImpl::Take(
    absl::string_view queue, absl::string_view worker, int64_t max_items,
    absl::Time deadline) {
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  if (max_items < 1 || max_items > kMaxItemsPerTake) {
    return absl::InvalidArgumentError(
        absl::StrCat("take from queue '", queue, "': max_items must be in [1, ",
                     kMaxItemsPerTake, "], got ", max_items));
  }
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  std::vector<WorkItem> items;
  absl::MutexLock lock(&e.mu);
  while (true) {
    const absl::Time now = clock_->Now();
    if (e.state->ExpireLeases(now) > 0) e.changed.SignalAll();
    while (static_cast<int64_t>(items.size()) < max_items) {
      // Only the first item may fail on the num_clients limit; once we have
      // some, the limit just ends the batch.
      absl::StatusOr<TakeResult> r = e.state->Take(worker, now);
      if (!r.ok()) {
        if (items.empty()) return r.status();
        return items;
      }
      if (r->outcome != TakeOutcome::kItem) {
        if (!items.empty()) return items;
        if (r->outcome == TakeOutcome::kEndOfInput) {
          return absl::OutOfRangeError(
              absl::StrCat("queue '", queue, "': end of input"));
        }
        break;  // kWait
      }
      items.push_back(std::move(r->item));
    }
    if (!items.empty()) return items;
    if (now >= deadline || shutting_down_.load()) return items;
    // Wake at the earliest of: the caller's deadline, the next lease expiry,
    // a change signalled by another call, or a periodic re-check.
    absl::Time wake = std::min(deadline, e.state->NextDeadline());
    wake = std::min(wake, now + kMaxWaitSlice);
    e.changed.WaitWithDeadline(&e.mu, wake);
  }
}

absl::StatusOr<CompleteOutcome> CoordinatorImpl::Complete(
    absl::string_view queue, absl::string_view worker, uint64_t lease_id) {
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  absl::MutexLock lock(&e.mu);
  absl::StatusOr<CompleteOutcome> outcome =
      e.state->Complete(worker, lease_id, clock_->Now());
  if (outcome.ok()) e.changed.SignalAll();
  return outcome;
}

absl::Status CoordinatorImpl::Release(absl::string_view queue,
                                      absl::string_view worker,
                                      uint64_t lease_id) {
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  absl::MutexLock lock(&e.mu);
  absl::Status s = e.state->Release(worker, lease_id, clock_->Now());
  if (s.ok()) e.changed.SignalAll();
  return s;
}

absl::StatusOr<std::vector<uint64_t>> CoordinatorImpl::Heartbeat(
    absl::string_view queue, absl::string_view worker,
    const std::vector<uint64_t>& lease_ids) {
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  if (lease_ids.size() > kMaxLeasesPerHeartbeat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat for queue '", queue, "' names ", lease_ids.size(),
        " leases; the limit is ", kMaxLeasesPerHeartbeat));
  }
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  absl::MutexLock lock(&e.mu);
  const absl::Time now = clock_->Now();
  if (e.state->ExpireLeases(now) > 0) e.changed.SignalAll();
  return e.state->Heartbeat(worker, lease_ids, now);
}

absl::StatusOr<QueueStats> CoordinatorImpl::Stats(absl::string_view queue) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  absl::MutexLock lock(&e.mu);
  const absl::Time now = clock_->Now();
  if (e.state->ExpireLeases(now) > 0) e.changed.SignalAll();
  return e.state->Stats(now);
}

void CoordinatorImpl::Shutdown() {
  shutting_down_.store(true);
  std::vector<std::shared_ptr<Entry>> entries;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, entry] : queues_) entries.push_back(entry);
  }
  for (const auto& entry : entries) {
    absl::MutexLock lock(&entry->mu);
    entry->changed.SignalAll();
  }
}

std::vector<QueueStats> CoordinatorImpl::AllStats() {
  std::vector<std::pair<std::string, std::shared_ptr<Entry>>> entries;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, entry] : queues_) entries.emplace_back(name, entry);
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<QueueStats> out;
  for (auto& [name, entry] : entries) {
    absl::MutexLock lock(&entry->mu);
    out.push_back(entry->state->Stats(clock_->Now()));
  }
  return out;
}

}  // namespace shardq
