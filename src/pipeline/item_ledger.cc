#include "shardq/pipeline/internal/item_ledger.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shardq/item_source.h"
#include "src/log/log.h"

namespace shardq::pipeline::internal {

ItemLedger::ItemLedger(ItemSource* source, LeaseSource* leases,
                       LedgerOptions options)
    : source_(source), leases_(leases), options_(std::move(options)) {}

void ItemLedger::Start(ThreadCoordinator* coordinator) {
  coordinator_ = coordinator;
  coordinator->AddStopCallback([this] {
    cancel_takes_.store(true, std::memory_order_release);
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_cv_.SignalAll();
    fetch_cv_.SignalAll();
  });
  coordinator->Launch(absl::StrCat(options_.name, " item fetcher"),
                      [this] { return FetchLoop(); });
}

bool ItemLedger::AtLimitLocked() const {
  return options_.max_items_held > 0 && held_ >= options_.max_items_held;
}

void ItemLedger::ChangedLocked() {
  ++changes_;
  changed_cv_.SignalAll();
}

absl::Status ItemLedger::FetchLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && !end_ && fetch_error_.ok() &&
             (fetched_.has_value() || AtLimitLocked())) {
        fetch_cv_.Wait(&mu_);
      }
      if (stopping_ || end_ || !fetch_error_.ok()) return absl::OkStatus();
      ++held_;  // reserved for the item being fetched
      fetching_ = true;
      ChangedLocked();
    }
    bool stopped = false;
    absl::StatusOr<WorkItem> item = FetchOne(&stopped);
    // The item after this one is on its way (a remote object's first
    // bytes) while this one is read, when the source has it at hand.
    if (item.ok() && options_.open_ahead) {
      if (std::optional<WorkItem> next = source_->PeekNextItem()) options_.open_ahead(*next);
    }
    absl::MutexLock lock(&mu_);
    fetching_ = false;
    dry_ = false;
    if (item.ok()) {
      if (leases_ != nullptr) held_items_[item->lease_id] = *item;
      fetched_ = *std::move(item);
      ++stats_.items_taken;
    } else {
      --held_;
      if (stopped || stopping_) return absl::OkStatus();
      if (absl::IsOutOfRange(item.status())) {
        end_ = true;
      } else {
        fetch_error_ = absl::Status(
            item.status().code(),
            absl::StrCat(options_.name, ": taking the next item: ",
                         item.status().message()));
      }
    }
    ChangedLocked();
  }
}

absl::StatusOr<WorkItem> ItemLedger::FetchOne(bool* stopped) {
  if (leases_ == nullptr) return source_->NextItem();
  absl::StatusOr<WorkItem> item = TakeFromQueue(stopped);
  if (!item.ok() || options_.max_epoch < 0 || item->epoch <= options_.max_epoch) {
    return item;
  }
  // The next item belongs to a later epoch: this pass is over. Given back
  // whole, so that the pass of its epoch reads it.
  if (absl::Status s = leases_->Release(*item); !s.ok()) return s;
  return absl::OutOfRangeError(absl::StrCat(
      options_.name, ": the items of epochs <= ", options_.max_epoch,
      " are all taken (the next one is of epoch ", item->epoch, ")"));
}

absl::StatusOr<WorkItem> ItemLedger::TakeFromQueue(bool* stopped) {
  // A first take that does not wait tells "dry" (nothing to hand out now)
  // from "an item is on its way".
  absl::StatusOr<WorkItem> item = leases_->TakeWithinUnless(absl::ZeroDuration(), &cancel_takes_);
  if (!absl::IsDeadlineExceeded(item.status())) return item;
  {
    absl::MutexLock lock(&mu_);
    dry_ = true;
    ChangedLocked();
  }
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) {
        *stopped = true;
        return absl::CancelledError("pipeline stopping");
      }
    }
    item = leases_->TakeWithinUnless(options_.take_poll_interval, &cancel_takes_);
    if (!absl::IsDeadlineExceeded(item.status())) return item;
  }
}

ItemLedger::Poll ItemLedger::TryTakeItem(std::shared_ptr<ItemTicket>* ticket,
                                         absl::Status* error) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return Poll::kStopped;
  if (fetched_.has_value()) {
    *ticket = std::shared_ptr<ItemTicket>(new ItemTicket(*std::move(fetched_)));
    live_.emplace(ticket->get(), *ticket);
    fetched_.reset();
    fetch_cv_.Signal();
    return Poll::kItem;
  }
  if (!fetch_error_.ok()) {
    *error = fetch_error_;
    return Poll::kError;
  }
  if (end_) return Poll::kEnd;
  if (dry_) return Poll::kNoItemNow;
  if (fetching_) return Poll::kPending;
  if (AtLimitLocked()) return Poll::kNoItemNow;
  return Poll::kPending;  // the fetcher is about to start
}

void ItemLedger::Emit(const std::vector<EmitRun>& runs,
                      const std::vector<int64_t>& offsets) {
  absl::MutexLock lock(&mu_);
  for (const EmitRun& run : runs) {
    ItemTicket& ticket = *run.ticket;
    const int64_t n = static_cast<int64_t>(run.count);
    ticket.emitted_ += n;
    in_flight_ += n;
    stats_.records_read += n;
    for (size_t k = 0; k < run.count; ++k) {
      ticket.progress_.push_back({offsets[run.begin + k], false});
    }
  }
}

std::shared_ptr<ItemTicket> ItemLedger::RetireIfSettledLocked(
    ItemTicket& ticket) {
  if (!ticket.done_ || ticket.consumed_ != ticket.emitted_ || ticket.early_ != 0) {
    return nullptr;
  }
  auto it = live_.find(&ticket);
  if (it == live_.end()) return nullptr;
  std::shared_ptr<ItemTicket> retired = std::move(it->second);
  live_.erase(it);
  return retired;
}

absl::Status ItemLedger::FinishReading(
    const std::shared_ptr<ItemTicket>& ticket) {
  {
    absl::MutexLock lock(&mu_);
    ticket->read_all_ = true;
    if (ticket->done_ ||
        (!options_.complete_when_read && ticket->consumed_ != ticket->emitted_)) {
      return absl::OkStatus();
    }
    ticket->done_ = true;
    ++completing_;
    // The caller holds the ticket: it stays alive through CompleteItems.
    RetireIfSettledLocked(*ticket);
  }
  return CompleteItems({ticket});
}

void ItemLedger::SetReaderIdle(bool idle) {
  absl::MutexLock lock(&mu_);
  if (idle && !reader_idle_) ++stats_.stalls;
  reader_idle_ = idle;
  reader_idle_hint_.store(idle, std::memory_order_release);
}

ItemLedger::WaitingHold::WaitingHold(ItemLedger* ledger, int64_t records)
    : ledger_(ledger),
      records_(ledger != nullptr && records > 0 && ledger->reader_idle_hint()
                   ? records
                   : 0) {
  if (records_ > 0) ledger_->AddWaitingHold(records_);
}

ItemLedger::WaitingHold::~WaitingHold() {
  if (records_ > 0) ledger_->AddWaitingHold(-records_);
}

void ItemLedger::AddWaitingHold(int64_t records) {
  absl::MutexLock lock(&mu_);
  waiting_held_ += records;
  ChangedLocked();
}

uint64_t ItemLedger::change_count() const {
  absl::MutexLock lock(&mu_);
  return changes_;
}

uint64_t ItemLedger::AwaitChange(uint64_t seen) {
  absl::MutexLock lock(&mu_);
  while (!stopping_ && changes_ == seen) changed_cv_.Wait(&mu_);
  return changes_;
}

bool ItemLedger::ConsumeLocked(ItemTicket& ticket, int64_t seq,
                               int64_t* progress) {
  ++ticket.consumed_;
  --in_flight_;
  ++stats_.records_consumed;
  const int64_t index = seq - ticket.in_order_;
  if (index >= 0 && index < static_cast<int64_t>(ticket.progress_.size())) {
    ticket.progress_[static_cast<size_t>(index)].consumed = true;
  }
  while (!ticket.progress_.empty() && ticket.progress_.front().consumed) {
    *progress = ticket.progress_.front().resume_offset;
    ticket.progress_.pop_front();
    ++ticket.in_order_;
    if (*progress >= 0) {
      ticket.resume_offset_ = *progress;
      ticket.resume_in_order_ = ticket.in_order_;
    }
  }
  if (ticket.done_ || !ticket.read_all_ ||
      ticket.consumed_ != ticket.emitted_) {
    return false;
  }
  ticket.done_ = true;
  ++completing_;
  return true;
}

absl::Status ItemLedger::Consume(const RecordTags& tags) {
  return ConsumeTags(tags, /*early=*/false);
}

absl::Status ItemLedger::ConsumeEarly(RecordTags* tags) {
  int64_t records = 0;
  tags->ForEach([&](const RecordTag& tag) { records += tag.consumed_early() ? 0 : 1; });
  if (records == 0) return absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    stats_.records_consumed_early += records;
  }
  absl::Status s = ConsumeTags(*tags, /*early=*/true);
  tags->MarkConsumedEarly();
  return s;
}

bool ItemLedger::FirstTime(bool ItemLedger::*said) {
  absl::MutexLock lock(&mu_);
  return !std::exchange(this->*said, true);
}

void ItemLedger::NoteLimitStall() {
  if (!FirstTime(&ItemLedger::warned_limit_)) return;
  SHARDQ_LOG_WARN(
      "{}: reading paused: every item this pipeline may hold (max_items_held {}, by default "
      "the queue's num_clients) is read, and their records wait in later stages, which hand "
      "them on early so that more items can be taken: a shuffle buffer empties (its records "
      "then mix fewer items), a batch goes on short. Give the queue a num_clients above "
      "cycle_length to avoid it; stats() counts these pauses (stalls, shuffle_drains, "
      "short_batches). Said once per pipeline",
      options_.name, options_.max_items_held);
}

void ItemLedger::NoteEarlyHandedOn(int64_t records) {
  if (!FirstTime(&ItemLedger::warned_early_)) return;
  SHARDQ_LOG_WARN(
      "{}: every item this pipeline may hold (max_items_held {}) was read, and a batch that "
      "may not be handed on short (drop_remainder, or a split that drops short batches) "
      "needed more rows: {} of its records counted as consumed before they were returned, "
      "so that more items could be taken (a stop or crash in between loses such records; a "
      "stop logs them). Raise the queue's num_clients above cycle_length to avoid it; this "
      "is said once per pipeline, stats() counts them (records_consumed_early)",
      options_.name, options_.max_items_held, records);
}

absl::Status ItemLedger::ConsumeTags(const RecordTags& tags, bool early) {
  if (tags.empty()) return absl::OkStatus();
  std::vector<std::shared_ptr<ItemTicket>> done;
  // Tickets the ledger let go of here, alive until this call returns.
  std::vector<std::shared_ptr<ItemTicket>> retired;
  // What the consumer got so far of each item touched that is not done, in
  // first-touch order: its in-order progress, and the records returned
  // beyond it (a shuffle), for ItemSource::NoteReturned.
  struct Got {
    ItemTicket* ticket;
    // Keeps it alive past the lock: another thread consuming its last
    // records (a stage dropping a remainder) retires it meanwhile.
    std::shared_ptr<ItemTicket> keep;
    int64_t offset = -1;
    int64_t in_order = 0;
    int64_t returned = 0;
  };
  std::vector<Got> got;
  {
    absl::MutexLock lock(&mu_);
    tags.ForEach([&](const RecordTag& tag) {
      int64_t offset = -1;
      ItemTicket& ticket = *tag.ticket;
      if (tag.consumed_early()) {
        if (early) return;  // counted already
        // Returned at last: only the early count settles.
        --ticket.early_;
        std::shared_ptr<ItemTicket> settled = RetireIfSettledLocked(ticket);
        if (settled != nullptr) retired.push_back(std::move(settled));
        return;
      }
      if (early) ++ticket.early_;
      const bool was_done = ticket.done_;  // completed when read
      const bool now_done = ConsumeLocked(ticket, tag.seq, &offset);
      // Settled when done now (this was its last record), or done earlier
      // (complete_when_read) and this was its last record in flight.
      std::shared_ptr<ItemTicket> settled = RetireIfSettledLocked(ticket);
      // (Done with records counted early still out: the ledger keeps it.)
      if (now_done) done.push_back(settled != nullptr ? settled : live_.at(&ticket));
      if (settled != nullptr) retired.push_back(std::move(settled));
      if (!now_done && !was_done) {
        // Few items are in flight at once: a linear search.
        auto it = std::find_if(got.begin(), got.end(),
                               [&](const Got& g) { return g.ticket == tag.ticket; });
        if (it == got.end()) got.push_back(Got{tag.ticket, live_.at(tag.ticket)});
      }
    });
    for (Got& g : got) {
      g.offset = g.ticket->resume_offset_;
      g.in_order = g.ticket->resume_in_order_;
      g.returned = g.ticket->consumed_ + g.ticket->deferred_;
    }
    ChangedLocked();
  }
  // Tickets stay alive: `retired`, `done` and `got` hold them.
  for (const Got& g : got) {
    bool finished = false;
    for (const auto& d : done) finished = finished || d.get() == g.ticket;
    if (!finished) source_->NoteReturned(g.ticket->item(), g.offset, g.in_order, g.returned);
  }
  if (done.empty()) return absl::OkStatus();
  return CompleteItems(done);
}

absl::Status ItemLedger::CompleteItems(
    const std::vector<std::shared_ptr<ItemTicket>>& done) {
  absl::Status first_error;
  std::vector<int64_t> records;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& ticket : done) records.push_back(ticket->emitted_);
  }
  for (size_t i = 0; i < done.size(); ++i) {
    const std::shared_ptr<ItemTicket>& ticket = done[i];
    // The records read from it go with the completion (records/s).
    WorkItem item = ticket->item();
    item.records = records[i];
    absl::Status s = source_->ItemDone(item);
    if (!s.ok() && first_error.ok()) {
      first_error = absl::Status(
          s.code(), absl::StrCat(options_.name, ": completing item '",
                                 ticket->item().item, "': ", s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  const int64_t n = static_cast<int64_t>(done.size());
  for (const auto& ticket : done) held_items_.erase(ticket->item().lease_id);
  completing_ -= n;
  held_ -= n;
  stats_.items_completed += n;
  fetch_cv_.Signal();
  ChangedLocked();
  return first_error;
}

StallReason ItemLedger::Stalled(int64_t own_records) const {
  absl::MutexLock lock(&mu_);
  if (!reader_idle_ || completing_ > 0 || fetched_.has_value() ||
      in_flight_ == 0 || in_flight_ != waiting_held_ + own_records || end_ ||
      !fetch_error_.ok()) {
    return StallReason::kNone;
  }
  if (dry_) return StallReason::kDry;
  if (fetching_) return StallReason::kNone;
  if (AtLimitLocked()) return StallReason::kLimit;
  return StallReason::kNone;
}

void ItemLedger::ReleaseHeld() {
  std::map<uint64_t, WorkItem> held;
  // Items the consumer got records of: what it got, for NoteReturned.
  struct Returned {
    WorkItem item;
    int64_t offset;
    int64_t in_order;
    int64_t returned;
  };
  std::vector<Returned> returned;
  // Items completed when read (complete_when_read) whose records were still
  // here: nobody gets those.
  std::vector<std::pair<WorkItem, int64_t>> lost;
  {
    absl::MutexLock lock(&mu_);
    held.swap(held_items_);
    for (const auto& [raw, ticket] : live_) {
      // Completed when read, or records counted consumed early (both are
      // counted in consumed_), and never returned.
      const int64_t never_returned =
          (ticket->done_ ? ticket->emitted_ - ticket->consumed_ - ticket->deferred_ : 0) +
          ticket->early_;
      if (never_returned > 0) lost.emplace_back(ticket->item(), never_returned);
      const int64_t got = ticket->consumed_ + ticket->deferred_;
      if (ticket->done_ || got == 0) continue;
      returned.push_back(Returned{ticket->item(), ticket->resume_offset_,
                                  ticket->resume_in_order_, got});
    }
  }
  for (const auto& [item, records] : lost) source_->NoteLost(item, records);
  std::set<uint64_t> partly_returned;
  for (const Returned& r : returned) {
    source_->NoteReturned(r.item, r.offset, r.in_order, r.returned);
    partly_returned.insert(r.item.lease_id);
  }
  if (leases_ == nullptr) return;
  // Best effort, as in ~WorkQueue: an item whose lease is gone meanwhile
  // is back in the queue anyway. Of an item the consumer got records of,
  // only the rest goes back; then the items the queue took ahead for this
  // reader.
  std::vector<LeaseSource::StoppedItem> stopped;
  stopped.reserve(held.size());
  for (const auto& [lease, item] : held) {
    stopped.push_back(LeaseSource::StoppedItem{item, partly_returned.count(lease) > 0});
  }
  leases_->GiveBackStopped(stopped);
}

void ItemLedger::NoteDeferred(const RecordTags& tags) {
  absl::MutexLock lock(&mu_);
  tags.ForEach([](const RecordTag& tag) {
    if (tag.consumed_early()) {
      --tag.ticket->early_;  // returned: not lost
    } else {
      ++tag.ticket->deferred_;
    }
  });
}

LedgerStats ItemLedger::stats() const {
  absl::MutexLock lock(&mu_);
  LedgerStats stats = stats_;
  stats.items_held = held_ - (fetching_ ? 1 : 0);
  return stats;
}

}  // namespace shardq::pipeline::internal
