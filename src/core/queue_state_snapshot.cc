// QueueState <-> its durable forms: creating updates, snapshots and
// checkpoints. Pure: no I/O.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/core/queue_state.h"
#include "src/core/validate.h"

namespace shardq {
namespace {

std::string PackBits(const std::vector<bool>& bits) {
  std::string out((bits.size() + 7) / 8, '\0');
  for (size_t i = 0; i < bits.size(); ++i) {
    if (bits[i]) out[i / 8] = static_cast<char>(out[i / 8] | (1 << (i % 8)));
  }
  return out;
}

// DATA_LOSS when `packed` cannot hold `n` bits.
absl::StatusOr<std::vector<bool>> UnpackBits(const std::string& packed, int64_t n,
                                             absl::string_view what) {
  if (packed.empty()) return std::vector<bool>();
  if (static_cast<int64_t>(packed.size()) != (n + 7) / 8) {
    return absl::DataLossError(absl::StrCat(what, ": completion bitset has ",
                                            packed.size(), " bytes for ", n, " items"));
  }
  std::vector<bool> bits(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    bits[static_cast<size_t>(i)] = (static_cast<unsigned char>(packed[i / 8]) >> (i % 8)) & 1;
  }
  return bits;
}

}  // namespace

void ConfigToProto(const QueueConfig& config, v1::QueueConfig* out) {
  out->set_name(config.name);
  out->mutable_items()->Reserve(static_cast<int>(config.items.size()));
  for (const std::string& item : config.items) out->add_items(item);
  out->set_num_epochs(config.num_epochs);
  out->set_shuffle(config.shuffle);
  if (config.seed.has_value()) {
    out->set_seed(*config.seed);
    out->set_seed_set(true);
  }
  out->set_num_clients(config.num_clients);
  out->set_lease_timeout_ms(absl::ToInt64Milliseconds(config.lease_timeout));
  out->set_split_disabled(!config.split);
  if (config.split_min_residual != QueueConfig::kDefaultSplitMinResidual) {
    out->set_split_min_residual(config.split_min_residual);
  }
}

QueueConfig ConfigFromProto(const v1::QueueConfig& config) {
  QueueConfig out;
  out.name = config.name();
  out.items.assign(config.items().begin(), config.items().end());
  out.num_epochs = config.num_epochs();
  out.shuffle = config.shuffle();
  if (config.seed_set()) out.seed = config.seed();
  out.num_clients = config.num_clients();
  out.lease_timeout = absl::Milliseconds(config.lease_timeout_ms());
  out.split = !config.split_disabled();
  if (config.split_min_residual() != 0) out.split_min_residual = config.split_min_residual();
  return out;
}

journal::Update QueueState::CreationUpdate(const QueueConfig& config, absl::Time now) {
  journal::Update update;
  update.set_time_us(absl::ToUnixMicros(now));
  ConfigToProto(config, update.mutable_create()->mutable_config());
  return update;
}

absl::StatusOr<journal::Update> QueueState::RestoreUpdate(journal::Checkpoint checkpoint,
                                                          const std::string& name,
                                                          absl::Time now) {
  if (!name.empty()) checkpoint.mutable_config()->set_name(name);
  if (absl::Status s = ValidateCheckpointResiduals(checkpoint); !s.ok()) return s;
  journal::Update update;
  update.set_time_us(absl::ToUnixMicros(now));
  *update.mutable_restore()->mutable_checkpoint() = std::move(checkpoint);
  // Validate by building the state once.
  absl::StatusOr<std::unique_ptr<QueueState>> state = FromCreation(update);
  if (!state.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint does not make a queue: ", state.status().message()));
  }
  return update;
}

absl::StatusOr<std::unique_ptr<QueueState>> QueueState::FromCreation(
    const journal::Update& update) {
  if (update.has_create()) {
    QueueConfig config = ConfigFromProto(update.create().config());
    return Create(std::move(config));
  }
  if (update.has_restore()) {
    QueueConfig config = ConfigFromProto(update.restore().checkpoint().config());
    absl::StatusOr<std::unique_ptr<QueueState>> state = Create(std::move(config));
    if (!state.ok()) return state.status();
    if (absl::Status s = (*state)->ApplyRestore(update.restore().checkpoint()); !s.ok()) {
      return s;
    }
    return state;
  }
  return absl::DataLossError("a queue's first update neither creates nor restores it");
}

absl::Status QueueState::ApplyRestore(const journal::Checkpoint& checkpoint) {
  const std::string what = absl::StrCat("checkpoint of queue '", config_.name, "'");
  if (checkpoint.completed_bits_size() > config_.num_epochs) {
    return absl::DataLossError(absl::StrCat(what, ": ", checkpoint.completed_bits_size(),
                                            " epochs of completions for ",
                                            config_.num_epochs, " epochs"));
  }
  for (int e = 0; e < checkpoint.completed_bits_size(); ++e) {
    absl::StatusOr<std::vector<bool>> bits =
        UnpackBits(checkpoint.completed_bits(e), num_items(), what);
    if (!bits.ok()) return bits.status();
    int64_t count = std::count(bits->begin(), bits->end(), true);
    completed_per_epoch_[static_cast<size_t>(e)] = count;
    total_completed_ += count;
    if (count < num_items()) completed_bits_[static_cast<size_t>(e)] = *std::move(bits);
  }
  // Held items come first, narrowed to their unread part; the epochs they
  // belong to are materialised now so that they are not handed out twice.
  int64_t last_epoch = -1;
  std::vector<Ref> residual;
  for (const journal::Ref& r : checkpoint.residual()) {
    if (r.epoch() < 0 || r.epoch() >= config_.num_epochs || r.index() < 0 ||
        r.index() >= num_items()) {
      return absl::DataLossError(absl::StrCat(what, ": residual item (", r.epoch(), ", ",
                                              r.index(), ") is outside the plan"));
    }
    const Ref ref{r.epoch(), r.index()};
    if (IsCompleted(ref)) continue;
    last_epoch = std::max(last_epoch, ref.epoch);
    const bool again = std::any_of(residual.begin(), residual.end(), [&](const Ref& p) {
      return !IsExtra(p) && p.epoch == ref.epoch && p.index == ref.index;
    });
    if (again) {
      // A second unread range of one planned item (split off it before the
      // checkpoint): an extra item of its own.
      if (r.item_override().empty()) {
        return absl::DataLossError(absl::StrCat(what, ": residual item (", r.epoch(), ", ",
                                                r.index(), ") repeats without a range"));
      }
      extras_.push_back(Extra{ref.epoch, ref.index, r.item_override(), false});
      residual.push_back(Ref{ref.epoch, num_items() + static_cast<int64_t>(extras_.size()) - 1});
      continue;
    }
    if (!r.item_override().empty()) overrides_[Slot(ref)] = r.item_override();
    residual.push_back(ref);
  }
  while (next_epoch_ <= last_epoch) MaterializeNextEpoch();
  auto is_residual = [&](const Ref& p) {
    return std::any_of(residual.begin(), residual.end(), [&](const Ref& r) {
      return !IsExtra(r) && r.epoch == p.epoch && r.index == p.index;
    });
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), is_residual),
                 pending_.end());
  for (auto it = residual.rbegin(); it != residual.rend(); ++it) pending_.push_front(*it);
  return absl::OkStatus();
}

journal::QueueSnapshot QueueState::ToSnapshot() const {
  journal::QueueSnapshot out;
  ConfigToProto(config_, out.mutable_config());
  for (const Ref& ref : pending_) {
    journal::Ref* r = out.add_pending();
    r->set_epoch(ref.epoch);
    r->set_index(ref.index);
  }
  out.set_next_epoch(next_epoch_);
  for (size_t e = 0; e < completed_bits_.size(); ++e) {
    out.add_completed_bits(PackBits(completed_bits_[e]));
    out.add_completed_per_epoch(completed_per_epoch_[e]);
  }
  // Sorted so that equal states give equal snapshots.
  std::vector<uint64_t> ids;
  for (const auto& [id, lease] : leases_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    const Lease& lease = leases_.at(id);
    journal::LeaseRecord* l = out.add_leases();
    l->set_lease_id(id);
    l->mutable_ref()->set_epoch(lease.ref.epoch);
    l->mutable_ref()->set_index(lease.ref.index);
    l->set_worker(lease.worker);
  }
  ids.clear();
  for (const auto& [id, ref] : expired_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    journal::LeaseRecord* l = out.add_expired();
    l->set_lease_id(id);
    l->mutable_ref()->set_epoch(expired_.at(id).epoch);
    l->mutable_ref()->set_index(expired_.at(id).index);
  }
  for (const auto& [name, w] : workers_) {
    journal::WorkerRecord* r = out.add_workers();
    r->set_worker(name);
    r->set_taken(w.taken);
    r->set_completed(w.completed);
    r->set_held(w.held);
    r->set_first_take_us(absl::ToUnixMicros(w.first_take));
    r->set_last_completion_us(absl::ToUnixMicros(w.last_completion));
  }
  out.set_lease_sequence(lease_sequence_);
  out.set_taken(taken_);
  out.set_expired_count(expired_count_);
  out.set_released(released_);
  out.set_duplicates(duplicates_);
  for (const auto& [slot, item] : overrides_) (*out.mutable_overrides())[slot] = item;
  for (const Extra& x : extras_) {
    journal::ExtraItem* e = out.add_extras();
    e->set_epoch(x.epoch);
    e->set_index(x.parent);
    e->set_item(x.item);
    e->set_completed(x.completed);
  }
  out.set_splits(splits_);
  return out;
}

absl::StatusOr<std::unique_ptr<QueueState>> QueueState::FromSnapshot(
    const journal::QueueSnapshot& snapshot, absl::Time now) {
  absl::StatusOr<std::unique_ptr<QueueState>> created =
      Create(ConfigFromProto(snapshot.config()));
  if (!created.ok()) {
    return absl::DataLossError(absl::StrCat("snapshot: ", created.status().message()));
  }
  QueueState& s = **created;
  const std::string what = absl::StrCat("snapshot of queue '", s.config_.name, "'");
  const int64_t epochs = s.config_.num_epochs;
  for (const journal::ExtraItem& x : snapshot.extras()) {
    if (x.epoch() < 0 || x.epoch() >= epochs || x.index() < 0 || x.index() >= s.num_items()) {
      return absl::DataLossError(absl::StrCat(what, ": extra item out of range"));
    }
    s.extras_.push_back(Extra{x.epoch(), x.index(), x.item(), x.completed()});
    if (x.completed()) ++s.extras_completed_;
  }
  s.splits_ = snapshot.splits();
  const int64_t refs = s.num_items() + static_cast<int64_t>(s.extras_.size());
  auto valid = [&](const journal::Ref& r) {
    if (r.epoch() < 0 || r.epoch() >= epochs || r.index() < 0 || r.index() >= refs) return false;
    // A ref to an extra names the extra's own epoch.
    return r.index() < s.num_items() ||
           s.extras_[static_cast<size_t>(r.index() - s.num_items())].epoch == r.epoch();
  };
  if (snapshot.completed_bits_size() != epochs ||
      snapshot.completed_per_epoch_size() != epochs || snapshot.next_epoch() < 0 ||
      snapshot.next_epoch() > epochs) {
    return absl::DataLossError(absl::StrCat(what, ": epoch counts do not match the config"));
  }
  for (int64_t e = 0; e < epochs; ++e) {
    absl::StatusOr<std::vector<bool>> bits =
        UnpackBits(snapshot.completed_bits(static_cast<int>(e)), s.num_items(), what);
    if (!bits.ok()) return bits.status();
    s.completed_bits_[static_cast<size_t>(e)] = *std::move(bits);
    s.completed_per_epoch_[static_cast<size_t>(e)] = snapshot.completed_per_epoch(static_cast<int>(e));
    s.total_completed_ += snapshot.completed_per_epoch(static_cast<int>(e));
  }
  for (const journal::Ref& r : snapshot.pending()) {
    if (!valid(r)) return absl::DataLossError(absl::StrCat(what, ": pending item out of range"));
    s.pending_.push_back(Ref{r.epoch(), r.index()});
  }
  s.next_epoch_ = snapshot.next_epoch();
  for (const journal::LeaseRecord& l : snapshot.leases()) {
    if (!valid(l.ref())) return absl::DataLossError(absl::StrCat(what, ": lease out of range"));
    const absl::Time deadline = now + s.config_.lease_timeout;
    const Ref ref{l.ref().epoch(), l.ref().index()};
    Lease& lease = s.leases_[l.lease_id()];
    lease = Lease();
    lease.ref = ref;
    lease.worker = l.worker();
    lease.deadline = deadline;
    lease.granted = now;
    s.deadlines_.insert({deadline, l.lease_id()});
    s.CountLease(ref, +1);
  }
  for (const journal::LeaseRecord& l : snapshot.expired()) {
    if (!valid(l.ref())) return absl::DataLossError(absl::StrCat(what, ": expired lease out of range"));
    s.expired_[l.lease_id()] = Ref{l.ref().epoch(), l.ref().index()};
  }
  for (const journal::WorkerRecord& r : snapshot.workers()) {
    WorkerRecord& w = s.workers_[r.worker()];
    w.taken = r.taken();
    w.completed = r.completed();
    w.held = r.held();
    w.first_take = absl::FromUnixMicros(r.first_take_us());
    w.last_completion = absl::FromUnixMicros(r.last_completion_us());
  }
  s.lease_sequence_ = snapshot.lease_sequence();
  s.taken_ = snapshot.taken();
  s.expired_count_ = snapshot.expired_count();
  s.released_ = snapshot.released();
  s.duplicates_ = snapshot.duplicates();
  for (const auto& [slot, item] : snapshot.overrides()) {
    if (slot < 0 || slot >= s.total_work()) {
      return absl::DataLossError(absl::StrCat(what, ": override slot out of range"));
    }
    s.overrides_[slot] = item;
  }
  // Ranges of held items, now that overrides (split heads) are in place.
  for (auto& [id, lease] : s.leases_) s.ParseRange(lease);
  return created;
}

journal::Checkpoint QueueState::ToCheckpoint() const {
  journal::Checkpoint out;
  ConfigToProto(config_, out.mutable_config());
  // A planned item whose split-off ranges are not all completed is not
  // completed in a checkpoint: its unread ranges are listed below.
  std::set<std::pair<int64_t, int64_t>> open_parents;
  for (const Extra& x : extras_) {
    if (!x.completed) open_parents.insert({x.epoch, x.parent});
  }
  for (size_t e = 0; e < completed_bits_.size(); ++e) {
    std::vector<bool> bits = completed_per_epoch_[e] == num_items()
                                 ? std::vector<bool>(static_cast<size_t>(num_items()), true)
                                 : completed_bits_[e];
    for (const auto& [epoch, parent] : open_parents) {
      if (epoch == static_cast<int64_t>(e) && !bits.empty()) {
        bits[static_cast<size_t>(parent)] = false;
      }
    }
    out.add_completed_bits(PackBits(bits));
  }
  // A residual names the planned item it belongs to.
  auto add_residual = [&](Ref ref) {
    journal::Ref* r = out.add_residual();
    r->set_epoch(ref.epoch);
    r->set_index(IsExtra(ref) ? ExtraOf(ref).parent : ref.index);
    return r;
  };
  // Held items, narrowed to what their holder has not consumed yet, then
  // pending residual ranges of an earlier restore, front first.
  std::vector<uint64_t> ids;
  for (const auto& [id, lease] : leases_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint64_t id : ids) {
    const Lease& lease = leases_.at(id);
    journal::Ref* r = add_residual(lease.ref);
    const std::string& item = ItemString(lease.ref);
    if (lease.progress >= 0) {
      absl::StatusOr<SliceSpec> spec = ParseItem(item);
      if (spec.ok()) {
        spec->start = std::max(spec->start.value_or(0), lease.progress);
        if (spec->end.has_value()) spec->start = std::min(*spec->start, *spec->end);
        r->set_item_override(FormatItem(*spec));
      }
    } else if (IsExtra(lease.ref) || overrides_.contains(Slot(lease.ref))) {
      r->set_item_override(item);
    }
  }
  for (const Ref& ref : pending_) {
    if (IsCompleted(ref)) continue;
    if (IsExtra(ref)) {
      add_residual(ref)->set_item_override(ExtraOf(ref).item);
      continue;
    }
    auto it = overrides_.find(Slot(ref));
    if (it == overrides_.end()) continue;
    add_residual(ref)->set_item_override(it->second);
  }
  return out;
}

}  // namespace shardq
