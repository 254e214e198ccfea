// WorkQueue: giving back what is left of an item a reader stopped in
// (ReleaseRest), so that the records it returned are not returned again,
// what a stopped reader holds (GiveBackStopped), and everything at Close.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shardq/splittable_range.h"
#include "shardq/work_queue.h"
#include "src/client/backend.h"
#include "src/client/retry.h"
#include "src/client/work_queue_impl.h"
#include "src/core/process.h"
#include "src/log/log.h"

namespace shardq {

void WorkQueue::Impl::NoteReturned(const WorkItem& item, int64_t offset, int64_t in_order,
                                   int64_t returned) {
  absl::MutexLock lock(&mu_);
  if (held_.contains(item.lease_id)) {
    returned_[item.lease_id] = Returned{offset, std::max<int64_t>(in_order, 0),
                                        std::max<int64_t>(returned, 0)};
    if (offset >= 0) {  // as NoteProgress, under the same lock
      progress_[item.lease_id] = offset;
      progress_unsent_ = true;
    }
  }
}

int64_t WorkQueue::Impl::records_read_again() const {
  absl::MutexLock lock(&mu_);
  return records_read_again_;
}

void WorkQueue::Impl::CountReadAgain(const WorkItem& item, int64_t records,
                                     absl::string_view why) {
  if (records <= 0) return;
  {
    absl::MutexLock lock(&mu_);
    records_read_again_ += records;
  }
  SHARDQ_LOG_WARN(
      "queue '{}', worker '{}': {} records of '{}' (epoch {}) that this worker's reader "
      "returned will be returned again: {}",
      name_, worker_id_, records, item.item, item.epoch, std::string(why));
}

void WorkQueue::Impl::NoteLost(const WorkItem& item, int64_t records) {
  if (records <= 0) return;
  {
    absl::MutexLock lock(&mu_);
    records_lost_ += records;
  }
  SHARDQ_LOG_WARN(
      "queue '{}', worker '{}': {} records of '{}' (epoch {}) are lost: the item was completed "
      "before they were returned, and the pipeline holding them stopped before it returned "
      "them (items complete when read with shardq.data's complete=\"read\", the default for "
      "num_clients=1; with complete=\"consumed\" only the records a batch that may not be "
      "short held when every item the pipeline may hold was read, counted consumed early "
      "then: raise num_clients above cycle_length)",
      name_, worker_id_, records, item.item, item.epoch);
}

int64_t WorkQueue::Impl::records_lost() const {
  absl::MutexLock lock(&mu_);
  return records_lost_;
}

absl::StatusOr<bool> WorkQueue::Impl::ReleaseRest(const WorkItem& item) {
  if (absl::Status s = CheckOwner(); !s.ok()) return s;
  Returned returned;
  {
    absl::MutexLock lock(&mu_);
    if (!held_.contains(item.lease_id)) {
      return absl::NotFoundError(
          absl::StrCat("queue '", name_, "': worker '", worker_id_, "' does not hold lease ",
                       item.lease_id, " ('", item.item, "')"));
    }
    // A split the coordinator did not record leaves its lease whole there,
    // which the split below covers (it cuts at the offset reached).
    SettleSplit(item.lease_id);
    if (auto it = returned_.find(item.lease_id); it != returned_.end()) returned = it->second;
    // The background thread leaves this lease alone from now on.
    split_in_flight_.insert(item.lease_id);
  }
  auto settle = [&] {
    absl::MutexLock lock(&mu_);
    split_in_flight_.erase(item.lease_id);
    split_settled_.SignalAll();
  };
  const SplittableRange* range = item.range.get();
  const bool split_here = range != nullptr && returned.in_order > 0 &&
                          returned.offset > range->start();
  absl::StatusOr<bool> split = false;
  if (split_here) {
    split = backend_->AcceptSplit(name_, worker_id_, item.lease_id, returned.offset);
    if (!split.ok() && absl::IsInvalidArgument(split.status()) &&
        returned.offset >= range->end()) {
      // Past the end of the lease (cut by a recorded split): every record
      // of it was returned in order. Complete it as it is.
      split = true;
    }
  }
  // Without an answer (the coordinator unreachable) the lease is dropped
  // here, so that no heartbeat renews it: it expires and the item is read
  // again whole, every record returned included.
  auto unanswered = [&](const absl::Status& s) {
    Forget(item.lease_id);
    CountReadAgain(item, returned.returned,
                   "the coordinator did not answer; the item goes back whole when its lease "
                   "expires");
    return s;
  };
  if (split.ok() && *split) {
    absl::StatusOr<CompleteOutcome> outcome =
        backend_->Complete(name_, worker_id_, item.lease_id, returned.in_order);
    settle();
    if (outcome.ok() || (absl::IsNotFound(outcome.status()) && LeaseLostByCoordinator(item))) {
      Forget(item.lease_id);
      CountReadAgain(item, returned.returned - returned.in_order,
                     "they came out of order (a shuffle), after the point where the rest "
                     "of the item was given back");
      return true;
    }
    return unanswered(outcome.status());
  }
  settle();
  if (!split.ok() && !absl::IsInvalidArgument(split.status()) &&
      !absl::IsFailedPrecondition(split.status()) && !absl::IsNotFound(split.status())) {
    return unanswered(split.status());  // a release would not be answered either
  }
  absl::Status released = Release(item);
  if (!released.ok()) return unanswered(released);
  CountReadAgain(item, returned.returned,
                 range == nullptr ? "the item went back whole (it cannot be split)"
                 : returned.in_order == 0
                     ? "the item went back whole (its first record was not returned: "
                       "they came out of order, through a shuffle)"
                     : "the item went back whole (the coordinator did not split it)");
  return false;
}

void WorkQueue::Impl::GiveBackStopped(const std::vector<LeaseSource::StoppedItem>& items) {
  if (!backend_->Remote()) {
    for (const LeaseSource::StoppedItem& stopped : items) {
      if (stopped.partly_returned) {
        ReleaseRest(stopped.item).IgnoreError();
      } else {
        Release(stopped.item).IgnoreError();
      }
    }
    ReleaseReady();
    return;
  }
  int64_t batch = 0;
  bool background = false;
  size_t count = 0;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;  // the destructor gives back what is held
    for (const LeaseSource::StoppedItem& stopped : items) {
      if (held_.contains(stopped.item.lease_id)) stopped_.push_back(stopped);
    }
    for (uint64_t id : ready_) {
      if (auto it = held_.find(id); it != held_.end()) {
        stopped_.push_back(LeaseSource::StoppedItem{it->second, false});
      }
    }
    ready_.clear();
    if (stopped_.empty()) return;
    count = stopped_.size();
    batch = ++stopped_handed_;
    background = background_started_;
    stop_changed_.SignalAll();
  }
  if (!background) {
    GiveBackStoppedNow();
    return;
  }
  absl::MutexLock lock(&mu_);
  const absl::Time until = absl::Now() + kGiveBackWait;
  while (stopped_done_ < batch && !stopping_) {
    if (stopped_changed_.WaitWithDeadline(&mu_, until)) break;
  }
  if (stopped_done_ < batch && !stopping_) {
    SHARDQ_LOG_WARN(
        "queue '{}', worker '{}': the coordinator did not answer within {}; {} item(s) of a "
        "stopped reader are given back in the background (their leases stay renewed meanwhile)",
        name_, worker_id_, absl::FormatDuration(kGiveBackWait), count);
  }
}

void WorkQueue::Impl::GiveBackStoppedNow() {
  std::vector<LeaseSource::StoppedItem> items;
  int64_t batch = 0;
  {
    absl::MutexLock lock(&mu_);
    items.swap(stopped_);
    batch = stopped_handed_;
  }
  for (const LeaseSource::StoppedItem& stopped : items) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;  // the destructor gives back the rest (held_)
    }
    if (stopped.partly_returned) {
      ReleaseRest(stopped.item).IgnoreError();
    } else {
      Release(stopped.item).IgnoreError();
    }
  }
  absl::MutexLock lock(&mu_);
  stopped_done_ = std::max(stopped_done_, batch);
  stopped_changed_.SignalAll();
}

bool WorkQueue::Impl::ReleaseAtShutdown(uint64_t lease_id, const WorkItem& item, bool ask) {
  std::optional<Returned> returned;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = returned_.find(lease_id); it != returned_.end()) returned = it->second;
  }
  // Whether the coordinator answered (whatever it said).
  auto answered = [](const absl::Status& s) {
    return s.ok() || !(IsRetryable(s) || absl::IsDeadlineExceeded(s));
  };
  bool answer = true;
  if (!ask) {
    answer = false;
    if (returned.has_value()) {
      CountReadAgain(item, returned->returned,
                     "the coordinator did not answer as this worker closed; the item goes "
                     "back whole when its lease expires");
    }
  } else if (returned.has_value()) {
    answer = answered(ReleaseRest(item).status());  // counts what it does not give back
  } else {
    answer = answered(backend_->Release(name_, worker_id_, lease_id));
  }
  Forget(lease_id);
  return answer;
}

absl::Status WorkQueue::Impl::CheckOwner() const {
  if (owner_.current()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "queue '", name_, "': this WorkQueue was made in process ", owner_.pid(),
      "; this process (pid ", getpid(), ") is a fork of it and cannot use it: its leases and "
      "the items it took ahead belong to the parent, which reads them (here they would be "
      "read twice). Make a new WorkQueue in the child, or start children with the 'spawn' or "
      "'forkserver' method (torch: DataLoader(..., multiprocessing_context='spawn'))"));
}

WorkQueue::Impl::~Impl() {
  if (!owner_.current()) {
    // Inherited through fork(): the leases, the session and the background
    // thread belong to the parent process, and so does the backend's gRPC
    // channel, which must not be destroyed here (src/rpc/grpc_fork.h).
    AbandonThread(background_thread_);
    new std::shared_ptr<QueueBackend>(backend_);  // NOLINT: intentional leak
    return;
  }
  Close();
}

void WorkQueue::Impl::Close() {
  // Inherited through fork() (Python's close() in a DataLoader worker of a
  // queue made before the fork): the leases and threads are the parent's.
  if (!owner_.current()) return;
  std::vector<std::pair<uint64_t, WorkItem>> leases;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;  // closed already
    stopping_ = true;
    closed_.store(true, std::memory_order_release);
    stop_changed_.SignalAll();
    stopped_changed_.SignalAll();
    for (const auto& [id, item] : held_) leases.emplace_back(id, item);
    ready_.clear();
  }
  // A call stuck retrying an unreachable coordinator gives up now.
  backend_->BeginShutdown();
  if (background_thread_.joinable()) background_thread_.join();
  // Best effort: if the coordinator is gone the leases expire instead.
  // Items taken ahead and never read go back to the queue here too. Once
  // the coordinator leaves one unanswered, the others are not asked: each
  // would wait out the same silence.
  bool ask = true;
  for (const auto& [id, item] : leases) ask = ReleaseAtShutdown(id, item, ask) && ask;
  if (session_.ok() && *session_) backend_->EndSession(name_, worker_id_);
}

}  // namespace shardq
