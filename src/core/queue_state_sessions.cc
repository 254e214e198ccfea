// Worker sessions in QueueState: the open stream of a worker keeps its
// leases alive without heartbeats (see "Worker sessions" in queue_state.h).
// Pure: no I/O, no clock.
#include "src/core/queue_state.h"

#include <string>

#include "absl/strings/match.h"

namespace shardq {

void QueueState::OpenSession(absl::string_view worker) {
  ++sessions_[worker].open;
  NoteHolder(std::string(worker));
}

void QueueState::CloseSession(absl::string_view worker, absl::Time now) {
  auto it = sessions_.find(worker);
  if (it == sessions_.end() || it->second.open <= 0) return;
  if (--it->second.open > 0) return;
  NoteHolder(std::string(worker));
  auto record = workers_.find(worker);
  if (record == workers_.end() || record->second.held == 0) {
    sessions_.erase(it);  // nothing to keep alive
    return;
  }
  it->second.closed = now;
}

void QueueState::NoteHolder(const std::string& worker) {
  auto record = workers_.find(worker);
  if (record != workers_.end() && record->second.held > 0 && SessionsOpen(worker) == 0) {
    sessionless_holders_.insert(worker);
  } else {
    sessionless_holders_.erase(worker);
  }
}

bool QueueState::PassOver(absl::string_view worker, absl::string_view siblings) const {
  if (Finished() || leases_.empty()) return false;
  const int64_t leased = LeasedInEpochs();
  if (total_work() - total_completed_ - leased - failed_planned_ > 0) return false;  // pending
  auto self = workers_.find(worker);
  if (self != workers_.end() && self->second.held > 0) return false;
  // Every open item held: the epochs' leased items and the split-off
  // ranges not done (neither counted pending) are all under a lease.
  const int64_t split_open =
      static_cast<int64_t>(extras_.size()) - extras_completed_ - extras_failed_;
  if (static_cast<int64_t>(leases_.size()) < leased + split_open) return false;
  for (const std::string& holder : sessionless_holders_) {
    if (!absl::StartsWith(holder, siblings)) return false;
  }
  return true;
}

std::vector<uint64_t> QueueState::LeasesHeldBy(absl::string_view worker) const {
  std::vector<uint64_t> ids;
  for (const auto& [id, lease] : leases_) {
    if (lease.worker == worker) ids.push_back(id);
  }
  return ids;
}

int64_t QueueState::SessionsOpen(absl::string_view worker) const {
  auto it = sessions_.find(worker);
  return it == sessions_.end() ? 0 : it->second.open;
}

const std::string* QueueState::HolderOf(uint64_t lease_id) const {
  auto it = leases_.find(lease_id);
  return it == leases_.end() ? nullptr : &it->second.worker;
}

std::optional<SplitProposal> QueueState::ProposalFor(uint64_t lease_id) const {
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.proposal < 0) return std::nullopt;
  return SplitProposal{lease_id, it->second.proposal, config_.split_min_residual};
}

bool QueueState::KeepAliveBySession(uint64_t lease_id, absl::Time now) {
  auto lease = leases_.find(lease_id);
  if (lease == leases_.end()) return false;
  auto presence = sessions_.find(lease->second.worker);
  if (presence == sessions_.end()) return false;
  absl::Time deadline;
  if (presence->second.open > 0) {
    deadline = now + config_.lease_timeout;
  } else {
    deadline = presence->second.closed + config_.lease_timeout;
    if (deadline <= now) {
      // Gone for a whole lease timeout: its leases expire as usual.
      sessions_.erase(presence);
      return false;
    }
  }
  deadlines_.erase({lease->second.deadline, lease_id});
  lease->second.deadline = deadline;
  deadlines_.insert({deadline, lease_id});
  return true;
}

}  // namespace shardq
