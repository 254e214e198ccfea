// Tail rebalancing in QueueState: split proposals, the holder's answer and
// the journaled split (see "tail rebalancing" at the top of queue_state.h).
// Pure: no I/O.
#include <algorithm>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/core/queue_state.h"

namespace shardq {

namespace {

// Where a lease's reader is now, how fast it goes and where its range ends,
// as far as the coordinator can tell.
struct Estimate {
  int64_t start = 0;
  int64_t end = 0;
  double position = 0;
  double rate = 0;  // units per second; 0: unknown
};

}  // namespace

void QueueState::ParseRange(Lease& lease) const {
  const ItemRange range = RangeOf(lease.ref);
  if (range.full()) {
    lease.start = range.start;
    lease.end = range.end;
  } else {
    lease.start = lease.end = -1;
  }
}

std::optional<uint64_t> QueueState::ProposeGiveBack(absl::string_view asker) {
  Lease* best = nullptr;
  uint64_t best_id = 0;
  for (auto& [id, lease] : leases_) {
    if (lease.proposal >= 0) {
      if (lease.proposed_for == asker) return 0;  // one proposal per asker
      continue;
    }
    // Not started: no progress reported past its start (a reader reports
    // the offset it has consumed up to). An item without a range (a whole
    // file) reports none: only one known to be kept ready is given back.
    if (lease.no_split || lease.worker == asker || lease.progress > lease.start ||
        (lease.start < 0 && !lease.ahead)) {
      continue;
    }
    // One of several held items, or one granted beyond num_clients: a
    // lone item granted within num_clients may be being read already.
    auto holder = workers_.find(lease.worker);
    if (holder == workers_.end() || (holder->second.held < 2 && !lease.ahead)) continue;
    // The holder reads its items in the order it got them: the last one
    // granted is the furthest from being started (at the same time, the
    // later lease sequence number, the low bits of its id).
    constexpr uint64_t kSequenceBits = (uint64_t{1} << 20) - 1;
    if (best != nullptr &&
        (lease.granted < best->granted ||
         (lease.granted == best->granted && (id & kSequenceBits) < (best_id & kSequenceBits)))) {
      continue;
    }
    best = &lease;
    best_id = id;
  }
  if (best == nullptr) return std::nullopt;
  // Its start; 0 for an item without a range, which its holder gives back
  // with a release.
  best->proposal = std::max<int64_t>(best->start, 0);
  best->proposed_for = std::string(asker);
  return best_id;
}

uint64_t QueueState::ProposeSplit(absl::string_view asker, absl::Time now) {
  // Take-ahead first: an item a busy worker has not started goes to the
  // asker whole, before anything is cut.
  if (std::optional<uint64_t> id = ProposeGiveBack(asker); id.has_value()) return *id;
  const int64_t min_residual = config_.split_min_residual;
  Lease* best = nullptr;
  uint64_t best_id = 0;
  double best_finish = 0;  // seconds from now
  int64_t best_point = -1;
  auto asker_record = workers_.find(asker);
  double asker_rate = asker_record != workers_.end() ? asker_record->second.unit_rate : 0;
  if (asker_rate <= 0 && rate_count_ > 0) {
    asker_rate = rate_sum_ / static_cast<double>(rate_count_);
  }
  for (auto& [id, lease] : leases_) {
    if (lease.proposal >= 0) {
      if (lease.proposed_for == asker) return 0;  // one proposal per asker
      continue;
    }
    if (lease.no_split || lease.start < 0 || lease.worker == asker) continue;
    Estimate e;
    e.start = lease.start;
    e.end = lease.end;
    e.position = static_cast<double>(e.start);
    if (lease.progress >= 0) {
      const double seconds = absl::ToDoubleSeconds(lease.progress_time - lease.granted);
      if (lease.first_progress >= 0 && lease.progress_time > lease.first_progress_time) {
        e.rate = static_cast<double>(lease.progress - lease.first_progress) /
                 absl::ToDoubleSeconds(lease.progress_time - lease.first_progress_time);
      } else if (seconds > 0) {
        e.rate = static_cast<double>(lease.progress - e.start) / seconds;
      }
      e.position = static_cast<double>(lease.progress) +
                   e.rate * absl::ToDoubleSeconds(now - lease.progress_time);
    }
    e.position = std::min(e.position, static_cast<double>(e.end));
    const double left = static_cast<double>(e.end) - e.position;
    if (left < static_cast<double>(2 * min_residual)) continue;
    // Unknown rates (no progress yet): assume the asker's pace, and split
    // what is left in half.
    const double holder_rate = e.rate > 0 ? e.rate : asker_rate;
    const double finish = holder_rate > 0 ? left / holder_rate : left;
    if (best != nullptr && finish <= best_finish) continue;
    // Both finish together: the holder reads [position, S) at its rate,
    // the asker [S, end) at its own.
    const double share = (holder_rate > 0 && asker_rate > 0)
                             ? holder_rate / (holder_rate + asker_rate)
                             : 0.5;
    int64_t point = static_cast<int64_t>(e.position + left * share);
    point = std::max(point, static_cast<int64_t>(e.position) + min_residual);
    point = std::min(point, e.end - min_residual);
    if (point <= e.start || point >= e.end) continue;
    best = &lease;
    best_id = id;
    best_finish = finish;
    best_point = point;
  }
  if (best == nullptr) return 0;
  best->proposal = best_point;
  best->proposed_for = std::string(asker);
  return best_id;
}

absl::StatusOr<bool> QueueState::AcceptSplit(absl::string_view worker, uint64_t lease_id,
                                             int64_t split_point, absl::Time now) {
  absl::StatusOr<Lease*> held = HeldBy(worker, lease_id);
  if (!held.ok()) return held.status();
  Lease& lease = **held;
  const int64_t proposed = lease.proposal;
  lease.proposal = -1;
  lease.proposed_for.clear();
  if (split_point < 0) {
    if (proposed == std::max<int64_t>(lease.start, 0) && lease.ahead) {
      // A give-back refused: the holder is reading the item (and has not
      // reported it yet). It may still be split later.
      lease.ahead = false;
    } else {
      lease.no_split = true;
    }
    return false;
  }
  if (lease.start >= 0 && split_point == lease.start) {
    // An item taken ahead and not started, given back whole: a release.
    if (lease.progress > lease.start) {
      return absl::InvalidArgumentError(absl::StrCat(
          "queue '", config_.name, "': lease ", lease_id, " cannot be given back whole at ",
          split_point, ": its holder reported reading it up to ", lease.progress));
    }
    journal::Update update = NewUpdate(now);
    update.mutable_release()->set_lease_id(lease_id);
    update.mutable_release()->set_given_back(true);
    if (absl::Status s = Commit(update); !s.ok()) return s;
    return true;
  }
  if (!config_.split) {
    // Splitting is off for this queue: a holder that stopped mid-item
    // (WorkQueue::ReleaseRest) gives the item back whole instead.
    return false;
  }
  const ItemRange range = RangeOf(lease.ref);
  if (!range.full() || split_point <= range.start || split_point >= range.end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config_.name, "': split point ", split_point, " of lease ", lease_id,
        " is not inside its item '", ItemString(lease.ref), "'"));
  }
  if (proposed >= 0 && split_point < proposed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", config_.name, "': split point ", split_point, " of lease ", lease_id,
        " is before the proposed ", proposed));
  }
  if (!SlotFits(Slot(Ref{0, num_items() + static_cast<int64_t>(extras_.size())}))) {
    lease.no_split = true;
    return false;
  }
  journal::Update update = NewUpdate(now);
  update.mutable_split()->set_lease_id(lease_id);
  update.mutable_split()->set_split_point(split_point);
  if (absl::Status s = Commit(update); !s.ok()) return s;
  return true;
}

absl::Status QueueState::ApplySplit(const journal::Split& split) {
  auto it = leases_.find(split.lease_id());
  if (it == leases_.end()) {
    return absl::DataLossError(absl::StrCat("queue '", config_.name,
                                            "': journal splits unknown lease ",
                                            split.lease_id()));
  }
  const Ref ref = it->second.ref;
  const ItemRange range = RangeOf(ref);
  if (!range.full() || split.split_point() <= range.start || split.split_point() >= range.end) {
    return absl::DataLossError(absl::StrCat("queue '", config_.name, "': journal splits lease ",
                                            split.lease_id(), " at ", split.split_point(),
                                            " outside its item"));
  }
  extras_.push_back(
      Extra{ref.epoch, PlannedIndex(ref), ItemRange{split.split_point(), range.end}, false});
  SetRange(ref, ItemRange{range.start, split.split_point()});
  pending_.push_front(Ref{ref.epoch, num_items() + static_cast<int64_t>(extras_.size()) - 1});
  it->second.end = split.split_point();
  it->second.proposal = -1;
  it->second.proposed_for.clear();
  ++splits_;
  return absl::OkStatus();
}

// Snapshots' ranges of planned items (split heads, restored residuals).
absl::Status QueueState::LoadRanges(const journal::QueueSnapshot& snapshot,
                                    const std::string& what) {
  for (const auto& [slot, item] : snapshot.overrides()) {  // format 1
    if (slot < 0 || slot >= total_work()) {
      return absl::DataLossError(absl::StrCat(what, ": override slot out of range"));
    }
    absl::StatusOr<ItemRange> range = RangeFromString(slot % num_items(), item);
    if (!range.ok()) return absl::DataLossError(absl::StrCat(what, ": ", range.status().message()));
    overrides_[slot] = *range;
  }
  for (const journal::RangeOverride& o : snapshot.range_overrides()) {
    if (o.slot() < 0 || o.slot() >= total_work() || o.start() < -1 || o.end() < -1) {
      return absl::DataLossError(absl::StrCat(what, ": range override of slot ", o.slot(),
                                              " out of range"));
    }
    overrides_[o.slot()] = ItemRange{o.start(), o.end()};
  }
  return absl::OkStatus();
}

}  // namespace shardq
