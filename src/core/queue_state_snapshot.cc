// QueueState <-> its durable forms: creating updates, snapshots and
// checkpoints. Pure: no I/O.
#include <algorithm>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
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

// Every field of `config` but its items.
void ConfigFieldsToProto(const QueueConfig& config, v1::QueueConfig* out) {
  out->set_name(config.name);
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
  if (config.max_attempts != QueueConfig::kDefaultMaxAttempts) {
    out->set_max_attempts(config.max_attempts);
  }
}

}  // namespace

void ConfigToProto(const QueueConfig& config, v1::QueueConfig* out) {
  ConfigFieldsToProto(config, out);
  out->mutable_items()->Reserve(static_cast<int>(config.items.size()));
  for (const std::string& item : config.items) out->add_items(item);
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
  if (config.max_attempts() != 0) out.max_attempts = config.max_attempts();
  return out;
}

journal::Update QueueState::CreationUpdate(const QueueConfig& config, absl::Time now) {
  journal::Update update;
  update.set_time_us(absl::ToUnixMicros(now));
  journal::CreateQueue* create = update.mutable_create();
  ConfigFieldsToProto(config, create->mutable_config());
  create->set_format(kCreationFormat);
  ItemTable::FromStrings(config.items)->ToProto(create->mutable_items());
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
    const journal::CreateQueue& create = update.create();
    QueueConfig config = ConfigFromProto(create.config());
    if (create.format() == 0) return Create(std::move(config));  // format 1: item strings
    const std::string what = absl::StrCat("creation of queue '", config.name, "'");
    if (create.format() != kCreationFormat) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " has format ", create.format(), "; this coordinator reads formats 1 to ",
          kCreationFormat, " (written by a newer shardq?)"));
    }
    absl::StatusOr<std::shared_ptr<const ItemTable>> items =
        ItemTable::FromProto(create.items(), what);
    if (!items.ok()) return items.status();
    return CreateCompact(std::move(config), *std::move(items));
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
  const int64_t first = checkpoint.first_epoch();
  if (first < 0 || first > config_.num_epochs ||
      checkpoint.completed_bits_size() > config_.num_epochs - first) {
    return absl::DataLossError(absl::StrCat(what, ": ", checkpoint.completed_bits_size(),
                                            " epochs of completions from epoch ", first,
                                            " for ", config_.num_epochs, " epochs"));
  }
  // Every epoch before `first` is completed: none of them is materialised.
  next_epoch_ = first;
  total_completed_ = first * num_items();
  for (int i = 0; i < checkpoint.completed_bits_size(); ++i) {
    absl::StatusOr<std::vector<bool>> bits =
        UnpackBits(checkpoint.completed_bits(i), num_items(), what);
    if (!bits.ok()) return bits.status();
    const int64_t count = std::count(bits->begin(), bits->end(), true);
    total_completed_ += count;
    if (count == 0) continue;
    EpochRecord& record = epochs_[first + i];
    record.completed = count;
    if (count < num_items()) record.completed_bits = *std::move(bits);
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
      absl::StatusOr<ItemRange> range = RangeFromString(ref.index, r.item_override());
      if (!range.ok()) return absl::DataLossError(absl::StrCat(what, ": ", range.status().message()));
      extras_.push_back(Extra{ref.epoch, ref.index, *range, false});
      residual.push_back(Ref{ref.epoch, num_items() + static_cast<int64_t>(extras_.size()) - 1});
      continue;
    }
    if (!r.item_override().empty()) {
      absl::StatusOr<ItemRange> range = RangeFromString(ref.index, r.item_override());
      if (!range.ok()) return absl::DataLossError(absl::StrCat(what, ": ", range.status().message()));
      overrides_[Slot(ref)] = *range;
    }
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
  out.set_format(kSnapshotFormat);
  ConfigFieldsToProto(config_, out.mutable_config());
  items_->ToProto(out.mutable_items());
  out.mutable_pending_slots()->Reserve(static_cast<int>(pending_.size()));
  for (const Ref& ref : pending_) out.add_pending_slots(Slot(ref));
  out.set_next_epoch(next_epoch_);
  StoreEpochs(&out);
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
    if (lease.ahead) l->set_ahead(true);
  }
  ended_.ToProto(out.mutable_ended_leases());
  for (const auto& [name, w] : workers_) {
    journal::WorkerRecord* r = out.add_workers();
    r->set_worker(name);
    r->set_taken(w.taken);
    r->set_completed(w.completed);
    r->set_held(w.held);
    r->set_records(w.records);
    r->set_first_take_us(absl::ToUnixMicros(w.first_take));
    r->set_last_completion_us(absl::ToUnixMicros(w.last_completion));
  }
  out.set_lease_sequence(lease_sequence_);
  out.set_taken(taken_);
  out.set_expired_count(expired_count_);
  out.set_released(released_);
  out.set_given_back(given_back_);
  out.set_records(records_);
  out.set_duplicates(duplicates_);
  // Sorted so that equal states give equal snapshots.
  std::vector<std::pair<int64_t, ItemRange>> overrides(overrides_.begin(), overrides_.end());
  std::sort(overrides.begin(), overrides.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [slot, range] : overrides) {
    journal::RangeOverride* o = out.add_range_overrides();
    o->set_slot(slot);
    o->set_start(range.start);
    o->set_end(range.end);
  }
  for (const Extra& x : extras_) {
    journal::ExtraItem* e = out.add_extras();
    e->set_epoch(x.epoch);
    e->set_index(x.parent);
    e->set_start(x.range.start);
    e->set_end(x.range.end);
    e->set_completed(x.completed);
    e->set_failed(x.failed);
  }
  out.set_splits(splits_);
  // Sorted by slot so that equal states give equal snapshots.
  std::vector<const Failure*> attempts;
  for (const auto& [slot, f] : attempts_) attempts.push_back(&f);
  std::sort(attempts.begin(), attempts.end(),
            [&](const Failure* a, const Failure* b) { return Slot(a->ref) < Slot(b->ref); });
  auto add = [](const Failure& f, journal::FailureRecord* r) {
    r->mutable_ref()->set_epoch(f.ref.epoch);
    r->mutable_ref()->set_index(f.ref.index);
    r->set_attempts(f.attempts);
    r->set_reason(f.reason);
  };
  for (const Failure* f : attempts) add(*f, out.add_attempts());
  for (const auto& [slot, f] : failed_) add(f, out.add_failed());
  return out;
}

absl::StatusOr<std::unique_ptr<QueueState>> QueueState::FromSnapshotItems(
    const journal::QueueSnapshot& snapshot) {
  const std::string what = absl::StrCat("snapshot of queue '", snapshot.config().name(), "'");
  absl::StatusOr<std::unique_ptr<QueueState>> created;
  if (snapshot.format() == 0) {  // format 1: the plan as item strings
    created = Create(ConfigFromProto(snapshot.config()));
  } else if (snapshot.format() == 2 || snapshot.format() == kSnapshotFormat) {
    absl::StatusOr<std::shared_ptr<const ItemTable>> items =
        ItemTable::FromProto(snapshot.items(), what);
    if (!items.ok()) return items.status();
    created = CreateCompact(ConfigFromProto(snapshot.config()), *std::move(items));
  } else {
    return absl::FailedPreconditionError(absl::StrCat(
        what, " has format ", snapshot.format(), "; this coordinator reads formats 1 to ",
        kSnapshotFormat, " (written by a newer shardq?)"));
  }
  if (!created.ok()) {
    return absl::DataLossError(absl::StrCat("snapshot: ", created.status().message()));
  }
  return created;
}

absl::StatusOr<std::unique_ptr<QueueState>> QueueState::FromSnapshot(
    const journal::QueueSnapshot& snapshot, absl::Time now) {
  absl::StatusOr<std::unique_ptr<QueueState>> created = FromSnapshotItems(snapshot);
  if (!created.ok()) return created.status();
  QueueState& s = **created;
  const bool compact = snapshot.format() != 0;  // formats 2 and 3
  const std::string what = absl::StrCat("snapshot of queue '", s.config_.name, "'");
  const int64_t epochs = s.config_.num_epochs;
  for (const journal::ExtraItem& x : snapshot.extras()) {
    if (x.epoch() < 0 || x.epoch() >= epochs || x.index() < 0 || x.index() >= s.num_items()) {
      return absl::DataLossError(absl::StrCat(what, ": extra item out of range"));
    }
    absl::StatusOr<ItemRange> range = compact ? ItemRange{x.start(), x.end()}
                                              : s.RangeFromString(x.index(), x.item());
    if (!range.ok()) return absl::DataLossError(absl::StrCat(what, ": ", range.status().message()));
    s.extras_.push_back(Extra{x.epoch(), x.index(), *range, x.completed(), x.failed()});
    if (x.completed()) ++s.extras_completed_;
    if (x.failed()) ++s.extras_failed_;
  }
  s.splits_ = snapshot.splits();
  const int64_t refs = s.num_items() + static_cast<int64_t>(s.extras_.size());
  auto valid_ref = [&](int64_t epoch, int64_t index) {
    if (epoch < 0 || epoch >= epochs || index < 0 || index >= refs) return false;
    // A ref to an extra names the extra's own epoch.
    return index < s.num_items() ||
           s.extras_[static_cast<size_t>(index - s.num_items())].epoch == epoch;
  };
  auto valid = [&](const journal::Ref& r) { return valid_ref(r.epoch(), r.index()); };
  if (snapshot.next_epoch() < 0 || snapshot.next_epoch() > epochs) {
    return absl::DataLossError(absl::StrCat(what, ": next epoch ", snapshot.next_epoch(),
                                            " is outside the ", epochs, " epochs"));
  }
  s.next_epoch_ = snapshot.next_epoch();
  if (absl::Status st = s.LoadEpochs(snapshot, what); !st.ok()) return st;
  // A planned item is pending or leased only in an epoch already begun
  // (MaterializeNextEpoch lists its items); one of a later epoch would be
  // handed out twice once that epoch begins.
  auto not_begun = [&](const Ref& ref, absl::string_view kind) {
    return absl::DataLossError(absl::StrCat(what, ": ", kind, " (epoch ", ref.epoch, ", item ",
                                            ref.index, ") is of an epoch not begun (the next is ",
                                            s.next_epoch_, ")"));
  };
  auto begun = [&](const Ref& ref) {
    return ref.index >= s.num_items() || ref.epoch < s.next_epoch_;
  };
  for (const journal::Ref& r : snapshot.pending()) {
    if (!valid(r)) return absl::DataLossError(absl::StrCat(what, ": pending item out of range"));
    s.pending_.push_back(Ref{r.epoch(), r.index()});
    if (!begun(s.pending_.back())) return not_begun(s.pending_.back(), "pending item");
  }
  const int64_t slots = s.total_work() + static_cast<int64_t>(s.extras_.size());
  for (int64_t slot : snapshot.pending_slots()) {
    if (slot < 0 || slot >= slots) {
      return absl::DataLossError(absl::StrCat(what, ": pending slot ", slot, " out of range"));
    }
    if (slot < s.total_work()) {
      s.pending_.push_back(Ref{slot / s.num_items(), slot % s.num_items()});
      if (!begun(s.pending_.back())) return not_begun(s.pending_.back(), "pending item");
    } else {
      const int64_t k = slot - s.total_work();
      s.pending_.push_back(Ref{s.extras_[static_cast<size_t>(k)].epoch, s.num_items() + k});
    }
  }
  for (const journal::LeaseRecord& l : snapshot.leases()) {
    if (!valid(l.ref())) return absl::DataLossError(absl::StrCat(what, ": lease out of range"));
    const absl::Time deadline = now + s.config_.lease_timeout;
    const Ref ref{l.ref().epoch(), l.ref().index()};
    if (!begun(ref)) return not_begun(ref, absl::StrCat("lease ", l.lease_id()));
    auto [slot, inserted] = s.leases_.try_emplace(l.lease_id());
    if (!inserted) {
      return absl::DataLossError(absl::StrCat(what, ": lease ", l.lease_id(), " is repeated"));
    }
    Lease& lease = slot->second;
    lease.ref = ref;
    lease.worker = l.worker();
    lease.deadline = deadline;
    lease.granted = now;
    lease.ahead = l.ahead();
    s.deadlines_.insert({deadline, l.lease_id()});
    s.CountLease(ref, +1);
  }
  for (const journal::LeaseRecord& l : snapshot.expired()) {
    if (!valid(l.ref()) || l.ended() < 0 || l.ended() > static_cast<int>(LeaseEnd::kFailed)) {
      return absl::DataLossError(absl::StrCat(what, ": ended lease ", l.lease_id(),
                                              " out of range"));
    }
    s.RememberEnded(l.lease_id(), Ref{l.ref().epoch(), l.ref().index()}, l.worker(),
                    static_cast<LeaseEnd>(l.ended()));
  }
  if (absl::Status st = s.ended_.AddFromProto(snapshot.ended_leases(), valid_ref, what); !st.ok()) {
    return st;
  }
  for (const journal::FailureRecord& f : snapshot.attempts()) {
    if (!valid(f.ref())) return absl::DataLossError(absl::StrCat(what, ": attempts out of range"));
    const Ref ref{f.ref().epoch(), f.ref().index()};
    s.attempts_[s.Slot(ref)] = Failure{ref, f.attempts(), f.reason()};
  }
  int64_t failed_extras = 0;
  for (const journal::FailureRecord& f : snapshot.failed()) {
    if (!valid(f.ref())) return absl::DataLossError(absl::StrCat(what, ": failed item out of range"));
    const Ref ref{f.ref().epoch(), f.ref().index()};
    s.failed_[s.Slot(ref)] = Failure{ref, f.attempts(), f.reason()};
    if (s.IsExtra(ref)) {
      if (!s.ExtraOf(ref).failed) {
        return absl::DataLossError(absl::StrCat(what, ": failed split-off range not marked"));
      }
      ++failed_extras;
      continue;
    }
    ++s.failed_planned_;
    if (auto it = s.epochs_.find(ref.epoch); it != s.epochs_.end()) ++it->second.failed;
  }
  if (failed_extras != s.extras_failed_) {
    return absl::DataLossError(absl::StrCat(what, ": ", s.extras_failed_,
                                            " split-off ranges marked failed, ", failed_extras,
                                            " listed"));
  }
  // Completions: those of the records, and every item of the epochs done
  // before the next one to materialise (less their failed items).
  int64_t failed_in_records = 0;
  for (const auto& [slot, f] : s.failed_) {
    if (!s.IsExtra(f.ref) && s.epochs_.count(f.ref.epoch) > 0) ++failed_in_records;
  }
  int64_t done_epochs = s.next_epoch_;
  for (const auto& [e, r] : s.epochs_) {
    s.total_completed_ += r.completed;
    if (e < s.next_epoch_) --done_epochs;
    if (r.completed + r.failed > s.num_items()) {
      return absl::DataLossError(absl::StrCat(what, ": epoch ", e, " has more items done than ",
                                              s.num_items()));
    }
  }
  s.total_completed_ += done_epochs * s.num_items() - (s.failed_planned_ - failed_in_records);
  for (const journal::WorkerRecord& r : snapshot.workers()) {
    WorkerRecord& w = s.workers_[r.worker()];
    w.taken = r.taken();
    w.completed = r.completed();
    w.records = r.records();
    w.first_take = absl::FromUnixMicros(r.first_take_us());
    w.last_completion = absl::FromUnixMicros(r.last_completion_us());
  }
  // What each worker holds is its leases (WorkerRecord.held is not read:
  // a count that disagreed with them would refuse the worker's takes, or
  // let it take past num_clients).
  for (const auto& [id, lease] : s.leases_) {
    if (++s.workers_[lease.worker].held == 1) ++s.holders_;  // [], not Worker(): no drops here
  }
  for (const auto& [name, w] : s.workers_) s.NoteHolder(name);
  s.lease_sequence_ = snapshot.lease_sequence();
  s.taken_ = snapshot.taken();
  s.expired_count_ = snapshot.expired_count();
  s.released_ = snapshot.released();
  s.given_back_ = snapshot.given_back();
  s.records_ = snapshot.records();
  s.duplicates_ = snapshot.duplicates();
  if (absl::Status st = s.LoadRanges(snapshot, what); !st.ok()) return st;
  // Ranges of held items, now that overrides (split heads) are in place.
  for (auto& [id, lease] : s.leases_) s.ParseRange(lease);
  return created;
}

void QueueState::StoreEpochs(journal::QueueSnapshot* out) const {
  for (const auto& [e, r] : epochs_) {
    journal::EpochRecord* record = out->add_epoch_records();
    record->set_epoch(e);
    record->set_completed(r.completed);
    if (r.completed < num_items()) record->set_completed_bits(PackBits(r.completed_bits));
  }
}

absl::Status QueueState::LoadEpochs(const journal::QueueSnapshot& snapshot,
                                    const std::string& what) {
  const int64_t n = num_items();
  // One epoch's completions; DATA_LOSS when the bits and the count disagree
  // (a damaged bitset would otherwise keep the queue from finishing).
  auto load = [&](int64_t epoch, const std::string& packed,
                  int64_t count) -> absl::StatusOr<EpochRecord> {
    absl::StatusOr<std::vector<bool>> bits = UnpackBits(packed, n, what);
    if (!bits.ok()) return bits.status();
    const int64_t set = std::count(bits->begin(), bits->end(), true);
    const bool ok = bits->empty() ? (count == 0 || count == n) : set == count && count < n;
    if (!ok) {
      return absl::DataLossError(absl::StrCat(what, ": epoch ", epoch, " has ", count,
                                              " completions but its bitset has ", set));
    }
    EpochRecord record;
    record.completed = count;
    if (count < n) record.completed_bits = *std::move(bits);
    return record;
  };
  if (snapshot.completed_bits_size() > 0 || snapshot.completed_per_epoch_size() > 0) {
    // An older version's snapshot: one entry per epoch.
    const int64_t epochs = config_.num_epochs;
    if (snapshot.completed_bits_size() != epochs ||
        snapshot.completed_per_epoch_size() != epochs) {
      return absl::DataLossError(absl::StrCat(what, ": epoch counts do not match the config"));
    }
    for (int64_t e = 0; e < epochs; ++e) {
      const int i = static_cast<int>(e);
      const int64_t count = snapshot.completed_per_epoch(i);
      absl::StatusOr<EpochRecord> record = load(e, snapshot.completed_bits(i), count);
      if (!record.ok()) return record.status();
      if ((e < next_epoch_ && count < n) || (e >= next_epoch_ && count > 0)) {
        epochs_[e] = *std::move(record);
      }
    }
    return absl::OkStatus();
  }
  for (const journal::EpochRecord& r : snapshot.epoch_records()) {
    if (r.epoch() < 0 || r.epoch() >= config_.num_epochs || epochs_.count(r.epoch()) > 0) {
      return absl::DataLossError(absl::StrCat(what, ": epoch record ", r.epoch(),
                                              " is out of range or repeated"));
    }
    absl::StatusOr<EpochRecord> record = load(r.epoch(), r.completed_bits(), r.completed());
    if (!record.ok()) return record.status();
    epochs_[r.epoch()] = *std::move(record);
  }
  return absl::OkStatus();
}

journal::Checkpoint QueueState::ToCheckpoint() const {
  journal::Checkpoint out;
  ConfigFieldsToProto(config_, out.mutable_config());
  out.mutable_config()->mutable_items()->Reserve(static_cast<int>(num_items()));
  for (int64_t i = 0; i < num_items(); ++i) out.mutable_config()->add_items(items_->Render(i));
  // A planned item whose split-off ranges are not all completed is not
  // completed in a checkpoint: its unread ranges are listed below.
  std::set<std::pair<int64_t, int64_t>> open_parents;
  for (const Extra& x : extras_) {
    if (!x.completed) open_parents.insert({x.epoch, x.parent});
  }
  // Bitsets from the first epoch not entirely completed to the last with
  // any state; every epoch before is completed.
  int64_t first = next_epoch_;
  int64_t last = next_epoch_ - 1;
  if (!epochs_.empty()) {
    first = std::min(first, epochs_.begin()->first);
    last = std::max(last, epochs_.rbegin()->first);
  }
  for (const auto& [slot, f] : failed_) first = std::min(first, f.ref.epoch);
  for (const auto& [epoch, parent] : open_parents) first = std::min(first, epoch);
  out.set_first_epoch(first);
  for (int64_t e = first; e <= last; ++e) {
    std::vector<bool> bits = CompletedBits(e);
    for (const auto& [epoch, parent] : open_parents) {
      if (epoch == e) bits[static_cast<size_t>(parent)] = false;
    }
    const bool any = std::find(bits.begin(), bits.end(), true) != bits.end();
    out.add_completed_bits(any ? PackBits(bits) : std::string());
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
    const int64_t planned = PlannedIndex(lease.ref);
    if (lease.progress >= 0) {
      if (items_->Parses(planned)) {
        ItemRange range = RangeOf(lease.ref);
        range.start = std::max<int64_t>(std::max<int64_t>(range.start, 0), lease.progress);
        if (range.end >= 0) range.start = std::min(range.start, range.end);
        r->set_item_override(items_->RenderRange(planned, range));
      }
    } else if (IsExtra(lease.ref) || overrides_.contains(Slot(lease.ref))) {
      r->set_item_override(ItemString(lease.ref));
    }
  }
  for (const Ref& ref : pending_) {
    if (IsDone(ref)) continue;
    if (IsExtra(ref)) {
      add_residual(ref)->set_item_override(ItemString(ref));
      continue;
    }
    if (!overrides_.contains(Slot(ref))) continue;
    add_residual(ref)->set_item_override(ItemString(ref));
  }
  return out;
}

}  // namespace shardq
