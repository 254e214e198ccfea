#include "src/core/ended_leases.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace shardq {

uint32_t EndedLeases::Intern(absl::string_view worker) {
  if (worker.empty()) return 0;
  uint32_t id;
  if (auto it = ids_.find(worker); it != ids_.end()) {
    id = it->second;
  } else {
    if (free_.empty()) {
      id = static_cast<uint32_t>(names_.size());
      names_.emplace_back(worker);
      uses_.push_back(0);
    } else {
      id = free_.back();
      free_.pop_back();
      names_[id].assign(worker.data(), worker.size());
    }
    ids_.emplace(names_[id], id);
  }
  ++uses_[id];
  return id;
}

void EndedLeases::Release(uint32_t id) {
  if (id == 0 || --uses_[id] > 0) return;
  ids_.erase(names_[id]);
  std::string().swap(names_[id]);
  free_.push_back(id);
}

void EndedLeases::Remember(uint64_t lease_id, int64_t epoch, int64_t index,
                           absl::string_view worker, LeaseEnd how) {
  const Lease lease{epoch, index, Intern(worker), how};
  auto [it, inserted] = leases_.try_emplace(lease_id, lease);
  if (!inserted) {
    Release(it->second.worker);
    it->second = lease;
    return;
  }
  order_.push_back(lease_id);
  while (order_.size() > kept_) {
    auto oldest = leases_.find(order_.front());
    Release(oldest->second.worker);
    leases_.erase(oldest);
    order_.pop_front();
  }
}

EndedLeases::Lease* EndedLeases::Find(uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  return it == leases_.end() ? nullptr : &it->second;
}

const EndedLeases::Lease* EndedLeases::Find(uint64_t lease_id) const {
  auto it = leases_.find(lease_id);
  return it == leases_.end() ? nullptr : &it->second;
}

void EndedLeases::ToProto(journal::EndedLeases* out) const {
  const int n = static_cast<int>(order_.size());
  out->mutable_lease_id()->Reserve(n);
  out->mutable_epoch()->Reserve(n);
  out->mutable_index()->Reserve(n);
  out->mutable_worker()->Reserve(n);
  std::string* ended = out->mutable_ended();
  ended->reserve(static_cast<size_t>(n));
  // Names in order of first use, so that the proto does not depend on the
  // order they were interned in (a restored table interns them anew).
  constexpr uint32_t kUnmapped = std::numeric_limits<uint32_t>::max();
  std::vector<uint32_t> remap(names_.size(), kUnmapped);
  remap[0] = 0;
  for (uint64_t id : order_) {
    const Lease& l = leases_.at(id);
    uint32_t& w = remap[l.worker];
    if (w == kUnmapped) {
      out->add_workers(names_[l.worker]);
      w = static_cast<uint32_t>(out->workers_size());
    }
    out->add_lease_id(id);
    out->add_epoch(l.epoch);
    out->add_index(l.index);
    out->add_worker(w);
    ended->push_back(static_cast<char>(l.how));
  }
}

absl::Status EndedLeases::AddFromProto(const journal::EndedLeases& proto,
                                       const std::function<bool(int64_t, int64_t)>& valid_ref,
                                       absl::string_view what) {
  const int n = proto.lease_id_size();
  if (proto.epoch_size() != n || proto.index_size() != n || proto.worker_size() != n ||
      proto.ended().size() != static_cast<size_t>(n)) {
    return absl::DataLossError(absl::StrCat(
        what, ": ended leases have columns of different lengths (", n, " lease ids, ",
        proto.epoch_size(), " epochs, ", proto.index_size(), " indexes, ", proto.worker_size(),
        " workers, ", proto.ended().size(), " ends)"));
  }
  for (int i = 0; i < n; ++i) {
    const uint64_t id = proto.lease_id(i);
    const uint32_t w = proto.worker(i);
    const int how = static_cast<unsigned char>(proto.ended()[static_cast<size_t>(i)]);
    if (!valid_ref(proto.epoch(i), proto.index(i)) ||
        w > static_cast<uint32_t>(proto.workers_size()) ||
        how > static_cast<int>(LeaseEnd::kFailed)) {
      return absl::DataLossError(absl::StrCat(what, ": ended lease ", id, " out of range"));
    }
    Remember(id, proto.epoch(i), proto.index(i), w == 0 ? "" : proto.workers(static_cast<int>(w) - 1),
             static_cast<LeaseEnd>(how));
  }
  return absl::OkStatus();
}

}  // namespace shardq
