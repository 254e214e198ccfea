#include "shardq/work_queue.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
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
#include "src/client/work_queue_backend.h"
#include "src/core/process.h"
#include "src/core/queue_state.h"  // kMaxEpochs, kMaxHandOutSlots
#include "src/log/log.h"

namespace shardq {
namespace {

// A remote take is re-issued at least this often, so a dead connection is
// noticed; the embedded backend simply waits.
constexpr absl::Duration kTakePollSlice = absl::Seconds(10);

std::string DefaultWorkerId() {
  static std::atomic<int64_t> counter{0};
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return absl::StrCat(host[0] ? host : "host", "-", ::getpid(), "-",
                      counter.fetch_add(1));
}

}  // namespace

// Everything a worker keeps: what it learnt of its queue, its leases and
// their progress, and the heartbeat thread that renews them.
class WorkQueue::Impl {
 public:
  Impl(std::shared_ptr<QueueBackend> backend, std::string name, std::string worker_id)
      : backend_(std::move(backend)), name_(std::move(name)), worker_id_(std::move(worker_id)) {}
  ~Impl();

  absl::StatusOr<WorkItem> Take(absl::Duration timeout);
  absl::Status Complete(const WorkItem& item);
  absl::Status Release(const WorkItem& item);
  absl::StatusOr<bool> Fail(const WorkItem& item, absl::string_view reason);
  int64_t lost_leases() const;
  int64_t held() const;
  void NoteProgress(const WorkItem& item, int64_t offset);
  absl::Status ReportProgress();
  absl::Status SaveCheckpoint(const std::string& path);
  absl::StatusOr<QueueStats> Stats() { return backend_->Stats(name_); }

  void HeartbeatLoop();
  void StartHeartbeatsIfNeeded();
  // Answers the coordinator's split proposals (heartbeat thread).
  void AnswerSplits(const std::vector<SplitProposal>& proposals);
  // Waits until no split answer of `lease_id` is in flight; true when the
  // item may be completed (false: release it instead).
  bool SettleSplit(uint64_t lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After NOT_FOUND for `item`'s lease: true (and the lease is forgotten)
  // when this worker holds it and the queue still exists, i.e. the
  // coordinator lost the lease; false when the error is the caller's.
  bool LeaseLostByCoordinator(const WorkItem& item);
  // Drops a lease from held_ and progress_; false if it was not held.
  bool Forget(uint64_t lease_id);

  const std::shared_ptr<QueueBackend> backend_;
  const std::string name_;
  const std::string worker_id_;
  uint64_t seed_ = 0;
  int64_t num_items_ = 0;
  int64_t num_epochs_ = 0;
  int64_t num_clients_ = 1;
  absl::Duration lease_timeout_;
  absl::Duration heartbeat_interval_ = absl::Seconds(1);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, WorkItem> held_ ABSL_GUARDED_BY(mu_);
  // Consumed offset per held lease, as noted by readers.
  absl::flat_hash_map<uint64_t, int64_t> progress_ ABSL_GUARDED_BY(mu_);
  int64_t lost_leases_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar stop_changed_;  // signalled when stopping_ is set
  bool heartbeat_started_ ABSL_GUARDED_BY(mu_) = false;
  // Leases whose split answer is being sent, and leases whose reader was cut
  // short by a split the coordinator did not record.
  absl::flat_hash_set<uint64_t> split_in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> split_unrecorded_ ABSL_GUARDED_BY(mu_);
  absl::CondVar split_settled_;
  std::thread heartbeat_thread_;
  OwnerProcess owner_;  // see src/core/process.h
};

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
  absl::StatusOr<ConnectedBackend> connected = ConnectBackend(
      options.address, options.token, options.tls_ca_file, options.worker_id,
      options.connect_timeout);
  if (!connected.ok()) return connected.status();
  absl::StatusOr<QueueInfo> info = connected->backend->GetQueue(options.name);
  if (!info.ok()) return info.status();
  std::unique_ptr<Impl> impl =
      ImplFromInfo(std::move(connected->backend), connected->worker_id, *info);
  impl->heartbeat_interval_ = options.heartbeat_interval;
  return std::unique_ptr<WorkQueue>(new WorkQueue(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<WorkQueue>> WorkQueueFactory::Attach(
    const std::string& name, std::shared_ptr<QueueBackend> backend,
    const std::string& worker_id) {
  absl::StatusOr<QueueInfo> info = backend->GetQueue(name);
  if (!info.ok()) return info.status();
  return std::unique_ptr<WorkQueue>(
      new WorkQueue(ImplFromInfo(std::move(backend), worker_id, *info)));
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
  return std::unique_ptr<WorkQueue>(new WorkQueue(std::move(impl)));
}

WorkQueue::~WorkQueue() = default;

WorkQueue::Impl::~Impl() {
  if (!owner_.current()) {
    // Inherited through fork(): the leases and the heartbeat thread belong
    // to the parent process.
    AbandonThread(heartbeat_thread_);
    return;
  }
  std::vector<uint64_t> leases;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_changed_.SignalAll();
    for (const auto& [id, item] : held_) leases.push_back(id);
    held_.clear();
  }
  // A heartbeat stuck retrying an unreachable coordinator gives up now.
  backend_->BeginShutdown();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  for (uint64_t id : leases) {
    // Best effort: if the coordinator is gone the lease expires instead.
    backend_->Release(name_, worker_id_, id).IgnoreError();
  }
}

int64_t WorkQueue::Impl::held() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(held_.size());
}

absl::StatusOr<WorkItem> WorkQueue::Impl::Take(absl::Duration timeout) {
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  while (true) {
    const absl::Time slice_deadline = std::min(deadline, absl::Now() + kTakePollSlice);
    absl::StatusOr<std::vector<WorkItem>> items =
        backend_->Take(name_, worker_id_, 1, slice_deadline);
    if (!items.ok()) return items.status();
    if (!items->empty()) {
      WorkItem item = std::move(items->front());
      // Parsed here, once; a string that does not parse is reported by
      // the reader of the item (which then stays held).
      if (ParseWorkItem(&item).ok()) {
        const SliceSpec& spec = *item.spec;
        // Items with a range can be split while they are read.
        if (spec.start.has_value() && spec.end.has_value() && *spec.end > *spec.start) {
          item.range = std::make_shared<SplittableRange>(*spec.start, *spec.end);
        }
      }
      {
        absl::MutexLock lock(&mu_);
        held_[item.lease_id] = item;
      }
      StartHeartbeatsIfNeeded();
      return item;
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
  absl::StatusOr<CompleteOutcome> outcome =
      backend_->Complete(name_, worker_id_, item.lease_id);
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
  return held_.erase(lease_id) > 0;
}

int64_t WorkQueue::Impl::lost_leases() const {
  absl::MutexLock lock(&mu_);
  return lost_leases_;
}

void WorkQueue::Impl::NoteProgress(const WorkItem& item, int64_t offset) {
  absl::MutexLock lock(&mu_);
  if (held_.contains(item.lease_id)) progress_[item.lease_id] = offset;
}

absl::Status WorkQueue::Impl::ReportProgress() {
  std::vector<std::pair<uint64_t, int64_t>> progress;
  {
    absl::MutexLock lock(&mu_);
    progress.assign(progress_.begin(), progress_.end());
  }
  if (progress.empty()) return absl::OkStatus();
  return backend_->ReportProgress(name_, worker_id_, progress);
}

absl::Status WorkQueue::Impl::SaveCheckpoint(const std::string& path) {
  if (absl::Status s = ReportProgress(); !s.ok()) return s;
  absl::StatusOr<journal::Checkpoint> checkpoint = backend_->ExportCheckpoint(name_);
  if (!checkpoint.ok()) return checkpoint.status();
  return WriteCheckpointFile(path, *checkpoint);
}

absl::StatusOr<std::unique_ptr<WorkQueue>> WorkQueue::RestoreCheckpoint(
    const WorkQueueOptions& options, const std::string& path, const std::string& name) {
  absl::StatusOr<journal::Checkpoint> checkpoint = ReadCheckpointFile(path);
  if (!checkpoint.ok()) return checkpoint.status();
  absl::StatusOr<ConnectedBackend> connected = ConnectBackend(
      options.address, options.token, options.tls_ca_file, options.worker_id,
      options.connect_timeout);
  if (!connected.ok()) return connected.status();
  absl::StatusOr<QueueInfo> info = connected->backend->RestoreCheckpoint(*checkpoint, name);
  if (!info.ok()) return info.status();
  return std::unique_ptr<WorkQueue>(
      new WorkQueue(ImplFromInfo(std::move(connected->backend), connected->worker_id, *info)));
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

void WorkQueue::Impl::StartHeartbeatsIfNeeded() {
  absl::MutexLock lock(&mu_);
  if (heartbeat_started_ || stopping_) return;
  heartbeat_started_ = true;
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

void WorkQueue::Impl::HeartbeatLoop() {
  // At least three renewals per lease period: one lost heartbeat never
  // expires a lease of a live worker.
  const absl::Duration interval = std::min(lease_timeout_ / 3, heartbeat_interval_);
  // The next heartbeat is due at `due`. While splits are possible the
  // coordinator holds a heartbeat up to `interval` waiting for a proposal
  // for us; such a call counts as the wait, and the next follows at once.
  absl::Time due = absl::Now() + interval;
  while (true) {
    std::vector<uint64_t> leases;
    std::vector<std::pair<uint64_t, int64_t>> progress;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && !stop_changed_.WaitWithDeadline(&mu_, due)) {
      }
      if (stopping_) return;
      for (const auto& [id, item] : held_) leases.push_back(id);
      progress.assign(progress_.begin(), progress_.end());
    }
    const absl::Time started = absl::Now();
    due = started + interval;
    if (leases.empty()) continue;
    // Lost leases stay in held_: completing one later may still count (a
    // late first completion) and is otherwise recorded as a duplicate. A
    // lease lost in a coordinator crash is reported here the same way;
    // Complete tells the two apart (NOT_FOUND, see lost_leases()).
    absl::StatusOr<HeartbeatReply> reply =
        backend_->Heartbeat(name_, worker_id_, leases, progress, interval);
    if (reply.ok() && !reply->splits.empty()) {
      AnswerSplits(reply->splits);
      due = absl::Now();  // more may come: ask again at once
    }
  }
}

void WorkQueue::Impl::AnswerSplits(const std::vector<SplitProposal>& proposals) {
  for (const SplitProposal& p : proposals) {
    std::shared_ptr<SplittableRange> range;
    {
      absl::MutexLock lock(&mu_);
      auto it = held_.find(p.lease_id);
      if (it == held_.end()) continue;  // completed meanwhile
      range = it->second.range;
      split_in_flight_.insert(p.lease_id);
    }
    // Where our reader will stop, if it is not already too close to the end.
    std::optional<int64_t> at;
    if (range != nullptr) at = range->Split(p.split_point, p.min_residual);
    absl::StatusOr<bool> recorded =
        backend_->AcceptSplit(name_, worker_id_, p.lease_id, at.value_or(-1));
    absl::MutexLock lock(&mu_);
    split_in_flight_.erase(p.lease_id);
    // The reader stops at `at` whatever happens; if the coordinator did not
    // record the split, completing the item would skip [at, end).
    // (Unless the item was completed meanwhile: then nothing remains to do.)
    if (at.has_value() && !(recorded.ok() && *recorded) && held_.contains(p.lease_id)) {
      split_unrecorded_.insert(p.lease_id);
    }
    split_settled_.SignalAll();
  }
}

// The public face: each call forwards to the worker's state.
absl::StatusOr<WorkItem> WorkQueue::Take(absl::Duration timeout) { return impl_->Take(timeout); }
absl::Status WorkQueue::Complete(const WorkItem& item) { return impl_->Complete(item); }
absl::Status WorkQueue::Release(const WorkItem& item) { return impl_->Release(item); }
absl::StatusOr<bool> WorkQueue::Fail(const WorkItem& item, absl::string_view reason) {
  return impl_->Fail(item, reason);
}
int64_t WorkQueue::lost_leases() const { return impl_->lost_leases(); }
absl::StatusOr<QueueStats> WorkQueue::Stats() { return impl_->Stats(); }
void WorkQueue::NoteProgress(const WorkItem& item, int64_t offset) {
  impl_->NoteProgress(item, offset);
}
absl::Status WorkQueue::ReportProgress() { return impl_->ReportProgress(); }
absl::Status WorkQueue::SaveCheckpoint(const std::string& path) {
  return impl_->SaveCheckpoint(path);
}
const std::string& WorkQueue::name() const { return impl_->name_; }
const std::string& WorkQueue::worker_id() const { return impl_->worker_id_; }
uint64_t WorkQueue::seed() const { return impl_->seed_; }
int64_t WorkQueue::num_items() const { return impl_->num_items_; }
int64_t WorkQueue::num_epochs() const { return impl_->num_epochs_; }
int64_t WorkQueue::num_clients() const { return impl_->num_clients_; }
int64_t WorkQueue::held() const { return impl_->held(); }

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
