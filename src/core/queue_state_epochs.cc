// QueueState's bounded bookkeeping: records of the epochs in progress,
// remembered ended leases, idle workers' records dropped, failed attempts
// and items set aside as failed, and the stats built from them (see the
// top of queue_state.h). Pure: no I/O.
#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/core/queue_state.h"

namespace shardq {

void QueueState::MaybeRetire(int64_t epoch) {
  auto it = epochs_.find(epoch);
  if (it == epochs_.end() || epoch >= next_epoch_) return;
  const EpochRecord& r = it->second;
  if (r.leased == 0 && r.completed + r.failed == num_items()) epochs_.erase(it);
}

void QueueState::RememberEnded(uint64_t lease_id, Ref ref, const std::string& worker,
                               LeaseEnd how) {
  ended_.Remember(lease_id, ref.epoch, ref.index, worker, how);
}

void QueueState::ForgetIdleWorkers() {
  using Record = std::map<std::string, WorkerRecord, std::less<>>::iterator;
  std::vector<std::pair<absl::Time, Record>> idle;
  for (Record it = workers_.begin(); it != workers_.end(); ++it) {
    if (it->second.held > 0) continue;
    idle.emplace_back(std::max(it->second.first_take, it->second.last_completion), it);
  }
  const size_t keep = kWorkersKept * 3 / 4;
  const size_t drop = std::min(idle.size(), workers_.size() > keep ? workers_.size() - keep : 0);
  // Oldest activity first; equal times by name (map order), so that every
  // replay drops the same ones.
  std::stable_sort(idle.begin(), idle.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < drop; ++i) workers_.erase(idle[i].second);
}

void QueueState::MarkFailed(const Failure& failure) {
  const Ref ref = failure.ref;
  attempts_.erase(Slot(ref));
  failed_[Slot(ref)] = failure;
  if (IsExtra(ref)) {
    ExtraOf(ref).failed = true;
    ++extras_failed_;
    return;
  }
  ++failed_planned_;
  auto it = epochs_.find(ref.epoch);
  if (it == epochs_.end()) return;
  ++it->second.failed;
  MaybeRetire(ref.epoch);
}

absl::StatusOr<bool> QueueState::Fail(absl::string_view worker, uint64_t lease_id,
                                      absl::string_view reason, absl::Time now) {
  absl::StatusOr<Lease*> held = HeldBy(worker, lease_id);
  if (!held.ok()) return held.status();
  const Ref ref = (*held)->ref;
  journal::Update update = NewUpdate(now);
  update.mutable_fail()->set_lease_id(lease_id);
  update.mutable_fail()->set_reason(std::string(reason.substr(0, kMaxFailureReasonBytes)));
  if (absl::Status s = Commit(update); !s.ok()) return s;
  return IsFailed(ref);
}

absl::Status QueueState::ApplyFail(const journal::Fail& fail) {
  absl::StatusOr<Ref> ref = ReturnToFront(fail.lease_id(), "fails", LeaseEnd::kFailed);
  if (!ref.ok()) return ref.status();
  // Completed meanwhile by a late completion of an earlier lease: done.
  if (IsDone(*ref)) return absl::OkStatus();
  auto [it, inserted] = attempts_.try_emplace(Slot(*ref));
  Failure& f = it->second;
  if (inserted) f.ref = *ref;
  ++f.attempts;
  f.reason = fail.reason();
  if (f.attempts >= config_.max_attempts) {
    MarkFailed(Failure(f));  // erases `f`
    return absl::OkStatus();
  }
  // The back, not the front: other items make progress before this one is
  // tried again.
  pending_.push_back(*ref);
  return absl::OkStatus();
}

std::vector<bool> QueueState::CompletedBits(int64_t epoch) const {
  const size_t n = static_cast<size_t>(num_items());
  auto it = epochs_.find(epoch);
  if (it != epochs_.end()) {
    if (it->second.completed == num_items()) return std::vector<bool>(n, true);
    if (it->second.completed_bits.empty()) return std::vector<bool>(n, false);
    return it->second.completed_bits;
  }
  if (epoch >= next_epoch_) return std::vector<bool>(n, false);
  std::vector<bool> bits(n, true);
  for (auto f = failed_.lower_bound(epoch * num_items());
       f != failed_.end() && f->first < (epoch + 1) * num_items(); ++f) {
    bits[static_cast<size_t>(f->second.ref.index)] = false;
  }
  return bits;
}

int64_t QueueState::LeasedInEpochs(std::map<int64_t, int64_t>* per_epoch) const {
  int64_t leased = 0;
  for (const auto& [e, r] : epochs_) {
    leased += r.leased;
    if (per_epoch != nullptr) (*per_epoch)[e] = r.leased;
  }
  for (const auto& [id, lease] : leases_) {
    // A lease counts in its epoch's record, which it keeps; only a
    // snapshot of an older version (one entry per epoch, none kept for an
    // epoch every item of which is completed) leaves a lease of a done
    // item without one, and so uncounted.
    if (IsExtra(lease.ref) || !IsDone(lease.ref) || epochs_.count(lease.ref.epoch) == 0) {
      continue;
    }
    --leased;
    if (per_epoch != nullptr) --(*per_epoch)[lease.ref.epoch];
  }
  return leased;
}

QueueStats QueueState::Stats(absl::Time now) const {
  QueueStats stats;
  stats.name = config_.name;
  stats.seed = *config_.seed;
  stats.num_items = num_items();
  stats.num_epochs = config_.num_epochs;
  stats.taken = taken_;
  stats.expired = expired_count_;
  stats.released = released_;
  stats.given_back = given_back_;
  stats.records = records_;
  stats.duplicates = duplicates_;
  stats.refused_completions = refused_completions_;
  stats.finished = Finished();
  stats.splits = splits_;
  stats.split_items_open =
      static_cast<int64_t>(extras_.size()) - extras_completed_ - extras_failed_;
  stats.max_attempts = config_.max_attempts;
  stats.failed = failed_planned_ + extras_failed_;
  for (const auto& [slot, f] : failed_) {
    if (static_cast<int64_t>(stats.failed_items.size()) >= kMaxFailedListed) break;
    stats.failed_items.push_back(FailedItemStats{
        ItemString(f.ref), f.ref.epoch, IsExtra(f.ref) ? ExtraOf(f.ref).parent : f.ref.index,
        f.attempts, f.reason});
  }
  std::map<int64_t, int64_t> leased_per_epoch;
  stats.leased = LeasedInEpochs(&leased_per_epoch);
  auto epoch_stats = [&](int64_t e) {
    EpochStats es;
    es.epoch = e;
    auto it = epochs_.find(e);
    if (it != epochs_.end()) {
      es.completed = it->second.completed;
      es.leased = leased_per_epoch[e];
      es.failed = it->second.failed;
    } else if (e < next_epoch_) {
      // Done: completed, but for its failed items (slots e*n .. e*n+n-1).
      es.failed = static_cast<int64_t>(
          std::distance(failed_.lower_bound(e * num_items()),
                        failed_.lower_bound((e + 1) * num_items())));
      es.completed = num_items() - es.failed;
    }
    es.pending = num_items() - es.completed - es.leased - es.failed;
    return es;
  };
  int64_t records_done = 0;
  int64_t records_below_next = 0;
  for (const auto& [e, r] : epochs_) {
    if (e < next_epoch_) ++records_below_next;
    if (r.completed + r.failed == num_items()) ++records_done;
  }
  stats.epochs_done = next_epoch_ - records_below_next + records_done;
  stats.completed = total_completed_;
  stats.pending = total_work() - total_completed_ - stats.leased - failed_planned_;
  if (config_.num_epochs <= kMaxEpochsListed) {
    for (int64_t e = 0; e < config_.num_epochs; ++e) stats.epochs.push_back(epoch_stats(e));
  } else {
    for (const auto& [e, r] : epochs_) {
      if (static_cast<int64_t>(stats.epochs.size()) >= kMaxEpochsListed) break;
      stats.epochs.push_back(epoch_stats(e));
    }
  }
  for (const auto& [name, w] : workers_) {
    WorkerStats ws;
    ws.taken = w.taken;
    ws.completed = w.completed;
    ws.held = w.held;
    ws.records = w.records;
    ws.sessions = SessionsOpen(name);
    const absl::Time end = w.last_completion == absl::InfinitePast() ? now : w.last_completion;
    const double seconds = absl::ToDoubleSeconds(end - w.first_take);
    if (w.first_take != absl::InfinitePast() && seconds > 0) {
      ws.items_per_second = static_cast<double>(w.completed) / seconds;
    }
    stats.workers[name] = ws;
  }
  return stats;
}

}  // namespace shardq
