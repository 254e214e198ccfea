#include "src/core/queue_state.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shardq/internal/rng.h"
#include "src/core/validate.h"

namespace shardq {
namespace {

constexpr int kLeaseSequenceBits = 20;
constexpr uint64_t kLeaseSequenceMask = (uint64_t{1} << kLeaseSequenceBits) - 1;
// (epoch * num_items + index) must fit in the bits left above the sequence.
constexpr int64_t kMaxTotalWork = kMaxHandOutSlots;
static_assert(kMaxHandOutSlots <= int64_t{1} << (63 - kLeaseSequenceBits));

}  // namespace

absl::StatusOr<std::unique_ptr<QueueState>> QueueState::Create(
    QueueConfig config) {
  if (absl::Status s = ValidateConfig(config); !s.ok()) return s;
  if (!config.seed.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue '", config.name, "': seed must be resolved"));
  }
  std::shared_ptr<const ItemTable> items = ItemTable::FromStrings(config.items);
  std::vector<std::string>().swap(config.items);
  return std::unique_ptr<QueueState>(new QueueState(std::move(config), std::move(items)));
}

absl::StatusOr<std::unique_ptr<QueueState>> QueueState::CreateCompact(
    QueueConfig config, std::shared_ptr<const ItemTable> items) {
  if (!config.items.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config.name, "': a compact plan comes with no item strings"));
  }
  if (absl::Status s = ValidateCompactConfig(config, items->size()); !s.ok()) return s;
  if (!config.seed.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("queue '", config.name, "': seed must be resolved"));
  }
  return std::unique_ptr<QueueState>(new QueueState(std::move(config), std::move(items)));
}

QueueState::QueueState(QueueConfig config, std::shared_ptr<const ItemTable> items)
    : config_(std::move(config)), items_(std::move(items)) {}

std::unique_ptr<QueueState> QueueState::Clone() const {
  std::unique_ptr<QueueState> copy(new QueueState(*this));
  copy->sink_ = nullptr;
  return copy;
}

uint64_t QueueState::MakeLeaseId(Ref ref) {
  const uint64_t slot = static_cast<uint64_t>(Slot(ref));
  // Sequence in [1, 2^20 - 1] so that no lease id is 0.
  const uint64_t seq = 1 + (lease_sequence_ % kLeaseSequenceMask);
  return (slot << kLeaseSequenceBits) | seq;
}

std::optional<QueueState::Ref> QueueState::DecodeLeaseId(uint64_t lease_id) const {
  if ((lease_id & kLeaseSequenceMask) == 0) return std::nullopt;
  const uint64_t slot = lease_id >> kLeaseSequenceBits;
  const int64_t s = static_cast<int64_t>(slot);
  if (slot >= static_cast<uint64_t>(total_work())) {
    const int64_t k = s - total_work();
    if (k >= static_cast<int64_t>(extras_.size())) return std::nullopt;
    return Ref{extras_[static_cast<size_t>(k)].epoch, num_items() + k};
  }
  return Ref{s / num_items(), s % num_items()};
}

bool QueueState::IsCompleted(Ref ref) const {
  if (IsExtra(ref)) return ExtraOf(ref).completed;
  auto it = epochs_.find(ref.epoch);
  if (it == epochs_.end()) return ref.epoch < next_epoch_ && !IsFailed(ref);
  const EpochRecord& r = it->second;
  if (r.completed == num_items()) return true;
  return !r.completed_bits.empty() && r.completed_bits[static_cast<size_t>(ref.index)];
}

void QueueState::MarkCompleted(Ref ref, const std::string& worker,
                               absl::Time now) {
  WorkerRecord& w = Worker(worker);
  ++w.completed;
  w.last_completion = now;
  attempts_.erase(Slot(ref));
  const bool was_failed = failed_.erase(Slot(ref)) > 0;  // a late completion counts
  if (IsExtra(ref)) {
    Extra& x = ExtraOf(ref);
    if (was_failed) {
      x.failed = false;
      --extras_failed_;
    }
    x.completed = true;
    ++extras_completed_;
    return;
  }
  if (was_failed) --failed_planned_;
  ++total_completed_;
  overrides_.erase(Slot(ref));
  auto it = epochs_.find(ref.epoch);
  if (it == epochs_.end()) return;  // a failed item of a retired epoch
  EpochRecord& r = it->second;
  if (was_failed) --r.failed;
  std::vector<bool>& bits = r.completed_bits;
  if (bits.empty()) bits.assign(static_cast<size_t>(num_items()), false);
  bits[static_cast<size_t>(ref.index)] = true;
  if (++r.completed == num_items()) {
    std::vector<bool>().swap(bits);  // the count alone now says "all done"
  }
  MaybeRetire(ref.epoch);
}

ItemRange QueueState::RangeOf(Ref ref) const {
  if (IsExtra(ref)) return ExtraOf(ref).range;
  auto it = overrides_.find(Slot(ref));
  if (it != overrides_.end()) return it->second;
  return items_->Range(ref.index);
}

std::string QueueState::ItemString(Ref ref) const {
  if (!IsExtra(ref) && overrides_.empty()) return items_->Render(ref.index);
  return items_->RenderRange(PlannedIndex(ref), RangeOf(ref));
}

absl::StatusOr<ItemRange> QueueState::RangeFromString(int64_t index,
                                                      const std::string& item) const {
  if (items_->Equals(index, item)) return items_->Range(index);
  return items_->ParseRange(item);
}

bool QueueState::MaterializeNextEpoch() {
  if (next_epoch_ >= config_.num_epochs) return false;
  const int64_t epoch = next_epoch_++;
  EpochRecord& record = epochs_[epoch];  // completions of a restore, or new
  if (record.completed + record.failed == num_items()) {
    MaybeRetire(epoch);
    return true;
  }
  for (int64_t index :
       EpochOrder(*config_.seed, epoch, num_items(), config_.shuffle)) {
    if (!IsDone(Ref{epoch, index})) pending_.push_back(Ref{epoch, index});
  }
  return true;
}

bool QueueState::PrepareFront() {
  while (true) {
    if (pending_.empty() && !MaterializeNextEpoch()) return false;
    if (pending_.empty()) continue;
    // A late completion may have finished an item while it sat in pending.
    if (!IsDone(pending_.front())) return true;
    pending_.pop_front();
  }
}

std::optional<QueueState::Ref> QueueState::PeekFront() const {
  for (const Ref& ref : pending_) {
    if (!IsDone(ref)) return ref;
  }
  for (int64_t epoch = next_epoch_; epoch < config_.num_epochs; ++epoch) {
    auto it = epochs_.find(epoch);
    if (it != epochs_.end() && it->second.completed + it->second.failed == num_items()) {
      continue;
    }
    for (int64_t index : EpochOrder(*config_.seed, epoch, num_items(), config_.shuffle)) {
      if (!IsDone(Ref{epoch, index})) return Ref{epoch, index};
    }
  }
  return std::nullopt;
}

QueueState::WorkerRecord& QueueState::Worker(absl::string_view worker) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) {
    // Past the bound with enough idle records to be worth a scan (a queue
    // whose records are mostly holders must not scan at every new name).
    if (workers_.size() >= kWorkersKept &&
        workers_.size() - static_cast<size_t>(holders_) >= kWorkersKept / 4) {
      ForgetIdleWorkers();
    }
    it = workers_.emplace(std::string(worker), WorkerRecord{}).first;
  }
  return it->second;
}

void QueueState::SetRange(Ref ref, ItemRange range) {
  if (IsExtra(ref)) {
    ExtraOf(ref).range = range;
  } else {
    overrides_[Slot(ref)] = range;
  }
}

void QueueState::CountLease(Ref ref, int delta) {
  if (IsExtra(ref)) {
    extras_leased_ += delta;
    return;
  }
  auto it = epochs_.find(ref.epoch);
  if (it == epochs_.end()) return;  // cannot be: a lease keeps its epoch's record
  it->second.leased += delta;
  if (delta < 0) MaybeRetire(ref.epoch);
}

void QueueState::DropLease(uint64_t lease_id, const Lease& lease) {
  deadlines_.erase({lease.deadline, lease_id});
  CountLease(lease.ref, -1);
  if (--Worker(lease.worker).held == 0) --holders_;
  NoteHolder(lease.worker);
}

journal::Update QueueState::NewUpdate(absl::Time now) {
  journal::Update update;
  update.set_time_us(absl::ToUnixMicros(now));
  return update;
}

bool QueueState::SlotFits(int64_t slot) { return slot < kMaxTotalWork; }

absl::Status QueueState::Commit(const journal::Update& update,
                                CompleteOutcome* outcome) {
  if (absl::Status s = ApplyInternal(update, outcome); !s.ok()) return s;
  if (sink_) sink_(update);
  return absl::OkStatus();
}

absl::Status QueueState::Apply(const journal::Update& update) {
  return ApplyInternal(update, nullptr);
}

absl::Status QueueState::ApplyInternal(const journal::Update& update,
                                       CompleteOutcome* outcome) {
  const absl::Time now = absl::FromUnixMicros(update.time_us());
  switch (update.kind_case()) {
    case journal::Update::kLease:
      return ApplyLease(update.lease(), now);
    case journal::Update::kComplete: {
      absl::StatusOr<CompleteOutcome> o = ApplyComplete(update.complete(), now);
      if (!o.ok()) return o.status();
      if (outcome != nullptr) *outcome = *o;
      if (const int64_t records = update.complete().records(); records > 0) {
        records_ += records;
        Worker(update.complete().worker()).records += records;
      }
      return absl::OkStatus();
    }
    case journal::Update::kRelease:
      return ApplyRelease(update.release());
    case journal::Update::kExpire:
      return ApplyExpire(update.expire());
    case journal::Update::kSplit:
      return ApplySplit(update.split());
    case journal::Update::kFail:
      return ApplyFail(update.fail());
    default:
      return absl::DataLossError(absl::StrCat(
          "queue '", config_.name, "': update of kind ", update.kind_case(),
          " cannot be applied to an existing queue"));
  }
}

absl::Status QueueState::ApplyLease(const journal::Lease& lease, absl::Time now) {
  if (!PrepareFront() || pending_.front().epoch != lease.epoch() ||
      pending_.front().index != lease.index()) {
    return absl::DataLossError(absl::StrCat(
        "queue '", config_.name, "': journal leases (", lease.epoch(), ", ",
        lease.index(), ") but that is not the next pending item"));
  }
  const Ref ref = pending_.front();
  pending_.pop_front();
  // From the id, not counted: the sequence may have skipped ids at a
  // recovery (SkipLeaseIdsAfterRecovery), and a replay must follow it.
  lease_sequence_ = lease.lease_id() & kLeaseSequenceMask;
  const absl::Time deadline = now + config_.lease_timeout;
  WorkerRecord& w = Worker(lease.worker());
  Lease& held = leases_[lease.lease_id()];
  held = Lease();
  held.ref = ref;
  held.worker = lease.worker();
  held.deadline = deadline;
  held.granted = now;
  // Beyond the items the worker reads at once: one it keeps ready. Marked
  // here, where a journal replay passes too, so that a recovered (or
  // failed-over) coordinator knows it as well.
  held.ahead = w.held >= config_.num_clients;
  ParseRange(held);
  deadlines_.insert({deadline, lease.lease_id()});
  CountLease(ref, +1);
  if (++w.held == 1) ++holders_;
  NoteHolder(lease.worker());
  ++w.taken;
  if (w.first_take == absl::InfinitePast()) w.first_take = now;
  ++taken_;
  return absl::OkStatus();
}

absl::StatusOr<CompleteOutcome> QueueState::ApplyComplete(
    const journal::Complete& complete, absl::Time now) {
  const uint64_t lease_id = complete.lease_id();
  if (auto it = leases_.find(lease_id); it != leases_.end()) {
    Lease lease = std::move(it->second);
    leases_.erase(it);
    const bool duplicate = IsCompleted(lease.ref);
    // Remembered first: dropping the lease may retire its epoch's record.
    RememberEnded(lease_id, lease.ref, lease.worker,
                  duplicate ? LeaseEnd::kDuplicate : LeaseEnd::kCompleted);
    if (!duplicate) MarkCompleted(lease.ref, lease.worker, now);
    DropLease(lease_id, lease);
    if (duplicate) {
      ++duplicates_;
      return CompleteOutcome::kDuplicate;
    }
    return CompleteOutcome::kCompleted;
  }
  if (EndedLeases::Lease* ended_lease = ended_.Find(lease_id); ended_lease != nullptr) {
    EndedLeases::Lease& ended = *ended_lease;
    const Ref ref{ended.epoch, ended.index};
    if (ended.how == LeaseEnd::kCompleted || ended.how == LeaseEnd::kDuplicate ||
        IsCompleted(ref)) {
      // Completed by another lease since (or, in a journal of an older
      // version, the same lease completed twice): a real re-run.
      ended.how = LeaseEnd::kDuplicate;
      ++duplicates_;
      return CompleteOutcome::kDuplicate;
    }
    // Late, but first: it counts. If the item was handed out again, that
    // holder's completion will be the duplicate.
    ended.how = LeaseEnd::kCompleted;
    MarkCompleted(ref, complete.worker(), now);
    return CompleteOutcome::kCompleted;
  }
  // Journals of older versions accepted a completion of any lease id whose
  // item was completed; replay counts it as they did.
  if (std::optional<Ref> ref = DecodeLeaseId(lease_id); ref.has_value() && IsCompleted(*ref)) {
    ++duplicates_;
    return CompleteOutcome::kDuplicate;
  }
  return absl::DataLossError(absl::StrCat("queue '", config_.name,
                                          "': journal completes unknown lease ",
                                          lease_id));
}

absl::StatusOr<QueueState::Ref> QueueState::ReturnToFront(uint64_t lease_id,
                                                         absl::string_view verb,
                                                         LeaseEnd how) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return absl::DataLossError(absl::StrCat("queue '", config_.name, "': journal ", verb,
                                            " unknown lease ", lease_id));
  }
  Lease lease = std::move(it->second);
  leases_.erase(it);
  RememberEnded(lease_id, lease.ref, lease.worker, how);
  if (how != LeaseEnd::kFailed) pending_.push_front(lease.ref);
  DropLease(lease_id, lease);
  return lease.ref;
}

absl::Status QueueState::ApplyRelease(const journal::Release& release) {
  absl::StatusOr<Ref> ref = ReturnToFront(release.lease_id(), "releases", LeaseEnd::kReleased);
  if (!ref.ok()) return ref.status();
  ++(release.given_back() ? given_back_ : released_);
  return absl::OkStatus();
}

absl::Status QueueState::ApplyExpire(const journal::Expire& expire) {
  absl::StatusOr<Ref> ref = ReturnToFront(expire.lease_id(), "expires", LeaseEnd::kExpired);
  if (!ref.ok()) return ref.status();
  ++expired_count_;
  return absl::OkStatus();
}

absl::StatusOr<TakeResult> QueueState::Take(absl::string_view worker,
                                            absl::Time now, int64_t ahead) {
  if (worker.empty() || worker.size() > kMaxWorkerNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config_.name, "': worker name must have 1 to ", kMaxWorkerNameBytes,
        " bytes, got ", worker.size()));
  }
  ExpireLeases(now);
  // Looked up, not inserted: only applied updates change the state.
  auto known = workers_.find(worker);
  const int64_t held = known == workers_.end() ? 0 : known->second.held;
  const int64_t ready = std::clamp<int64_t>(ahead, 0, kMaxTakeAhead);
  if (held >= config_.num_clients + ready) {
    return absl::FailedPreconditionError(absl::StrCat(
        "queue '", config_.name, "': worker '", worker, "' already holds ",
        held, " item(s), the limit (num_clients=", config_.num_clients,
        ready > 0 ? absl::StrCat(" + ", ready, " kept ready") : "",
        "); complete or release one first"));
  }
  TakeResult result;
  const std::optional<Ref> front = PeekFront();
  if (!front.has_value()) {
    result.outcome = Finished() ? TakeOutcome::kEndOfInput : TakeOutcome::kWait;
    if (result.outcome == TakeOutcome::kWait && config_.split) {
      result.proposed_lease = ProposeSplit(worker, now);
    } else if (result.outcome == TakeOutcome::kWait) {
      // Splitting off: an item another worker keeps ready and has not
      // started still goes back whole (nothing is cut), so take-ahead does
      // not make a long tail.
      result.proposed_lease = ProposeGiveBack(worker).value_or(0);
    }
    return result;
  }
  const Ref ref = *front;
  journal::Update update = NewUpdate(now);
  journal::Lease* lease = update.mutable_lease();
  lease->set_lease_id(MakeLeaseId(ref));
  lease->set_worker(std::string(worker));
  lease->set_epoch(ref.epoch);
  lease->set_index(ref.index);
  if (absl::Status s = Commit(update); !s.ok()) return s;
  result.outcome = TakeOutcome::kItem;
  result.item.item = ItemString(ref);
  result.item.epoch = ref.epoch;
  result.item.index = ref.index;
  result.item.lease_id = lease->lease_id();
  result.item.work_size = items_->WorkSize(PlannedIndex(ref));
  return result;
}

absl::StatusOr<CompleteOutcome> QueueState::Complete(absl::string_view worker,
                                                     uint64_t lease_id,
                                                     absl::Time now, int64_t records) {
  if (records < 0 || records > kMaxRecordsPerItem) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config_.name, "': worker '", worker, "' completes lease ", lease_id,
        " with records ", records, "; it must be in [0, ", kMaxRecordsPerItem, "]"));
  }
  auto it = leases_.find(lease_id);
  if (it != leases_.end() && it->second.worker != worker) {
    ++refused_completions_;
    return absl::PermissionDeniedError(absl::StrCat(
        "queue '", config_.name, "': worker '", worker, "' completes lease ", lease_id,
        ", which is held by worker '", it->second.worker, "'"));
  }
  if (it == leases_.end()) {
    const EndedLeases::Lease* ended = ended_.Find(lease_id);
    if (ended == nullptr) {
      ++refused_completions_;
      return absl::NotFoundError(absl::StrCat(
          "queue '", config_.name, "': worker '", worker, "' completes lease ", lease_id,
          ", which this queue never handed out (or which ended more than ",
          kEndedLeasesKept, " leases ago)"));
    }
    const EndedLeases::Lease& e = *ended;
    const std::string& holder = ended_.worker(e);
    if (!holder.empty() && holder != worker) {
      ++refused_completions_;
      return absl::PermissionDeniedError(absl::StrCat(
          "queue '", config_.name, "': worker '", worker, "' completes lease ", lease_id,
          ", which was handed out to worker '", holder, "'"));
    }
    // The holder repeating its completion (its answer was lost): "already
    // completed, this changed nothing", and nothing is counted or journaled.
    if (e.how == LeaseEnd::kCompleted || e.how == LeaseEnd::kDuplicate) {
      return CompleteOutcome::kDuplicate;
    }
  }
  journal::Update update = NewUpdate(now);
  update.mutable_complete()->set_lease_id(lease_id);
  update.mutable_complete()->set_worker(std::string(worker));
  if (records > 0) update.mutable_complete()->set_records(records);
  CompleteOutcome outcome = CompleteOutcome::kCompleted;
  if (absl::Status s = Commit(update, &outcome); !s.ok()) return s;
  return outcome;
}

absl::StatusOr<QueueState::Lease*> QueueState::HeldBy(absl::string_view worker,
                                                     uint64_t lease_id) {
  auto it = leases_.find(lease_id);
  if (it == leases_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "queue '", config_.name, "': lease ", lease_id,
        " is not held (expired, completed or unknown)"));
  }
  if (it->second.worker != worker) {
    return absl::PermissionDeniedError(absl::StrCat(
        "queue '", config_.name, "': lease ", lease_id, " is held by worker '",
        it->second.worker, "', not '", worker, "'"));
  }
  return &it->second;
}

absl::Status QueueState::Release(absl::string_view worker, uint64_t lease_id,
                                 absl::Time now) {
  if (absl::StatusOr<Lease*> held = HeldBy(worker, lease_id); !held.ok()) {
    return held.status();
  }
  journal::Update update = NewUpdate(now);
  update.mutable_release()->set_lease_id(lease_id);
  return Commit(update);
}

absl::Status QueueState::ReportProgress(absl::string_view worker, uint64_t lease_id,
                                        int64_t offset, absl::Time now) {
  absl::StatusOr<Lease*> held = HeldBy(worker, lease_id);
  if (!held.ok()) return held.status();
  if (offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config_.name, "': progress offset ", offset, " is negative"));
  }
  Lease& lease = **held;
  if (offset <= lease.progress) return absl::OkStatus();
  if (lease.first_progress < 0) {
    lease.first_progress = offset;
    lease.first_progress_time = now;
  }
  lease.progress = offset;
  lease.progress_time = now;
  // The worker's rate over this lease so far feeds the split point of the
  // proposals it asks for (an exponentially weighted mean over reports).
  if (lease.start >= 0 && lease.granted != absl::InfinitePast() && now > lease.granted &&
      offset > lease.start) {
    const double rate = static_cast<double>(offset - lease.start) /
                        absl::ToDoubleSeconds(now - lease.granted);
    WorkerRecord& w = Worker(worker);
    if (w.unit_rate > 0) {
      rate_sum_ -= w.unit_rate;
      w.unit_rate = 0.5 * w.unit_rate + 0.5 * rate;
    } else {
      ++rate_count_;
      w.unit_rate = rate;
    }
    rate_sum_ += w.unit_rate;
  }
  return absl::OkStatus();
}

HeartbeatReply QueueState::Heartbeat(absl::string_view worker,
                                     const std::vector<uint64_t>& lease_ids,
                                     absl::Time now) {
  HeartbeatReply reply;
  for (uint64_t id : lease_ids) {
    auto it = leases_.find(id);
    if (it == leases_.end() || it->second.worker != worker) {
      reply.lost.push_back(id);
      continue;
    }
    deadlines_.erase({it->second.deadline, id});
    it->second.deadline = now + config_.lease_timeout;
    deadlines_.insert({it->second.deadline, id});
    if (it->second.proposal >= 0) {
      reply.splits.push_back({id, it->second.proposal, config_.split_min_residual});
    }
  }
  return reply;
}

void QueueState::ResetDeadlines(absl::Time now) {
  deadlines_.clear();
  for (auto& [id, lease] : leases_) {
    lease.deadline = now + config_.lease_timeout;
    lease.granted = now;
    deadlines_.insert({lease.deadline, id});
  }
}

void QueueState::SkipLeaseIdsAfterRecovery() {
  lease_sequence_ = (lease_sequence_ + kLeaseIdsSkippedAtRecovery) % kLeaseSequenceMask;
}

int64_t QueueState::ExpireLeases(absl::Time now) {
  int64_t count = 0;
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    if (!sessions_.empty() && KeepAliveBySession(deadlines_.begin()->second, now)) continue;
    journal::Update update = NewUpdate(now);
    update.mutable_expire()->set_lease_id(deadlines_.begin()->second);
    // Cannot fail: the lease is in the table.
    Commit(update).IgnoreError();
    ++count;
  }
  return count;
}

absl::Time QueueState::NextDeadline() const {
  return deadlines_.empty() ? absl::InfiniteFuture() : deadlines_.begin()->first;
}

}  // namespace shardq
