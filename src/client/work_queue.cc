#include "shardq/work_queue.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "shardq/input_producer.h"
#include "shardq/slice.h"
#include "shardq/splittable_range.h"
#include "src/client/backend.h"
#include "src/client/checkpoint_file.h"
#include "src/client/planner.h"
#include "src/client/retry.h"
#include "src/client/work_queue_backend.h"
#include "src/client/work_queue_impl.h"
#include "src/core/queue_state.h"  // kMaxEpochs, kMaxHandOutSlots
#include "src/log/log.h"

namespace shardq {
namespace {

// How much longer than a take's poll EndTakesIf waits for a take on its way.
constexpr absl::Duration kEndTakesGrace = absl::Seconds(1);

std::string DefaultWorkerId() {
  static std::atomic<int64_t> counter{0};
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat(host[0] ? host : "host", "-", ::getpid(), "-",
                      counter.fetch_add(1));
}

}  // namespace

namespace {

// A worker of the queue `info` describes, over `backend`.
std::unique_ptr<WorkQueue::Impl> ImplFromInfo(std::shared_ptr<QueueBackend> backend,
                                             const std::string& worker_id,
                                             const QueueInfo& info) {
  auto impl = std::make_unique<WorkQueue::Impl>(
      std::move(backend), info.name, worker_id.empty() ? DefaultWorkerId() : worker_id);
  impl->seed_ = info.seed;
  impl->num_items_ = info.num_items;
  impl->num_epochs_ = info.num_epochs;
  impl->num_clients_ = info.num_clients;
  impl->lease_timeout_ = info.lease_timeout;
  return impl;
}

// A worker connected as `options` say (address, token, TLS, worker id,
// connect timeout) to the queue `info_of` answers for, given the backend: a
// lookup (Attach) or a restore (RestoreCheckpoint).
absl::StatusOr<std::unique_ptr<WorkQueue::Impl>> ConnectedImpl(
    const WorkQueueOptions& options,
    const std::function<absl::StatusOr<QueueInfo>(QueueBackend&)>& info_of) {
  absl::StatusOr<ConnectedBackend> connected = ConnectBackend(
      options.address, options.token, options.tls_ca_file, options.worker_id,
      options.connect_timeout);
  if (!connected.ok()) return connected.status();
  absl::StatusOr<QueueInfo> info = info_of(*connected->backend);
  if (!info.ok()) return info.status();
  std::unique_ptr<WorkQueue::Impl> impl =
      ImplFromInfo(std::move(connected->backend), connected->worker_id, *info);
  impl->heartbeat_interval_ = options.heartbeat_interval;
  impl->take_ahead_ = std::max<int64_t>(0, options.take_ahead);
  return impl;
}

}  // namespace

WorkQueue::WorkQueue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

absl::StatusOr<std::unique_ptr<WorkQueue>> WorkQueue::Create(
    const WorkQueueOptions& options) {
  absl::StatusOr<ConnectedBackend> connected = ConnectBackend(
      options.address, options.token, options.tls_ca_file, options.worker_id,
      options.connect_timeout);
  if (!connected.ok()) return connected.status();
  WorkQueueOptions named = options;
  named.worker_id = connected->worker_id;
  return WorkQueueFactory::Create(named, std::move(connected->backend));
}

absl::StatusOr<std::unique_ptr<WorkQueue>> WorkQueue::Attach(
    const WorkQueueOptions& options) {
  absl::StatusOr<std::unique_ptr<Impl>> impl = ConnectedImpl(
      options, [&](QueueBackend& backend) { return backend.GetQueue(options.name); });
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<WorkQueue>(new WorkQueue(*std::move(impl)));
}

absl::StatusOr<std::unique_ptr<WorkQueue>> WorkQueueFactory::Attach(
    const std::string& name, std::shared_ptr<QueueBackend> backend,
    const std::string& worker_id, int64_t take_ahead) {
  if (take_ahead < 0) {
    return absl::InvalidArgumentError(absl::StrCat("take_ahead must be >= 0, got ", take_ahead));
  }
  absl::StatusOr<QueueInfo> info = backend->GetQueue(name);
  if (!info.ok()) return info.status();
  std::unique_ptr<WorkQueue::Impl> impl = ImplFromInfo(std::move(backend), worker_id, *info);
  impl->take_ahead_ = take_ahead;
  return std::unique_ptr<WorkQueue>(new WorkQueue(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<WorkQueue>> WorkQueueFactory::Create(
    const WorkQueueOptions& options, std::shared_ptr<QueueBackend> backend) {
  if (options.num_epochs < 1 && options.num_epochs != WorkQueueOptions::kRepeatEpochs) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_epochs must be >= 1, got ", options.num_epochs));
  }
  if (options.num_clients < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_clients must be >= 1, got ", options.num_clients));
  }
  if (options.take_ahead < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("take_ahead must be >= 0, got ", options.take_ahead));
  }
  absl::StatusOr<std::vector<std::string>> items =
      PlanWorks(options.works, options.prefix, options.num_slices);
  if (!items.ok()) return items.status();
  QueueConfig config;
  config.name = options.name;
  config.items = *std::move(items);
  config.num_epochs = options.num_epochs;
  if (options.num_epochs == WorkQueueOptions::kRepeatEpochs) {
    config.num_epochs = std::min<int64_t>(
        kMaxEpochs, kMaxHandOutSlots / std::max<int64_t>(1, config.items.size()));
  }
  config.shuffle = options.shuffle;
  config.seed = options.seed;
  config.num_clients = options.num_clients;
  config.lease_timeout = options.lease_timeout;
  config.split = options.split;
  config.split_min_residual = options.split_min_residual;
  absl::StatusOr<QueueInfo> info = backend->CreateQueue(config);
  if (!info.ok()) return info.status();
  std::unique_ptr<WorkQueue::Impl> impl =
      ImplFromInfo(std::move(backend), options.worker_id, *info);
  impl->heartbeat_interval_ = options.heartbeat_interval;
  impl->take_ahead_ = options.take_ahead;
  return std::unique_ptr<WorkQueue>(new WorkQueue(std::move(impl)));
}

WorkQueue::~WorkQueue() = default;

int64_t WorkQueue::Impl::held() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(held_.size());
}

void WorkQueue::Impl::ReleaseReady() {
  std::vector<uint64_t> ready;
  {
    absl::MutexLock lock(&mu_);
    ready.assign(ready_.begin(), ready_.end());
    ready_.clear();
  }
  for (uint64_t id : ready) {
    backend_->Release(name_, worker_id_, id).IgnoreError();
    Forget(id);
  }
}

absl::StatusOr<bool> WorkQueue::Impl::EndTakesIf(
    absl::FunctionRef<absl::StatusOr<bool>()> over) {
  {
    absl::MutexLock lock(&mu_);
    if (takes_ended_) return true;
    if (takes_held_back_) return false;  // another caller is deciding
    takes_held_back_ = true;
    // Every take and refill on its way is answered (within take_poll_, or
    // later when the coordinator is slow or away: then undecided, so that
    // the caller is not held up); none starts meanwhile, so what this
    // worker holds cannot grow.
    const absl::Time give_up = absl::Now() + take_poll_ + kEndTakesGrace;
    while ((takes_in_flight_ > 0 || refills_in_flight_ > 0) &&
           !ready_changed_.WaitWithDeadline(&mu_, give_up)) {
    }
    if (takes_in_flight_ > 0 || refills_in_flight_ > 0 || !held_.empty() || stopping_) {
      takes_held_back_ = false;
      ready_changed_.SignalAll();
      return false;
    }
  }
  absl::StatusOr<bool> ended = over();
  absl::MutexLock lock(&mu_);
  takes_held_back_ = false;
  if (ended.ok() && *ended) takes_ended_ = true;
  ready_changed_.SignalAll();
  return ended;
}

void WorkQueue::Impl::SetTakePoll(absl::Duration poll) {
  absl::MutexLock lock(&mu_);
  take_poll_ = std::max(poll, absl::Milliseconds(1));
}

int64_t WorkQueue::Impl::ready() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(ready_.size());
}

std::optional<WorkItem> WorkQueue::Impl::PeekReady() const {
  absl::MutexLock lock(&mu_);
  if (ready_.empty()) return std::nullopt;
  auto it = held_.find(ready_.front());
  if (it == held_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<bool> WorkQueue::Impl::EnsureSession() {
  absl::call_once(session_once_, [this] {
    session_ = backend_->BeginSession(name_, worker_id_, this);
  });
  return session_;
}

int64_t WorkQueue::Impl::AheadWanted(bool completing) const {
  if (take_ahead_ == 0) return 0;
  // A take is for one item beyond those kept ready; a completion refills
  // for the take that usually follows it, so that K stay ready after it.
  // Ready items do not count against num_clients: the coordinator lets
  // this worker hold TakeAllowance() more.
  const int64_t room = num_clients_ + TakeAllowance() - static_cast<int64_t>(held_.size()) +
                       (completing ? 1 : -1);
  const int64_t want =
      take_ahead_ + (completing ? 1 : 0) - static_cast<int64_t>(ready_.size());
  return std::max<int64_t>(0, std::min(want, room));
}

void WorkQueue::Impl::Prepare(std::vector<WorkItem>& items) {
  for (WorkItem& item : items) {
    // Parsed here, once; a string that does not parse is reported by the
    // reader of the item (which then stays held).
    if (!ParseWorkItem(&item).ok()) continue;
    const SliceSpec& spec = *item.spec;
    // Items with a range can be split while they are read.
    if (spec.start.has_value() && spec.end.has_value() && *spec.end > *spec.start) {
      item.range = std::make_shared<SplittableRange>(*spec.start, *spec.end);
    }
  }
}

void WorkQueue::Impl::HoldLocked(const WorkItem& item, bool ready) {
  held_[item.lease_id] = item;
  if (ready) ready_.push_back(item.lease_id);
}

absl::StatusOr<WorkItem> WorkQueue::Impl::Take(absl::Duration timeout) {
  if (absl::Status s = CheckOwner(); !s.ok()) return s;
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return ClosedError();
  }
  if (absl::StatusOr<bool> session = EnsureSession(); !session.ok()) return session.status();
  while (true) {
    int64_t ahead;
    absl::Duration poll;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return ClosedError();
      // EndTakesIf is deciding whether takes end: wait for its answer.
      while (takes_held_back_) {
        if (ready_changed_.WaitWithDeadline(&mu_, deadline) && takes_held_back_) {
          return absl::DeadlineExceededError(absl::StrCat(
              "queue '", name_, "': no item within ", absl::FormatDuration(timeout)));
        }
      }
      if (takes_ended_) {
        return absl::OutOfRangeError(absl::StrCat(
            "queue '", name_, "': worker '", worker_id_,
            "' ended its takes (the items left are read by other workers)"));
      }
      // A refill on its way brings the next items in the coordinator's
      // order: wait for it rather than overtake it with a take of our own.
      // (Takes come from one thread at a time in a pipeline; concurrent
      // callers of Take get items in no particular order anyway.)
      while (ready_.empty() && refills_in_flight_ > 0) ready_changed_.Wait(&mu_);
      // The items this worker reads (those it holds, less those kept ready
      // or being given back) stay within num_clients; the coordinator
      // allows it more leases, for the items kept ready.
      const int64_t reading =
          static_cast<int64_t>(held_.size() - ready_.size()) - giving_back_;
      if (reading >= num_clients_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "queue '", name_, "': worker '", worker_id_, "' already holds ", reading,
            " item(s), the limit (num_clients=", num_clients_,
            "); complete or release one first"));
      }
      if (!ready_.empty()) {
        // Taken ahead: no round trip.
        const uint64_t lease = ready_.front();
        ready_.pop_front();
        return held_.at(lease);
      }
      ahead = AheadWanted(/*completing=*/false);
      ++takes_in_flight_;
      poll = take_poll_;
    }
    const absl::Time slice_deadline = std::min(deadline, absl::Now() + poll);
    absl::StatusOr<std::vector<WorkItem>> items =
        backend_->Take(name_, worker_id_, 1 + ahead, slice_deadline, TakeAllowance());
    if (items.ok()) Prepare(*items);
    {
      absl::MutexLock lock(&mu_);
      --takes_in_flight_;
      if (items.ok()) {
        for (size_t i = 0; i < items->size(); ++i) HoldLocked((*items)[i], /*ready=*/i > 0);
      }
      ready_changed_.SignalAll();
    }
    if (!items.ok()) return items.status();
    if (!items->empty()) {
      StartBackgroundIfNeeded();
      return std::move(items->front());
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "queue '", name_, "': no item within ", absl::FormatDuration(timeout),
          " (remaining items are held by other workers)"));
    }
  }
}

bool WorkQueue::Impl::SettleSplit(uint64_t lease_id) {
  while (split_in_flight_.contains(lease_id)) split_settled_.Wait(&mu_);
  return split_unrecorded_.erase(lease_id) == 0;
}

absl::Status WorkQueue::Impl::Complete(const WorkItem& item) {
  if (absl::Status s = CheckOwner(); !s.ok()) return s;
  bool complete;
  {
    absl::MutexLock lock(&mu_);
    complete = SettleSplit(item.lease_id);
  }
  if (!complete) {
    SHARDQ_LOG_WARN(
        "queue '{}': the split of '{}' was not recorded (lease lost); releasing it so that "
        "it is read again whole",
        name_, item.item);
    absl::Status s = Release(item);
    return s.ok() || absl::IsNotFound(s) ? absl::OkStatus() : s;
  }
  int64_t ahead = 0;
  {
    absl::MutexLock lock(&mu_);
    // Not while a take or another refill is on its way: it asked for the
    // items ahead itself, and a refill answered first would hand them out
    // out of order (see takes_in_flight_).
    if (!stopping_ && !takes_held_back_ && !takes_ended_ && takes_in_flight_ == 0 &&
        refills_in_flight_ == 0 &&
        held_.contains(item.lease_id)) {
      ahead = AheadWanted(/*completing=*/true);
      if (ahead > 0) ++refills_in_flight_;
    }
  }
  const int64_t records = std::max<int64_t>(item.records, 0);
  absl::StatusOr<CompleteOutcome> outcome = CompleteOutcome::kCompleted;
  if (ahead > 0) {
    // Refill the items kept ready in the same round trip; a take that
    // answers at once (nothing to wait for here).
    CompleteAndTakeReply reply =
        backend_->CompleteAndTake(name_, worker_id_, item.lease_id, records, ahead, absl::Now(),
                                  TakeAllowance());
    outcome = std::move(reply.completed);
    if (reply.taken.ok()) Prepare(*reply.taken);
    {
      absl::MutexLock lock(&mu_);
      if (reply.taken.ok()) {
        for (const WorkItem& taken : *reply.taken) HoldLocked(taken, /*ready=*/true);
      }
      --refills_in_flight_;
      ready_changed_.SignalAll();
    }
    if (reply.taken.ok() && !reply.taken->empty()) StartBackgroundIfNeeded();
  } else {
    outcome = backend_->Complete(name_, worker_id_, item.lease_id, records);
  }
  if (absl::IsNotFound(outcome.status()) && LeaseLostByCoordinator(item)) {
    SHARDQ_LOG_WARN(
        "queue '{}', worker '{}': the coordinator no longer knows lease {} (item '{}', "
        "epoch {}); it was lost in a coordinator crash and the item will be read again "
        "elsewhere",
        name_, worker_id_, item.lease_id, item.item, item.epoch);
    absl::MutexLock lock(&mu_);
    ++lost_leases_;
    return absl::OkStatus();
  }
  if (outcome.ok()) Forget(item.lease_id);
  return outcome.status();
}

absl::Status WorkQueue::Impl::Release(const WorkItem& item) {
  if (absl::Status s = CheckOwner(); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    SettleSplit(item.lease_id);
  }
  absl::Status s = backend_->Release(name_, worker_id_, item.lease_id);
  if (s.ok()) {
    Forget(item.lease_id);
    return s;
  }
  // Not held by this worker on the coordinator any more (it expired, or
  // the grant was lost in a coordinator crash): the item is back in the
  // queue already, which is all a release asks for.
  if (absl::IsNotFound(s) && LeaseLostByCoordinator(item)) return absl::OkStatus();
  return s;
}

absl::StatusOr<bool> WorkQueue::Impl::Fail(const WorkItem& item, absl::string_view reason) {
  if (absl::Status s = CheckOwner(); !s.ok()) return s;
  {
    absl::MutexLock lock(&mu_);
    SettleSplit(item.lease_id);
  }
  absl::StatusOr<bool> failed = backend_->Fail(name_, worker_id_, item.lease_id, reason);
  if (failed.ok() || absl::IsNotFound(failed.status())) Forget(item.lease_id);
  return failed;
}

bool WorkQueue::Impl::LeaseLostByCoordinator(const WorkItem& item) {
  {
    absl::MutexLock lock(&mu_);
    if (!held_.contains(item.lease_id)) return false;  // never ours: a caller error
  }
  // NOT_FOUND also names a queue that is gone altogether (a coordinator
  // restarted without its state): that is an error to report, not a lease
  // to forget. Only asked on this rare path.
  if (!backend_->GetQueue(name_).ok()) return false;
  return Forget(item.lease_id);
}

bool WorkQueue::Impl::Forget(uint64_t lease_id) {
  absl::MutexLock lock(&mu_);
  progress_.erase(lease_id);
  returned_.erase(lease_id);
  if (auto it = std::find(ready_.begin(), ready_.end(), lease_id); it != ready_.end()) {
    ready_.erase(it);
  }
  return held_.erase(lease_id) > 0;
}

int64_t WorkQueue::Impl::lost_leases() const {
  absl::MutexLock lock(&mu_);
  return lost_leases_;
}

absl::StatusOr<std::unique_ptr<WorkQueue>> WorkQueue::RestoreCheckpoint(
    const WorkQueueOptions& options, const std::string& path, const std::string& name) {
  absl::StatusOr<journal::Checkpoint> checkpoint = ReadCheckpointFile(path);
  if (!checkpoint.ok()) return checkpoint.status();
  absl::StatusOr<std::unique_ptr<Impl>> impl = ConnectedImpl(options, [&](QueueBackend& backend) {
    return backend.RestoreCheckpoint(*checkpoint, name);
  });
  if (!impl.ok()) return impl.status();
  return std::unique_ptr<WorkQueue>(new WorkQueue(*std::move(impl)));
}

absl::StatusOr<std::unique_ptr<WorkQueue>> WorkQueueFactory::RestoreCheckpoint(
    std::shared_ptr<QueueBackend> backend, const std::string& path, const std::string& name,
    const std::string& worker_id) {
  absl::StatusOr<journal::Checkpoint> checkpoint = ReadCheckpointFile(path);
  if (!checkpoint.ok()) return checkpoint.status();
  absl::StatusOr<QueueInfo> info = backend->RestoreCheckpoint(*checkpoint, name);
  if (!info.ok()) return info.status();
  return std::unique_ptr<WorkQueue>(
      new WorkQueue(ImplFromInfo(std::move(backend), worker_id, *info)));
}

// The public face: each call forwards to the worker's state.
absl::StatusOr<WorkItem> WorkQueue::Take(absl::Duration timeout) { return impl_->Take(timeout); }
absl::Status WorkQueue::Complete(const WorkItem& item) { return impl_->Complete(item); }
absl::Status WorkQueue::Release(const WorkItem& item) { return impl_->Release(item); }
absl::StatusOr<bool> WorkQueue::ReleaseRest(const WorkItem& item) {
  return impl_->ReleaseRest(item);
}
void WorkQueue::NoteReturned(const WorkItem& item, int64_t offset, int64_t in_order,
                            int64_t returned) {
  impl_->NoteReturned(item, offset, in_order, returned);
}
int64_t WorkQueue::records_read_again() const { return impl_->records_read_again(); }
int64_t WorkQueue::records_lost() const { return impl_->records_lost(); }
void WorkQueue::NoteLost(const WorkItem& item, int64_t records) { impl_->NoteLost(item, records); }
absl::StatusOr<bool> WorkQueue::Fail(const WorkItem& item, absl::string_view reason) {
  return impl_->Fail(item, reason);
}
int64_t WorkQueue::lost_leases() const { return impl_->lost_leases(); }
void WorkQueue::ReleaseReady() { impl_->ReleaseReady(); }
void WorkQueue::Close() { impl_->Close(); }
absl::StatusOr<WorkItem> WorkQueue::TakeWithinUnless(absl::Duration timeout,
                                                     const std::atomic<bool>* cancel) {
  // The client's waits (the session's, the retries' backoff) poll the
  // thread's interrupt: they end once *cancel is set.
  ScopedInterrupt interrupt(cancel);
  return impl_->Take(timeout);
}
absl::Status WorkQueue::CheckOpen() const {
  if (impl_->closed_.load(std::memory_order_acquire)) return impl_->ClosedError();
  return impl_->CheckOwner();
}
void WorkQueue::GiveBackStopped(const std::vector<StoppedItem>& items) {
  impl_->GiveBackStopped(items);
}
std::optional<WorkItem> WorkQueue::PeekNextItem() { return impl_->PeekReady(); }
absl::StatusOr<bool> WorkQueue::EndTakesIf(absl::FunctionRef<absl::StatusOr<bool>()> over) {
  return impl_->EndTakesIf(over);
}
void WorkQueue::SetTakePoll(absl::Duration poll) { impl_->SetTakePoll(poll); }
absl::StatusOr<QueueStats> WorkQueue::Stats() { return impl_->Stats(); }
absl::StatusOr<bool> WorkQueue::OnlyOthersHoldTheRest(absl::string_view siblings) {
  return impl_->OnlyOthersHoldTheRest(siblings);
}
void WorkQueue::NoteProgress(const WorkItem& item, int64_t offset) {
  impl_->NoteProgress(item, offset);
}
absl::Status WorkQueue::ReportProgress() { return impl_->ReportProgress(); }
absl::StatusOr<StepTally> WorkQueue::AgreeSteps(const StepReport& report) {
  return impl_->backend_->AgreeSteps(impl_->name_, report);
}
absl::Status WorkQueue::SaveCheckpoint(const std::string& path) {
  return impl_->SaveCheckpoint(path);
}
int64_t WorkQueue::records_beyond_checkpoint() const {
  return impl_->records_beyond_checkpoint();
}
const std::string& WorkQueue::name() const { return impl_->name_; }
const std::string& WorkQueue::worker_id() const { return impl_->worker_id_; }
uint64_t WorkQueue::seed() const { return impl_->seed_; }
int64_t WorkQueue::num_items() const { return impl_->num_items_; }
int64_t WorkQueue::num_epochs() const { return impl_->num_epochs_; }
int64_t WorkQueue::num_clients() const { return impl_->num_clients_; }
int64_t WorkQueue::held() const { return impl_->held(); }
int64_t WorkQueue::ready() const { return impl_->ready(); }

std::unique_ptr<ItemStream> WorkQueue::InputDataset() {
  return std::make_unique<ItemStream>(this);
}

std::unique_ptr<InputProducer> WorkQueue::MakeInputProducer(int64_t capacity) {
  return std::make_unique<InputProducer>(this, capacity > 0 ? capacity : num_clients());
}

ItemStream::~ItemStream() {
  if (current_.has_value()) queue_->Release(*current_).IgnoreError();
}

absl::StatusOr<WorkItem> ItemStream::Next() {
  if (current_.has_value()) {
    absl::Status s = queue_->Complete(*current_);
    current_.reset();
    if (!s.ok()) return s;
  }
  absl::StatusOr<WorkItem> item = queue_->Take();
  if (item.ok()) current_ = *item;
  return item;
}

}  // namespace shardq
