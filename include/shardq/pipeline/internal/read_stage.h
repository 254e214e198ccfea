// Internal to the pipeline: the reading stage of ReadItems (dataset.h).
//
// A merging thread keeps `cycle_length` slots, each reading one item, and
// visits them in turn, handing on up to `block_length` records of a slot's
// item per visit. A slot whose item ran out takes the next item from the
// ledger in its turn (waiting for it when `deterministic`, unless none can
// come before held items complete: then it is skipped). With
// num_parallel_reads > 1, reading threads fill every slot's buffer ahead of
// the merge (slot i served by thread i % num_parallel_reads), so slow
// opens and reads overlap; the merged order is the same.
//
// Records go to the output queue in blocks (see pending_), and always
// before the merger waits for anything; the stages after it take them in
// runs (Stage::NextRun).
//
// Inline mode. With one read at a time (num_parallel_reads 1) and a Prefetch
// stage pulling through calling-thread stages only (see
// Stage::ReadInPullingThread), there is no merger thread: the merge runs
// in the prefetch thread, one turn per Next() until a result is pending
// (the same turns, so the same order and stall markers). Pending results
// are returned before any wait, as the merger flushes them: a thread and a
// queue hand-off per burst fewer on the hot path. When no slot has an item
// and none can be had, the merger is idle: it tells the ledger and sends
// stall markers downstream (see item_ledger.h) until an item comes or the
// data ends.
#ifndef SHARDQ_SRC_PIPELINE_READ_STAGE_H_
#define SHARDQ_SRC_PIPELINE_READ_STAGE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "shardq/pipeline/queues.h"
#include "shardq/pipeline/record_reader.h"
#include "shardq/pipeline/stage_options.h"
#include "shardq/pipeline/internal/item_ledger.h"
#include "shardq/pipeline/internal/stage.h"

namespace shardq::pipeline::internal {

template <typename R>
class ReadStage final : public Stage<R> {
 public:
  // `options` are validated and resolved (see PrepareRead). The context's
  // ledger must outlive the stage's threads.
  ReadStage(PipelineContext* context, ItemReaderFactory<R> factory,
            const InterleaveOptions& options)
      : context_(context),
        ledger_(context->ledger.get()),
        factory_(std::move(factory)),
        options_(options),
        parallel_(options.num_parallel_reads > 1),
        flush_at_(std::max<int64_t>(1, options.buffer_size / 4)),
        slots_(static_cast<size_t>(options.cycle_length)) {
    for (int64_t t = 0; t < std::max<int64_t>(1, options.num_parallel_reads);
         ++t) {
      reader_cvs_.push_back(std::make_unique<absl::CondVar>());
    }
    QueueOptions queue_options;
    queue_options.name = options.name;
    // Blocks of about flush_at_ results: buffer_size results in all.
    queue_options.capacity = std::max<int64_t>(
        1, (options.buffer_size + flush_at_ - 1) / flush_at_);
    out_ = *FifoQueue<TrackedBlock<R>>::Create(queue_options);
    drain_ = std::make_unique<BlockDrain<R>>(out_.get(), options_.name);
    context->starters.push_back([this] { Start(); });
  }

  Envelope<R> Next() override {
    if (!inline_) return drain_->Next();
    if (absl::Status s = InlineFill(); !s.ok()) return s;
    return std::move(pending_[inline_next_++]);
  }
  absl::Status NextRun(int64_t max, std::vector<Tracked<R>>* out) override {
    if (!inline_) return drain_->NextRun(max, out);
    if (absl::Status s = InlineFill(); !s.ok()) return s;
    for (int64_t n = 0; n < max && inline_next_ < pending_.size(); ++n) {
      out->push_back(std::move(pending_[inline_next_++]));
      if (out->back().marker) break;
    }
    return absl::OkStatus();
  }
  bool ReadInPullingThread() override {
    if (!parallel_) inline_ = true;
    return inline_;
  }

 private:
  struct Slot {
    std::shared_ptr<ItemTicket> ticket;  // null: the slot is empty
    // Opened lazily by the thread that reads the slot (the merger in
    // serial mode, else the slot's reading thread while `reading`); only
    // that thread touches it.
    std::unique_ptr<ItemReader<R>> reader;
    // Guarded by mu_ in parallel mode (in serial mode only the merger
    // touches them): records read ahead, their resume offsets, and how the
    // read ended.
    std::deque<R> records;
    std::deque<int64_t> offsets;
    bool reading = false;
    bool finished = false;
    absl::Status error;
  };

  // Up to `n` records of one slot, and how its item stands after them.
  struct Block {
    std::vector<R> records;
    std::vector<int64_t> offsets;
    bool finished = false;
    absl::Status error;
  };

  // How one turn of the merge (MergeStep) left the stream.
  enum class Turn {
    kGoOn,     // more to come
    kEnd,      // the data ended, or an error ended it (see end_status_)
    kFailed,   // an item failed: its error is the last result pending
    kStopped,  // the pipeline is stopping
  };

  void Start() {
    ThreadCoordinator& coordinator = context_->coordinator;
    coordinator.AddStopCallback([this] {
      out_->Close(/*cancel_pending=*/true);
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      slot_cv_.SignalAll();
      for (auto& cv : reader_cvs_) cv->SignalAll();
    });
    if (inline_) return;  // the puller's thread merges (InlineNext)
    coordinator.Launch(absl::StrCat(options_.name, " merger"),
                       [this] { return MergeLoop(); });
    if (!parallel_) return;
    for (int64_t t = 0; t < options_.num_parallel_reads; ++t) {
      coordinator.Launch(absl::StrCat(options_.name, " reader #", t),
                         [this, t] { return ReadLoop(t); });
    }
  }

  // Reads the next record of the slot's item into *record, opening its
  // reader first if needed. Called with no lock held, by the one thread
  // reading the slot. False at the item's end (*finished) or on an error
  // (*error).
  bool ReadOne(Slot& slot, const WorkItem& item, R* record, int64_t* offset,
               bool* finished, absl::Status* error) {
    if (slot.reader == nullptr) {
      absl::StatusOr<std::unique_ptr<ItemReader<R>>> reader = factory_(item);
      if (!reader.ok()) {
        *error = ItemError(item.item, reader.status());
        return false;
      }
      slot.reader = *std::move(reader);
    }
    absl::StatusOr<bool> more = slot.reader->Next(record);
    if (!more.ok()) {
      *error = ItemError(item.item, more.status());
      return false;
    }
    if (!*more) {
      *finished = true;
      return false;
    }
    *offset = slot.reader->resume_offset();
    return true;
  }

  // Reads up to `n` records of `slot` (parallel mode).
  Block ReadBlock(Slot& slot, const WorkItem& item, int64_t n) {
    Block block;
    block.records.reserve(static_cast<size_t>(std::min<int64_t>(n, 256)));
    block.offsets.reserve(static_cast<size_t>(std::min<int64_t>(n, 256)));
    int64_t offset = 0;
    while (static_cast<int64_t>(block.records.size()) < n) {
      if (!ReadOne(slot, item, &block.records.emplace_back(), &offset,
                   &block.finished, &block.error)) {
        block.records.pop_back();
        break;
      }
      block.offsets.push_back(offset);
    }
    return block;
  }

  absl::Status ItemError(const std::string& item, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(options_.name, ": item '",
                                               item, "': ", s.message()));
  }

  // Parallel mode: the body of reading thread `t`.
  absl::Status ReadLoop(int64_t t) {
    size_t next = static_cast<size_t>(t);
    while (true) {
      Slot* slot = nullptr;
      std::shared_ptr<ItemTicket> ticket;
      int64_t room = 0;
      {
        absl::MutexLock lock(&mu_);
        while (!stopping_ && (slot = FindSlotToRead(t, &next)) == nullptr) {
          reader_cvs_[static_cast<size_t>(t)]->Wait(&mu_);
        }
        if (stopping_) return absl::OkStatus();
        slot->reading = true;
        ticket = slot->ticket;
        room = options_.read_ahead - static_cast<int64_t>(slot->records.size());
      }
      Block block = ReadBlock(*slot, ticket->item(), room);
      absl::MutexLock lock(&mu_);
      slot->reading = false;
      AppendLocked(*slot, block);
      slot_cv_.Signal();  // the merger
    }
  }

  // A slot of thread `t` that has an item, room and more to read; searched
  // round robin from *next so that no slot of the thread starves.
  Slot* FindSlotToRead(int64_t t, size_t* next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const size_t stride = static_cast<size_t>(options_.num_parallel_reads);
    const size_t n = slots_.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (*next + k) % n;
      if (i % stride != static_cast<size_t>(t)) continue;
      if (NeedsReadLocked(slots_[i])) {
        *next = (i + 1) % n;
        return &slots_[i];
      }
    }
    return nullptr;
  }

  // Serial mode: the next block of `slot`, read here straight into the
  // block. The slot's buffer keeps only the one record read past the block
  // (see TakeBlock).
  void TakeSerially(Slot& slot, Block* block) {
    const size_t n = static_cast<size_t>(options_.block_length);
    block->records.reserve(n);
    block->offsets.reserve(n);
    if (!slot.records.empty()) {
      block->records.push_back(std::move(slot.records.front()));
      block->offsets.push_back(slot.offsets.front());
      slot.records.pop_front();
      slot.offsets.pop_front();
    }
    int64_t offset = 0;
    while (block->records.size() < n && !slot.finished && slot.error.ok()) {
      if (!ReadOne(slot, slot.ticket->item(), &block->records.emplace_back(),
                   &offset, &slot.finished, &slot.error)) {
        block->records.pop_back();
        break;
      }
      block->offsets.push_back(offset);
    }
    if (block->records.size() == n && !slot.finished && slot.error.ok()) {
      R ahead;
      if (ReadOne(slot, slot.ticket->item(), &ahead, &offset, &slot.finished,
                  &slot.error)) {
        slot.records.push_back(std::move(ahead));
        slot.offsets.push_back(offset);
      }
    }
    if (slot.records.empty()) {
      block->finished = slot.finished;
      block->error = slot.error;
    }
  }

  // Appends `block` to the slot's buffer. Requires mu_.
  static void AppendLocked(Slot& slot, Block& block) {
    for (size_t k = 0; k < block.records.size(); ++k) {
      slot.records.push_back(std::move(block.records[k]));
      slot.offsets.push_back(block.offsets[k]);
    }
    slot.finished = block.finished;
    slot.error = std::move(block.error);
  }

  // Whether a reading thread should refill `slot`: it has an item with
  // more to read and its buffer fell below half of read_ahead (or below
  // what the merger waits for). Refilling in bursts rather than record by
  // record keeps the wake-ups few.
  bool NeedsReadLocked(const Slot& slot) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t low = std::max(options_.block_length + 1,
                                 options_.read_ahead / 2);
    return slot.ticket != nullptr && !slot.reading && !slot.finished &&
           slot.error.ok() && static_cast<int64_t>(slot.records.size()) < low;
  }

  bool SlotReady(const Slot& slot, int64_t want) {
    absl::MutexLock lock(&mu_);
    return stopping_ || static_cast<int64_t>(slot.records.size()) >= want ||
           slot.finished || !slot.error.ok();
  }

  // Hands the pending results on to the next stage. False once the output
  // is closed (the pipeline is stopping).
  bool Flush() {
    if (inline_ || (pending_.empty() && pending_end_.ok())) return true;
    TrackedBlock<R> out;
    out.elements.swap(pending_);
    out.end = std::exchange(pending_end_, absl::OkStatus());
    pending_.reserve(static_cast<size_t>(flush_at_ + options_.block_length));
    return out_->Enqueue(std::move(out)).ok();
  }

  void WakeReaderLocked(size_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reader_cvs_[slot % reader_cvs_.size()]->Signal();
  }

  // The next block of slot `i` (which has an item): up to block_length
  // records, and whether the item ends (or fails) right after them. The
  // slot's buffer first gets one record more than a block, or the item's
  // end, so that an item ends in the visit that takes its last record
  // however far the reading got: the order does not depend on timing.
  // Serial: read here. Parallel: wait for the slot's reader.
  bool TakeBlock(size_t i, Block* block) {
    Slot& slot = slots_[i];
    const int64_t want = options_.block_length + 1;
    if (!parallel_) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return false;
      }
      TakeSerially(slot, block);
      return true;
    }
    if (!SlotReady(slot, want) && !Flush()) {
      return false;  // about to wait: hand on what is pending first
    }
    absl::MutexLock lock(&mu_);
    while (!stopping_ && static_cast<int64_t>(slot.records.size()) < want &&
           !slot.finished && slot.error.ok()) {
      slot_cv_.Wait(&mu_);
    }
    if (stopping_) return false;
    const int64_t n = std::min<int64_t>(
        options_.block_length, static_cast<int64_t>(slot.records.size()));
    block->records.reserve(static_cast<size_t>(n));
    block->offsets.reserve(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      block->records.push_back(std::move(slot.records.front()));
      block->offsets.push_back(slot.offsets.front());
      slot.records.pop_front();
      slot.offsets.pop_front();
    }
    if (slot.records.empty()) {
      block->finished = slot.finished;
      block->error = slot.error;
    }
    if (parallel_ && NeedsReadLocked(slot)) WakeReaderLocked(i);
    return true;
  }

  // Hands on `block` of slot `i`.
  Turn EmitBlock(size_t i, Block& block) {
    Slot& slot = slots_[i];
    const std::shared_ptr<ItemTicket> ticket = slot.ticket;
    if (!block.records.empty()) {
      const int64_t first = ledger_->Emit(*ticket, block.offsets);
      pending_.reserve(pending_.size() + block.records.size());
      for (size_t k = 0; k < block.records.size(); ++k) {
        Tracked<R>& tracked = pending_.emplace_back();
        tracked.value = std::move(block.records[k]);
        tracked.tags.push_back(
            RecordTag{ticket.get(), first + static_cast<int64_t>(k)});
      }
    }
    absl::Status error = std::move(block.error);
    if (block.finished) {
      std::unique_ptr<ItemReader<R>> reader;  // destroyed below, unlocked
      {
        absl::MutexLock lock(&mu_);
        reader = std::move(slot.reader);
        slot.ticket = nullptr;
        slot.finished = false;
      }
      // Before the last records can be consumed, so that consuming the
      // last one completes the item (inside Iterator::Next). Completes
      // right away only an item without records.
      error = ledger_->FinishReading(ticket);
    }
    if (!error.ok()) {
      // A failed item stays held, not done: nothing is skipped silently.
      pending_end_ = std::move(error);
      Flush();
      out_->Close();
      return Turn::kFailed;
    }
    if (static_cast<int64_t>(pending_.size()) >= flush_at_ && !Flush()) {
      return Turn::kStopped;
    }
    return Turn::kGoOn;
  }

  // Gives empty slot `i` the next item if one can be had, waiting for a
  // fetch in progress when order must be kept. Returns the last poll:
  // kItem (the slot has it), kNoItemNow / kEnd / kPending (it stays
  // empty), or kError / kStopped (*error ends the stream). *seen is the
  // ledger's change count from before that poll.
  ItemLedger::Poll FillSlot(size_t i, uint64_t* seen, absl::Status* error) {
    while (true) {
      std::shared_ptr<ItemTicket> ticket;
      *seen = ledger_->change_count();
      const ItemLedger::Poll poll = ledger_->TryTakeItem(&ticket, error);
      switch (poll) {
        case ItemLedger::Poll::kItem: {
          absl::MutexLock lock(&mu_);
          slots_[i].ticket = std::move(ticket);
          if (parallel_) WakeReaderLocked(i);
          return poll;
        }
        case ItemLedger::Poll::kStopped:
          *error = StoppingError(options_.name);
          return poll;
        case ItemLedger::Poll::kPending:
          if (!options_.deterministic) return poll;
          if (!Flush()) {
            *error = StoppingError(options_.name);
            return ItemLedger::Poll::kStopped;
          }
          if (YieldInsteadOfWaiting()) return poll;
          ledger_->AwaitChange(*seen);
          break;
        default:
          return poll;
      }
    }
  }

  // Idle: no slot has an item and none can be had until held items
  // complete. Sends a stall marker when the stall begins (waking stages
  // blocked before it, so that they declare what they hold) and whenever
  // the pipeline is stalled in a state no marker was sent for; then waits
  // for the ledger to change. False when stopping.
  bool AwaitWhileIdle(uint64_t seen, int64_t* marker_state) {
    bool send = false;
    if (*marker_state < 0) {
      ledger_->SetReaderIdle(true);
      send = true;
    } else if (static_cast<int64_t>(seen) != *marker_state &&
               ledger_->Stalled(0) != StallReason::kNone) {
      send = true;
    }
    if (send) {
      *marker_state = static_cast<int64_t>(seen);
      pending_.push_back(Tracked<R>::Marker());
    }
    if (!Flush()) return false;
    if (!YieldInsteadOfWaiting()) ledger_->AwaitChange(seen);
    return true;
  }

  // Inline mode, at a point where the merger would wait: true (and the
  // turn ends, to be taken again) while results are pending, so that the
  // puller gets them first. Never in threaded mode, where Flush() has
  // handed them on.
  bool YieldInsteadOfWaiting() {
    if (!inline_ || pending_.empty()) return false;
    yielded_ = true;
    return true;
  }

  // One turn of the merge: gives slot next_slot_ an item or hands on its
  // next block, then moves to the next slot; or waits while idle.
  Turn MergeStep() {
    const size_t i = next_slot_;
    bool busy = false;  // some slot has an item
    for (const Slot& slot : slots_) busy = busy || slot.ticket != nullptr;
    if (slots_[i].ticket == nullptr && !source_ended_) {
      uint64_t seen = 0;
      absl::Status error;
      const ItemLedger::Poll poll = FillSlot(i, &seen, &error);
      if (yielded_) {
        yielded_ = false;
        return Turn::kGoOn;  // the same slot again, once pending is taken
      }
      if (poll == ItemLedger::Poll::kItem) {
        busy = true;
        if (marker_state_ >= 0) ledger_->SetReaderIdle(false);
        marker_state_ = -1;
      } else if (poll == ItemLedger::Poll::kEnd) {
        source_ended_ = true;
      } else if (poll == ItemLedger::Poll::kError ||
                 poll == ItemLedger::Poll::kStopped) {
        end_status_ = std::move(error);
        return Turn::kEnd;
      } else if (!busy) {
        // kNoItemNow or (non-deterministic) kPending with nothing to read.
        if (poll == ItemLedger::Poll::kPending) {
          if (!Flush()) return Turn::kStopped;
          if (!YieldInsteadOfWaiting()) ledger_->AwaitChange(seen);
        } else if (!AwaitWhileIdle(seen, &marker_state_)) {
          return Turn::kStopped;
        }
        yielded_ = false;
        return Turn::kGoOn;  // the same slot again
      }
    }
    if (slots_[i].ticket != nullptr) {
      Block block;
      if (!TakeBlock(i, &block)) return Turn::kStopped;
      if (const Turn turn = EmitBlock(i, block); turn != Turn::kGoOn) {
        return turn;
      }
    } else if (!busy && source_ended_) {
      return Turn::kEnd;
    }
    next_slot_ = (i + 1) % slots_.size();
    return Turn::kGoOn;
  }

  // The error that ended the data, if any, as the last result.
  void PushEndStatus() {
    if (!absl::IsOutOfRange(end_status_) && !absl::IsCancelled(end_status_)) {
      pending_end_ = std::move(end_status_);
    }
  }

  absl::Status MergeLoop() {
    Turn turn = Turn::kGoOn;
    while ((turn = MergeStep()) == Turn::kGoOn) {
    }
    if (turn == Turn::kEnd) {
      PushEndStatus();
      Flush();
      out_->Close();
    }
    return absl::OkStatus();
  }

  // Inline mode: merges in the calling thread until a result is pending
  // (OK: pending_[inline_next_] is the next element), or returns the
  // status that comes next: the error that ended the stream after the
  // pending elements, then OUT_OF_RANGE, or CANCELLED once the pipeline is
  // stopping.
  absl::Status InlineFill() {
    while (inline_next_ == pending_.size()) {
      pending_.clear();
      inline_next_ = 0;
      if (!pending_end_.ok()) return std::exchange(pending_end_, absl::OkStatus());
      if (!inline_end_.ok()) return inline_end_;
      Turn turn = Turn::kStopped;
      if (!context_->coordinator.ShouldStop()) turn = MergeStep();
      switch (turn) {
        case Turn::kGoOn:
          break;
        case Turn::kEnd:
          inline_end_ = absl::IsCancelled(end_status_)
                            ? StoppingError(options_.name)
                            : absl::OutOfRangeError(absl::StrCat(
                                  options_.name, ": end of data"));
          PushEndStatus();
          break;
        case Turn::kFailed:
          inline_end_ = absl::OutOfRangeError(
              absl::StrCat(options_.name, ": ended by an error"));
          break;
        case Turn::kStopped:
          inline_end_ = StoppingError(options_.name);
          break;
      }
    }
    return absl::OkStatus();
  }

  PipelineContext* const context_;
  ItemLedger* const ledger_;
  const ItemReaderFactory<R> factory_;
  const InterleaveOptions options_;
  const bool parallel_;
  // Flushed blocks of pending_, in order.
  std::unique_ptr<FifoQueue<TrackedBlock<R>>> out_;
  std::unique_ptr<BlockDrain<R>> drain_;  // the consumer's side of out_
  // Merger only: results not yet handed to out_. The merger hands them on
  // in bursts of flush_at_ (fewer wake-ups of the next stage), and always
  // before it waits for anything. Inline mode: the results Next() returns,
  // from pending_[inline_next_] on.
  std::vector<Tracked<R>> pending_;
  absl::Status pending_end_;  // an error that follows pending_, ending it
  const int64_t flush_at_;
  // The merge's state between turns (merger or, inline, the puller only).
  bool inline_ = false;  // set before the pipeline starts
  size_t inline_next_ = 0;
  absl::Status inline_end_;  // inline: what Next() returns after the end
  bool yielded_ = false;     // the turn ended early, for pending results
  size_t next_slot_ = 0;
  bool source_ended_ = false;
  absl::Status end_status_ = absl::OutOfRangeError("end of data");
  // Idle: the ledger's change count when the last marker was sent.
  // -1: not idle.
  int64_t marker_state_ = -1;
  absl::Mutex mu_;
  absl::CondVar slot_cv_;  // the merger waits for a slot's records
  // Reading thread t waits on reader_cvs_[t] for one of its slots to need
  // a read.
  std::vector<std::unique_ptr<absl::CondVar>> reader_cvs_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The vector never changes size; the fields of a Slot are guarded as
  // described in Slot.
  std::vector<Slot> slots_;
};

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_READ_STAGE_H_
