#include "src/server/coordinator_impl.h"

#include <algorithm>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/core/process.h"
#include "src/core/validate.h"
#include "src/log/log.h"

namespace shardq {
namespace {

// Request limits (names: see src/core/validate.h).
constexpr size_t kMaxLeasesPerHeartbeat = 1 << 16;
// A Take answers without waiting for the disk only while at most this many
// of its queue's grants are not durable: fewer than recovery skips, so a
// crash never loses a grant whose id is issued again (see the header).
constexpr size_t kMaxGrantsBehind = QueueState::kLeaseIdsSkippedAtRecovery / 2;

// Reports how long a call took to the observer (if any) when it ends.
class CallTimer {
 public:
  CallTimer(const std::atomic<CoordinatorImpl::Observer*>& observer,
            CoordinatorImpl::Observer::Call call)
      : observer_(observer), call_(call), start_(absl::Now()) {}
  ~CallTimer() {
    if (CoordinatorImpl::Observer* o = observer_.load()) o->OnCallDone(call_, absl::Now() - start_);
  }

 private:
  const std::atomic<CoordinatorImpl::Observer*>& observer_;
  const CoordinatorImpl::Observer::Call call_;
  const absl::Time start_;
};

absl::Status ValidateNames(absl::string_view queue, absl::string_view worker) {
  if (absl::Status s = ValidateName("queue name", queue); !s.ok()) return s;
  return ValidateName("worker name", worker);
}

}  // namespace

uint64_t DrawSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

CoordinatorImpl::CoordinatorImpl(Clock* clock) : CoordinatorImpl(clock, nullptr, 0, 1) {}

CoordinatorImpl::CoordinatorImpl(Clock* clock, std::unique_ptr<StateStore> journal,
                                 int64_t snapshot_every, int64_t snapshot_bytes_per_update)
    : clock_(clock != nullptr ? clock : RealClock::Get()),
      journal_(std::move(journal)),
      snapshot_every_(snapshot_every),
      snapshot_bytes_per_update_(snapshot_bytes_per_update) {
  if (journal_ != nullptr) snapshot_thread_ = std::thread([this] {
      NameThisThread("snapshot");
      SnapshotLoop();
    });
}

CoordinatorImpl::~CoordinatorImpl() {
  std::unique_ptr<WaitHub> hub;
  {
    absl::MutexLock lock(&hub_mu_);
    hub = std::move(hub_);
    hub_stopped_ = true;
  }
  hub.reset();  // joins its thread, which may be asking for Hub() meanwhile
  if (journal_ == nullptr) return;
  StopSnapshots();
  std::vector<std::shared_ptr<Entry>> entries;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, entry] : queues_) entries.push_back(entry);
  }
  for (const auto& entry : entries) {
    absl::MutexLock lock(&entry->mu);
    if (entry->since_snapshot > 0) {
      journal_->AppendSnapshot(entry->name, entry->last_seq, entry->state->ToSnapshot());
    }
  }
  journal_->Flush().IgnoreError();
}

void CoordinatorImpl::SetObserver(Observer* observer) {
  observer_.store(observer);
  std::vector<std::shared_ptr<Entry>> entries;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, entry] : queues_) entries.push_back(entry);
  }
  for (const auto& entry : entries) {
    absl::MutexLock lock(&entry->mu);
    AttachJournal(*entry);
  }
}

void CoordinatorImpl::ExpireLeases(Entry& e, absl::Time now) {
  const int64_t expired = e.state->ExpireLeases(now);
  if (expired == 0) return;
  NotifyChanged(e);
  SHARDQ_LOG_INFO("queue '{}': {} lease(s) expired (no heartbeat for {}); their items go back "
                  "to the queue",
                  e.state->config().name, expired,
                  absl::FormatDuration(e.state->config().lease_timeout));
}

bool CoordinatorImpl::TooManyGrantsBehind(Entry& e) {
  const uint64_t durable = journal_->durable_seq();
  while (!e.grants_behind.empty() && e.grants_behind.front() <= durable) {
    e.grants_behind.pop_front();
  }
  if (grants_wait_for_store_) return !e.grants_behind.empty();
  return e.grants_behind.size() > kMaxGrantsBehind;
}

absl::StatusOr<std::shared_ptr<CoordinatorImpl::Entry>> CoordinatorImpl::AddQueue(
    const journal::Update& creation, bool journal_it) {
  absl::StatusOr<std::unique_ptr<QueueState>> state = QueueState::FromCreation(creation);
  if (!state.ok()) return state.status();
  const std::string name = (*state)->config().name;
  auto entry = std::make_shared<Entry>();
  entry->name = name;
  absl::MutexLock lock(&mu_);
  if (queues_.contains(name)) {
    return absl::FailedPreconditionError(absl::StrCat("queue '", name, "' already exists"));
  }
  {
    absl::MutexLock entry_lock(&entry->mu);
    entry->state = *std::move(state);
    if (journal_ != nullptr && journal_it) {
      entry->last_seq = journal_->Append(name, creation);
      entry->since_snapshot = 1;
    }
    AttachJournal(*entry);
  }
  queues_[name] = entry;
  return entry;
}

absl::StatusOr<QueueInfo> CoordinatorImpl::CreateQueue(QueueConfig config) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  if (config.lease_timeout > kMaxLeaseTimeout) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config.name, "': lease_timeout ", absl::FormatDuration(config.lease_timeout),
        " exceeds the limit of ", absl::FormatDuration(kMaxLeaseTimeout),
        " (an item whose worker died would wait that long for another)"));
  }
  if (absl::Status s = Writable(); !s.ok()) return s;
  std::shared_ptr<Entry> entry;
  {
    absl::MutexLock lock(&mu_);
    auto it = queues_.find(config.name);
    if (it != queues_.end()) entry = it->second;
  }
  if (entry == nullptr) {
    QueueConfig resolved = config;
    if (!resolved.seed.has_value()) resolved.seed = DrawSeed();
    absl::StatusOr<std::shared_ptr<Entry>> added =
        AddQueue(QueueState::CreationUpdate(resolved, clock_->Now()), true);
    if (added.ok()) {
      absl::StatusOr<QueueInfo> info = AddedQueueInfo(**added);
      if (!info.ok()) return info.status();
      SHARDQ_LOG_INFO("queue '{}' created: {} item(s) per epoch, {} epoch(s), seed {}",
                      info->name, info->num_items, resolved.num_epochs, info->seed);
      return info;
    }
    if (!absl::IsFailedPrecondition(added.status())) return added.status();
    // Lost a race with another creator: attach to its queue.
    absl::StatusOr<std::shared_ptr<Entry>> found = Find(config.name);
    if (!found.ok()) return found.status();
    entry = *found;
  }
  uint64_t seq;
  QueueInfo info;
  QueueConfig existing;
  std::shared_ptr<const ItemTable> existing_items;
  {
    absl::MutexLock lock(&entry->mu);
    existing = entry->state->config();  // without its items: cheap
    existing_items = entry->state->items();
    seq = entry->last_seq;
    info = Describe(*entry->state, false);
  }
  // The plan is immutable: compared without holding the queue.
  std::vector<std::string> diffs = ConfigDifferences(existing, *existing_items, config);
  if (!diffs.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("queue '", config.name, "' exists with a different config: ",
                     absl::StrJoin(diffs, "; ")));
  }
  // The queue may have been created a moment ago and not be durable yet.
  if (absl::Status s = Durable(seq); !s.ok()) return s;
  return info;
}

QueueInfo CoordinatorImpl::Describe(const QueueState& state, bool created) {
  const QueueConfig& config = state.config();
  QueueInfo info;
  info.name = config.name;
  info.seed = config.seed.value_or(0);
  info.num_items = state.items()->size();
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
  return Describe(*(*entry)->state, false);
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
    absl::Time deadline, int64_t ahead) {
  CallTimer timer(observer_, Observer::Call::kTake);
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  if (max_items < 1 || max_items > kMaxItemsPerTake) {
    return absl::InvalidArgumentError(
        absl::StrCat("take from queue '", queue, "': max_items must be in [1, ",
                     kMaxItemsPerTake, "], got ", max_items));
  }
  if (absl::Status s = Writable(); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  std::vector<WorkItem> items;
  absl::Status result;
  uint64_t seq = 0;
  SplitPushes pushes;
  {
    absl::MutexLock lock(&e.mu);
    while (true) {
      const absl::Time now = clock_->Now();
      ExpireLeases(e, now);
      bool wait = false;
      while (static_cast<int64_t>(items.size()) < max_items) {
        // Only the first item may fail on the num_clients limit; once we
        // have some, the limit just ends the batch.
        absl::StatusOr<TakeResult> r = e.state->Take(worker, now, ahead);
        if (!r.ok()) {
          if (items.empty()) result = r.status();
          break;
        }
        if (r->outcome == TakeOutcome::kItem) {
          items.push_back(std::move(r->item));
          if (journal_ != nullptr) e.grants_behind.push_back(e.last_seq);
          continue;
        }
        // A heartbeat of the holder may be waiting for this proposal.
        if (r->proposed_lease != 0) {
          e.changed.SignalAll();
          CollectSplitPush(e, r->proposed_lease, &pushes);
        }
        if (items.empty() && r->outcome == TakeOutcome::kEndOfInput) {
          result = absl::OutOfRangeError(absl::StrCat("queue '", queue, "': end of input"));
        }
        wait = items.empty() && r->outcome == TakeOutcome::kWait;
        break;
      }
      if (!wait || now >= deadline || shutting_down_.load()) break;
      // Wake at the earliest of: the caller's deadline, the next lease
      // expiry, a change signalled by another call, or a periodic re-check.
      absl::Time wake = std::min(deadline, e.state->NextDeadline());
      wake = std::min(wake, now + kMaxWaitSlice);
      if (!pushes.empty()) {  // to the holder's sessions, unlocked; then try again
        e.mu.Unlock();
        DeliverPushes(pushes);
        pushes.clear();
        e.mu.Lock();
        continue;
      }
      e.changed.WaitWithDeadline(&e.mu, wake);
    }
    seq = AfterChange(e);
    // Grants (and the expiries noticed on the way) are written behind; an
    // end of input or an error is answered only once durable, like every
    // other answer (see the header).
    if (result.ok() && (journal_ == nullptr || !TooManyGrantsBehind(e))) seq = 0;
  }
  DeliverPushes(pushes);
  if (absl::Status s = Durable(seq); !s.ok()) return s;
  if (!result.ok()) return result;
  // A take that waited may wake after the journal failed: its grants will
  // never be stored, so it must not hand their items out.
  if (absl::Status s = Writable(); !s.ok()) return s;
  return items;
}

template <typename Change>
auto CoordinatorImpl::Mutate(absl::string_view queue, Change change)
    -> decltype(change(std::declval<Entry&>())) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  uint64_t seq;
  auto result = [&] {
    absl::MutexLock lock(&e.mu);
    auto r = change(e);
    seq = AfterChange(e);
    return r;
  }();
  if (absl::Status s = Durable(seq); !s.ok()) return s;
  return result;
}

absl::StatusOr<CompleteOutcome> CoordinatorImpl::Complete(
    absl::string_view queue, absl::string_view worker, uint64_t lease_id, int64_t records) {
  CallTimer timer(observer_, Observer::Call::kComplete);
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  if (absl::Status s = Writable(); !s.ok()) return s;
  return Mutate(queue, [&](Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return CompleteLocked(e, worker, lease_id, records);
  });
}

absl::StatusOr<CompleteOutcome> CoordinatorImpl::CompleteLocked(Entry& e,
                                                                absl::string_view worker,
                                                                uint64_t lease_id,
                                                                int64_t records) {
  absl::StatusOr<CompleteOutcome> outcome =
      e.state->Complete(worker, lease_id, clock_->Now(), records);
  if (outcome.ok()) NotifyChanged(e);  // a take may wait for the queue to finish
  return outcome;
}

void CoordinatorImpl::CompleteAsync(
    absl::string_view queue, absl::string_view worker, uint64_t lease_id,
    std::function<void(absl::StatusOr<CompleteOutcome>)> done, int64_t records) {
  if (observer_.load() != nullptr) {
    auto timer = std::make_shared<CallTimer>(observer_, Observer::Call::kComplete);
    done = [timer, done = std::move(done)](absl::StatusOr<CompleteOutcome> outcome) {
      done(std::move(outcome));
    };
  }
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return done(s);
  if (absl::Status s = Writable(); !s.ok()) return done(s);
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return done(entry.status());
  Entry& e = **entry;
  absl::StatusOr<CompleteOutcome> outcome;
  uint64_t seq;
  {
    absl::MutexLock lock(&e.mu);
    outcome = CompleteLocked(e, worker, lease_id, records);
    seq = AfterChange(e);
  }
  if (journal_ == nullptr || seq == 0) return done(std::move(outcome));
  journal_->OnDurable(seq, [outcome = std::move(outcome),
                            done = std::move(done)](absl::Status stored) mutable {
    if (!stored.ok()) return done(StoreError(stored));
    done(std::move(outcome));
  });
}

absl::Status CoordinatorImpl::Release(absl::string_view queue,
                                      absl::string_view worker,
                                      uint64_t lease_id) {
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  if (absl::Status s = Writable(); !s.ok()) return s;
  return Mutate(queue, [&](Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    absl::Status status = e.state->Release(worker, lease_id, clock_->Now());
    if (status.ok()) NotifyChanged(e);
    return status;
  });
}

absl::StatusOr<bool> CoordinatorImpl::Fail(absl::string_view queue, absl::string_view worker,
                                           uint64_t lease_id, absl::string_view reason) {
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  if (absl::Status s = Writable(); !s.ok()) return s;
  return Mutate(queue, [&](Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<bool> {
    absl::StatusOr<bool> failed = e.state->Fail(worker, lease_id, reason, clock_->Now());
    // The item is pending again, or set aside (which may finish the queue).
    if (failed.ok()) NotifyChanged(e);
    return failed;
  });
}

absl::StatusOr<HeartbeatReply> CoordinatorImpl::Heartbeat(
    absl::string_view queue, absl::string_view worker,
    const std::vector<uint64_t>& lease_ids, absl::Duration wait) {
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  if (lease_ids.size() > kMaxLeasesPerHeartbeat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat for queue '", queue, "' names ", lease_ids.size(),
        " leases; the limit is ", kMaxLeasesPerHeartbeat));
  }
  if (absl::Status s = Writable(); !s.ok()) return s;
  return Mutate(queue, [&](Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS
                           -> absl::StatusOr<HeartbeatReply> {
    const absl::Time now = clock_->Now();
    ExpireLeases(e, now);
    HeartbeatReply reply = e.state->Heartbeat(worker, lease_ids, now);
    const absl::Time until = absl::Now() + std::min(wait, kMaxWaitSlice);
    while (reply.splits.empty() && e.state->SplitsPossible() && !shutting_down_.load() &&
           !e.changed.WaitWithDeadline(&e.mu, until)) {
      reply = e.state->Heartbeat(worker, lease_ids, clock_->Now());
    }
    return reply;
  });
}

absl::StatusOr<bool> CoordinatorImpl::AcceptSplit(absl::string_view queue,
                                                  absl::string_view worker,
                                                  uint64_t lease_id, int64_t split_point) {
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  if (absl::Status s = Writable(); !s.ok()) return s;
  return Mutate(queue, [&](Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<bool> {
    absl::StatusOr<bool> accepted =
        e.state->AcceptSplit(worker, lease_id, split_point, clock_->Now());
    // A refusal too: a waiting take may propose another split.
    if (accepted.ok()) NotifyChanged(e, /*may_propose=*/!*accepted);
    return accepted;
  });
}

absl::Status CoordinatorImpl::ReportProgress(
    absl::string_view queue, absl::string_view worker,
    const std::vector<std::pair<uint64_t, int64_t>>& progress) {
  if (absl::Status s = ValidateNames(queue, worker); !s.ok()) return s;
  if (progress.size() > kMaxLeasesPerHeartbeat) {
    return absl::InvalidArgumentError(absl::StrCat(
        "progress report for queue '", queue, "' names ", progress.size(),
        " leases; the limit is ", kMaxLeasesPerHeartbeat));
  }
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  absl::MutexLock lock(&(*entry)->mu);
  const absl::Time now = clock_->Now();
  absl::Status first;
  for (const auto& [lease, offset] : progress) {
    absl::Status s = (*entry)->state->ReportProgress(worker, lease, offset, now);
    if (first.ok()) first = s;
  }
  return first;
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
  ShutdownSessions();
}

absl::StatusOr<bool> CoordinatorImpl::PassOver(absl::string_view queue,
                                               absl::string_view worker,
                                               absl::string_view siblings) {
  if (!Writable().ok()) {
    absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
    if (!entry.ok()) return entry.status();
    absl::MutexLock lock(&(*entry)->mu);
    return (*entry)->state->PassOver(worker, siblings);
  }
  return Mutate(queue, [&](Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::StatusOr<bool> {
    ExpireLeases(e, clock_->Now());  // expiries are journaled
    return e.state->PassOver(worker, siblings);
  });
}

absl::StatusOr<QueueStats> CoordinatorImpl::Stats(absl::string_view queue) {
  if (!Writable().ok()) {
    // Nothing can be stored any more: answer from memory, changing nothing.
    absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
    if (!entry.ok()) return entry.status();
    absl::MutexLock lock(&(*entry)->mu);
    return (*entry)->state->Stats(clock_->Now());
  }
  return Mutate(queue, [&](Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS
                           -> absl::StatusOr<QueueStats> {
    const absl::Time now = clock_->Now();
    ExpireLeases(e, now);  // expiries are journaled
    return e.state->Stats(now);
  });
}

absl::StatusOr<journal::QueueSnapshot> CoordinatorImpl::DebugSnapshot(
    absl::string_view queue) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  absl::MutexLock lock(&(*entry)->mu);
  return (*entry)->state->ToSnapshot();
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
