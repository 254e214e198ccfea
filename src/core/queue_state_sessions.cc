// Worker sessions in QueueState: the open stream of a worker keeps its
// leases alive without heartbeats (see "Worker sessions" in queue_state.h).
// Pure: no I/O, no clock.
#include "src/core/queue_state.h"

namespace shardq {

void QueueState::OpenSession(absl::string_view worker) {
  ++sessions_[worker].open;
}

void QueueState::CloseSession(absl::string_view worker, absl::Time now) {
  auto it = sessions_.find(worker);
  if (it == sessions_.end() || it->second.open <= 0) return;
  if (--it->second.open > 0) return;
  auto record = workers_.find(worker);
  if (record == workers_.end() || record->second.held == 0) {
    sessions_.erase(it);  // nothing to keep alive
    return;
  }
  it->second.closed = now;
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
