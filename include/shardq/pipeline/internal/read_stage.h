// Internal to the pipeline: the reading stage of ReadItems (dataset.h).
//
// A merging thread keeps `cycle_length` slots, each reading one item, and
// visits them in turn, handing on up to `block_length` records of a slot's
// item per visit. A slot whose item ran out takes the next item from the
// ledger in its turn (waiting for it when `deterministic`, unless none can
// come before held items complete: then it is skipped). With
// num_parallel_reads > 1, reading threads fill every slot's buffer ahead of
// the merge, so slow opens and reads overlap; the merged order is the same.
// The slots and their reading, serial or parallel, are item_slots.h; this
// file is the merge.
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
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "shardq/pipeline/queues.h"
#include "shardq/pipeline/record_reader.h"
#include "shardq/pipeline/stage_options.h"
#include "shardq/pipeline/internal/item_ledger.h"
#include "shardq/pipeline/internal/item_slots.h"
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
        options_(options),
        flush_at_(std::max<int64_t>(1, options.buffer_size / 4)),
        slots_(std::move(factory), options, &context->strings) {
    slot_emitted_.assign(slots_.size(), 0);
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
    ApplyEmits();
    return std::move(pending_[inline_next_++]);
  }
  absl::Status NextRun(int64_t max, std::vector<Tracked<R>>* out) override {
    if (!inline_) return drain_->NextRun(max, out);
    if (absl::Status s = InlineFill(); !s.ok()) return s;
    ApplyEmits();
    MoveRun(pending_, &inline_next_, max, out);
    return absl::OkStatus();
  }
  bool ReadInPullingThread() override {
    if (!slots_.parallel()) inline_ = true;
    return inline_;
  }

 private:
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
      slots_.Stop();
    });
    if (inline_) return;  // the puller's thread merges (InlineNext)
    coordinator.Launch(absl::StrCat(options_.name, " merger"),
                       [this] { return MergeLoop(); });
    slots_.LaunchReaders(coordinator);
  }

  // Hands the pending results on to the next stage. False once the output
  // is closed (the pipeline is stopping).
  bool Flush() {
    ApplyEmits();
    if (inline_ || (pending_.empty() && pending_end_.ok())) return true;
    TrackedBlock<R> out;
    out.elements.swap(pending_);
    out.end = std::exchange(pending_end_, absl::OkStatus());
    pending_.reserve(static_cast<size_t>(flush_at_ + options_.block_length));
    return out_->Enqueue(std::move(out)).ok();
  }

  // The next block of slot `i` (which has an item): up to block_length
  // records appended to pending_ from *first on (without tags), and
  // whether the item ends (or fails) right after them in block_
  // (ItemSlots::TakeBlock). False when stopping.
  bool TakeBlock(size_t i, size_t* first) {
    if (!slots_.Ready(i) && !Flush()) {
      return false;  // about to wait: hand on what is pending first
    }
    *first = pending_.size();
    return slots_.TakeBlock(i, &pending_, &block_);
  }

  // Hands on the block of slot `i` that TakeBlock appended to pending_
  // from index `first`: tags its records.
  Turn EmitBlock(size_t i, size_t first) {
    TakenBlock& block = block_;
    const std::shared_ptr<ItemTicket>& ticket = slots_.ticket(i);
    if (!block.offsets.empty()) {
      int64_t& seq = slot_emitted_[i];
      for (size_t k = first; k < pending_.size(); ++k) {
        pending_[k].tags.push_back(RecordTag{ticket.get(), seq++});
      }
      if (emit_runs_.empty() || emit_runs_.back().ticket != ticket.get()) {
        emit_runs_.push_back(
            ItemLedger::EmitRun{ticket.get(), emit_offsets_.size(), 0});
      }
      emit_runs_.back().count += block.offsets.size();
      emit_offsets_.insert(emit_offsets_.end(), block.offsets.begin(),
                           block.offsets.end());
    }
    absl::Status error = std::move(block.error);
    if (block.finished) {
      // Kept alive here: Vacate drops the slot's hold.
      const std::shared_ptr<ItemTicket> finished = ticket;
      ApplyEmits();  // FinishReading counts on every record emitted
      // Destroyed below, unlocked.
      std::unique_ptr<ItemReader<R>> reader = slots_.Vacate(i);
      if (reader != nullptr) {
        const ItemSkips skips = reader->skips();
        if (skips.corrupt_regions > 0 || skips.skipped_bytes > 0) {
          context_->corrupt_regions += skips.corrupt_regions;
          context_->skipped_bytes += skips.skipped_bytes;
        }
      }
      // Before the last records can be consumed, so that consuming the
      // last one completes the item (inside Iterator::Next). Completes
      // right away only an item without records.
      error = ledger_->FinishReading(finished);
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
        case ItemLedger::Poll::kItem:
          slots_.Assign(i, std::move(ticket));
          slot_emitted_[i] = 0;
          return poll;
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
    turn_yielded_ = true;
    return true;
  }

  // Counts the records tagged since the last call with the ledger (one
  // lock for many blocks): before they leave this stage, and before an item
  // whose records they are finishes.
  void ApplyEmits() {
    if (emit_runs_.empty()) return;
    ledger_->Emit(emit_runs_, emit_offsets_);
    emit_runs_.clear();
    emit_offsets_.clear();
  }

  // One turn of the merge: gives slot next_slot_ an item or hands on its
  // next block, then moves to the next slot; or waits while idle.
  Turn MergeStep() {
    const size_t i = next_slot_;
    bool busy = slots_.AnyHasItem();
    if (slots_.ticket(i) == nullptr && !source_ended_) {
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
    if (slots_.ticket(i) != nullptr) {
      size_t first = 0;
      if (!TakeBlock(i, &first)) return Turn::kStopped;
      if (const Turn turn = EmitBlock(i, first); turn != Turn::kGoOn) {
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

  // Inline mode: merges in the calling thread until results are pending
  // (OK: pending_[inline_next_] is the next element), or returns the
  // status that comes next: the error that ended the stream after the
  // pending elements, then OUT_OF_RANGE, or CANCELLED once the pipeline is
  // stopping. Goes on with more turns, as the merger would, until about
  // flush_at_ results are pending or a turn would wait (it yields instead)
  // or ends the stream: fewer, larger hand-offs downstream.
  absl::Status InlineFill() {
    if (inline_next_ < pending_.size()) return absl::OkStatus();
    pending_.clear();
    inline_next_ = 0;
    while (true) {
      if (!pending_.empty()) return absl::OkStatus();
      if (!pending_end_.ok()) return std::exchange(pending_end_, absl::OkStatus());
      if (!inline_end_.ok()) return inline_end_;
      turn_yielded_ = false;
      Turn turn = InlineTurn();
      while (turn == Turn::kGoOn && !turn_yielded_ &&
             static_cast<int64_t>(pending_.size()) < flush_at_ &&
             pending_end_.ok() && inline_end_.ok() &&
             (pending_.empty() || !pending_.back().marker)) {
        turn = InlineTurn();
      }
    }
  }

  // One turn of the merge in inline mode; sets inline_end_ once the
  // stream ends.
  Turn InlineTurn() {
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
    return turn;
  }

  PipelineContext* const context_;
  ItemLedger* const ledger_;
  const InterleaveOptions options_;
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
  TakenBlock block_;  // the merge's, reused (see TakeBlock)
  // Records tagged and not yet counted by the ledger (see ApplyEmits): runs
  // of one item each, and their resume offsets.
  std::vector<ItemLedger::EmitRun> emit_runs_;
  std::vector<int64_t> emit_offsets_;
  // Per slot: the records of its item tagged so far (the next one's
  // sequence number).
  std::vector<int64_t> slot_emitted_;
  // The merge's state between turns (merger or, inline, the puller only).
  bool inline_ = false;  // set before the pipeline starts
  size_t inline_next_ = 0;
  absl::Status inline_end_;  // inline: what Next() returns after the end
  bool yielded_ = false;     // the turn ended early, for pending results
  bool turn_yielded_ = false;  // inline: a turn yielded since InlineFill asked
  size_t next_slot_ = 0;
  bool source_ended_ = false;
  absl::Status end_status_ = absl::OutOfRangeError("end of data");
  // Idle: the ledger's change count when the last marker was sent.
  // -1: not idle.
  int64_t marker_state_ = -1;
  // The cycle's slots, each reading one item (item_slots.h).
  ItemSlots<R> slots_;
};

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_READ_STAGE_H_
