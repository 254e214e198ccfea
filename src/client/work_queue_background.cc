// The WorkQueue's background thread: lease renewal by heartbeat (no
// session) or the answers to a session's pushed proposals and the progress
// it sends (session), and the split answers both share.
#include <algorithm>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "shardq/splittable_range.h"
#include "src/client/work_queue_impl.h"
#include "src/core/process.h"

namespace shardq {

void WorkQueue::Impl::StartBackgroundIfNeeded() {
  const bool session = session_.ok() && *session_;
  absl::MutexLock lock(&mu_);
  if (background_started_ || stopping_) return;
  background_started_ = true;
  background_thread_ = std::thread([this, session] {
    NameThisThread(session ? "queue-session" : "queue-beat");
    if (session) {
      SessionLoop();
    } else {
      HeartbeatLoop();
    }
  });
}

void WorkQueue::Impl::OnSplitProposals(const std::vector<SplitProposal>& proposals) {
  absl::MutexLock lock(&mu_);
  for (const SplitProposal& p : proposals) {
    // A proposal is repeated until answered: keep one of each.
    bool queued = false;
    for (const SplitProposal& q : pushed_splits_) queued = queued || q.lease_id == p.lease_id;
    if (!queued) pushed_splits_.push_back(p);
  }
  stop_changed_.SignalAll();
}

void WorkQueue::Impl::OnLostLeases(const std::vector<uint64_t>& lease_ids) {
  absl::MutexLock lock(&mu_);
  for (uint64_t id : lease_ids) {
    // An item taken ahead and lost is not handed out any more; a lost item
    // being read stays held, as with heartbeats (its completion may still
    // count, or is recorded as a duplicate).
    auto it = std::find(ready_.begin(), ready_.end(), id);
    if (it == ready_.end()) continue;
    ready_.erase(it);
    held_.erase(id);
    progress_.erase(id);
  }
}

void WorkQueue::Impl::SessionLoop() {
  // The open session keeps the leases alive: this thread only answers the
  // proposals it pushes and sends the progress readers noted, at most once
  // per interval.
  const absl::Duration interval = std::min(lease_timeout_ / 3, heartbeat_interval_);
  absl::Time progress_due = absl::Now() + interval;
  while (true) {
    std::vector<SplitProposal> splits;
    std::vector<std::pair<uint64_t, int64_t>> progress;
    bool give_back = false;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && pushed_splits_.empty() && stopped_.empty() &&
             !(progress_unsent_ && absl::Now() >= progress_due)) {
        stop_changed_.WaitWithDeadline(&mu_, progress_unsent_ ? progress_due
                                                              : absl::Now() + interval);
      }
      if (stopping_) return;
      give_back = !stopped_.empty();
      splits.swap(pushed_splits_);
      if (progress_unsent_ && absl::Now() >= progress_due) {
        progress.assign(progress_.begin(), progress_.end());
        progress_unsent_ = false;
        progress_due = absl::Now() + interval;
      }
    }
    if (!splits.empty()) AnswerSplits(splits);
    if (give_back) GiveBackStoppedNow();
    if (!progress.empty()) {
      backend_->ReportProgress(name_, worker_id_, progress).IgnoreError();
    }
  }
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
    bool give_back = false;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && stopped_.empty() && !stop_changed_.WaitWithDeadline(&mu_, due)) {
      }
      if (stopping_) return;
      give_back = !stopped_.empty();
      if (!give_back) {
        for (const auto& [id, item] : held_) leases.push_back(id);
        progress.assign(progress_.begin(), progress_.end());
      }
    }
    if (give_back) {
      GiveBackStoppedNow();  // the heartbeat follows when due
      continue;
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
      absl::ReleasableMutexLock lock(&mu_);
      auto it = held_.find(p.lease_id);
      if (it == held_.end()) continue;  // completed meanwhile
      if (split_in_flight_.contains(p.lease_id)) continue;  // being answered
      range = it->second.range;
      auto ready = std::find(ready_.begin(), ready_.end(), p.lease_id);
      if (ready != ready_.end() && (range != nullptr || p.split_point == 0)) {
        // Taken ahead, not started: no Take may hand it out meanwhile.
        ready_.erase(ready);
        ++giving_back_;
        WorkItem item = it->second;
        split_in_flight_.insert(p.lease_id);
        lock.Release();
        GiveBackReady(p, item);
        continue;
      }
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

void WorkQueue::Impl::GiveBackReady(const SplitProposal& proposal, const WorkItem& item) {
  // Split at its start: the whole item goes back to the queue and this
  // lease ends (the coordinator treats it as a release). Nothing more is
  // sent for the lease: a completion now would count as a late first
  // completion of an item nobody read. An item without a range (a whole
  // file) is released.
  absl::StatusOr<bool> recorded = true;
  if (item.range != nullptr) {
    recorded = backend_->AcceptSplit(name_, worker_id_, proposal.lease_id, item.range->start());
  } else if (absl::Status s = backend_->Release(name_, worker_id_, proposal.lease_id); !s.ok()) {
    recorded = s;
  }
  bool forget = true;
  if (recorded.ok() && !*recorded) {
    forget = false;  // refused: still ours, whole; ready again
  } else if (!recorded.ok()) {
    // Unknown whether the give-back was recorded: release the lease, so
    // that the item is back in the queue either way.
    backend_->Release(name_, worker_id_, proposal.lease_id).IgnoreError();
  }
  absl::MutexLock lock(&mu_);
  --giving_back_;
  split_in_flight_.erase(proposal.lease_id);
  if (forget) {
    held_.erase(proposal.lease_id);
    progress_.erase(proposal.lease_id);
  } else if (held_.contains(proposal.lease_id)) {
    ready_.push_front(proposal.lease_id);
  }
  split_settled_.SignalAll();
}

}  // namespace shardq
