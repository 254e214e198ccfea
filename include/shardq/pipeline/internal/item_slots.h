// Internal to the pipeline: the slots of the reading stage (read_stage.h),
// each reading one item through its ItemReader, and how they are read.
//
// Serial (num_parallel_reads 1): the merging thread reads a slot's next
// block itself when it takes it (TakeBlock). Parallel: reading threads fill
// every slot's buffer ahead of the merge, slot i served by thread
// i % num_parallel_reads, in bursts up to the read-ahead (read_ahead
// records, or with read_ahead 0 about kAheadBytes of records); TakeBlock
// waits for the slot's records. Either way a block is handed over only
// once the slot holds one record more than it (or the item's end), so an
// item ends in the visit that takes its last record however far the
// reading got: the merged order does not depend on timing.
//
// Thread-safety: the merge's calls (Assign, TakeBlock, Vacate, ticket,
// Ready) come from one thread at a time; the reading threads and Stop()
// may run beside them.
#ifndef SHARDQ_SRC_PIPELINE_ITEM_SLOTS_H_
#define SHARDQ_SRC_PIPELINE_ITEM_SLOTS_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "shardq/pipeline/coordinator.h"
#include "shardq/pipeline/record_reader.h"
#include "shardq/pipeline/stage_options.h"
#include "shardq/pipeline/internal/item_ledger.h"
#include "shardq/pipeline/internal/stage.h"
#include "shardq/pipeline/internal/string_pool.h"

namespace shardq::pipeline::internal {

// Up to block_length records of one slot's item, their resume offsets, and
// whether the item ends (or fails) right after them. Used between the
// reading threads and the slots' buffers (parallel mode).
template <typename R>
struct SlotBlock {
  std::vector<R> records;
  std::vector<int64_t> offsets;
  int64_t bytes = 0;  // HeldBytes of the records
  bool finished = false;
  absl::Status error;
};

// What TakeBlock says about the records it appended: their resume offsets,
// and whether the item ends (or fails) right after them. Reused from block
// to block (TakeBlock clears it).
struct TakenBlock {
  std::vector<int64_t> offsets;
  bool finished = false;
  absl::Status error;
};

// The memory a record holds, for sizing the read-ahead by bytes; 0 for a
// record type whose size is not known here (read_ahead 0 then means the
// fewest records, see ItemSlots::AheadLocked).
inline int64_t HeldBytes(const Record& r) {
  return static_cast<int64_t>(sizeof(Record) + r.key.capacity() +
                              r.value.capacity());
}
template <typename R>
int64_t HeldBytes(const R&) {
  return 0;
}

template <typename R>
class ItemSlots {
 public:
  // With read_ahead 0, a slot is read ahead up to about this many bytes of
  // records, and no fewer records than MinAhead(block_length) nor more
  // than kMaxAheadRecords.
  static constexpr int64_t kAheadBytes = 256 << 10;
  static constexpr int64_t kMaxAheadRecords = 4096;
  static int64_t MinAhead(int64_t block_length) {
    return std::max<int64_t>({64, 4 * block_length, block_length + 1});
  }

  // cycle_length empty slots; `options` are validated and resolved (see
  // PrepareRead). Records are read into strings of `pool` when it has some
  // (it must outlive the slots).
  ItemSlots(ItemReaderFactory<R> factory, const InterleaveOptions& options,
            StringPool* pool)
      : factory_(std::move(factory)),
        options_(options),
        pool_(pool),
        parallel_(options.num_parallel_reads > 1),
        min_ahead_(options.read_ahead > 0 ? options.read_ahead
                                          : MinAhead(options.block_length)),
        slots_(static_cast<size_t>(options.cycle_length)) {
    for (int64_t t = 0; t < std::max<int64_t>(1, options.num_parallel_reads);
         ++t) {
      reader_cvs_.push_back(std::make_unique<absl::CondVar>());
    }
  }

  bool parallel() const { return parallel_; }
  size_t size() const { return slots_.size(); }

  // Parallel mode: launches the reading threads on `coordinator` (none in
  // serial mode). They end once Stop() was called.
  void LaunchReaders(ThreadCoordinator& coordinator) {
    if (!parallel_) return;
    for (int64_t t = 0; t < options_.num_parallel_reads; ++t) {
      coordinator.Launch(absl::StrCat(options_.name, " reader #", t),
                         [this, t] { return ReadLoop(t); });
    }
  }

  // Wakes every wait of the reading threads and of TakeBlock, which end.
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    slot_cv_.SignalAll();
    for (auto& cv : reader_cvs_) cv->SignalAll();
  }

  // The item of slot `i`, or null when the slot is empty.
  const std::shared_ptr<ItemTicket>& ticket(size_t i) const {
    return slots_[i].ticket;
  }
  bool AnyHasItem() const {
    for (const Slot& slot : slots_) {
      if (slot.ticket != nullptr) return true;
    }
    return false;
  }

  // Gives empty slot `i` the item of `ticket` (read from its start).
  void Assign(size_t i, std::shared_ptr<ItemTicket> ticket) {
    absl::MutexLock lock(&mu_);
    slots_[i].ticket = std::move(ticket);
    if (parallel_) WakeReaderLocked(i);
  }

  // Empties slot `i` after its item finished; returns its reader, to be
  // destroyed by the caller (no lock held).
  std::unique_ptr<ItemReader<R>> Vacate(size_t i) {
    Slot& slot = slots_[i];
    absl::MutexLock lock(&mu_);
    std::unique_ptr<ItemReader<R>> reader = std::move(slot.reader);
    slot.ticket = nullptr;
    slot.finished = false;
    return reader;
  }

  // Whether TakeBlock(i) would return at once: the slot holds more than a
  // block, or its item's end, or the slots are stopping. Always true in
  // serial mode.
  bool Ready(size_t i) {
    if (!parallel_) return true;
    const Slot& slot = slots_[i];
    absl::MutexLock lock(&mu_);
    return stopping_ ||
           static_cast<int64_t>(slot.records.size()) >= Want() ||
           slot.finished || !slot.error.ok();
  }

  // The next block of slot `i` (which has an item), appended to *out as
  // elements without tags (their offsets and the item's end in *block).
  // Serial: read here, straight into *out. Parallel: waits for the slot's
  // reader (see Ready). False once stopping.
  bool TakeBlock(size_t i, std::vector<Tracked<R>>* out, TakenBlock* block) {
    Slot& slot = slots_[i];
    block->offsets.clear();
    block->finished = false;
    block->error = absl::OkStatus();
    if (!parallel_) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return false;
      }
      TakeSerially(slot, out, block);
      return true;
    }
    absl::MutexLock lock(&mu_);
    while (!stopping_ && static_cast<int64_t>(slot.records.size()) < Want() &&
           !slot.finished && slot.error.ok()) {
      slot_cv_.Wait(&mu_);
    }
    if (stopping_) return false;
    const int64_t n = std::min<int64_t>(
        options_.block_length, static_cast<int64_t>(slot.records.size()));
    ReserveMore(out, static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k) {
      out->emplace_back().value = std::move(slot.records.front());
      block->offsets.push_back(slot.offsets.front());
      slot.records.pop_front();
      slot.offsets.pop_front();
    }
    if (slot.records.empty()) {
      block->finished = slot.finished;
      block->error = slot.error;
    }
    if (NeedsReadLocked(slot)) WakeReaderLocked(i);
    return true;
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

  // What a slot's buffer holds before its next block is taken: one record
  // more than a block.
  int64_t Want() const { return options_.block_length + 1; }

  // Room for `more` elements in *out, growing it geometrically: a reserve
  // of exactly size() + more per block would reallocate it every block.
  static void ReserveMore(std::vector<Tracked<R>>* out, size_t more) {
    const size_t need = out->size() + more;
    if (need > out->capacity()) out->reserve(std::max(need, 2 * out->capacity()));
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

  // Gives *record a pooled string to read its value into, from *fresh
  // (refilled from pool_ with up to `want` strings when empty).
  void Reuse(R* record, size_t want, std::vector<std::string>* fresh) {
    if constexpr (std::is_same_v<R, Record>) {
      if (fresh->empty()) pool_->Take(want, fresh);
      if (fresh->empty()) return;
      record->value = std::move(fresh->back());
      fresh->pop_back();
    } else {
      (void)record, (void)want, (void)fresh;
    }
  }

  // Reads up to `n` records of `slot` (parallel mode).
  SlotBlock<R> ReadBlock(Slot& slot, const WorkItem& item, int64_t n) {
    SlotBlock<R> block;
    block.records.reserve(static_cast<size_t>(std::min<int64_t>(n, 256)));
    block.offsets.reserve(static_cast<size_t>(std::min<int64_t>(n, 256)));
    int64_t offset = 0;
    std::vector<std::string> fresh;
    while (static_cast<int64_t>(block.records.size()) < n) {
      R& record = block.records.emplace_back();
      Reuse(&record, static_cast<size_t>(n) - block.records.size() + 1, &fresh);
      if (!ReadOne(slot, item, &record, &offset, &block.finished,
                   &block.error)) {
        block.records.pop_back();
        break;
      }
      block.offsets.push_back(offset);
      block.bytes += HeldBytes(record);
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
        room = AheadLocked() - static_cast<int64_t>(slot->records.size());
      }
      SlotBlock<R> block = ReadBlock(*slot, ticket->item(), room);
      absl::MutexLock lock(&mu_);
      slot->reading = false;
      if (options_.read_ahead == 0 && block.bytes > 0) {
        bytes_read_ += block.bytes;
        records_read_ += static_cast<int64_t>(block.records.size());
      }
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

  // Serial mode: the next block of `slot`, read here straight into *out.
  // The slot's buffer keeps only the one record read past the block (see
  // TakeBlock).
  void TakeSerially(Slot& slot, std::vector<Tracked<R>>* out,
                    TakenBlock* block) {
    const size_t n = static_cast<size_t>(options_.block_length);
    ReserveMore(out, n);
    size_t taken = 0;
    if (!slot.records.empty()) {
      out->emplace_back().value = std::move(slot.records.front());
      block->offsets.push_back(slot.offsets.front());
      slot.records.pop_front();
      slot.offsets.pop_front();
      ++taken;
    }
    int64_t offset = 0;
    while (taken < n && !slot.finished && slot.error.ok()) {
      R& record = out->emplace_back().value;
      Reuse(&record, kSerialTake, &fresh_);
      if (!ReadOne(slot, slot.ticket->item(), &record, &offset, &slot.finished,
                   &slot.error)) {
        out->pop_back();
        break;
      }
      block->offsets.push_back(offset);
      ++taken;
    }
    if (taken == n && !slot.finished && slot.error.ok()) {
      R& ahead = slot.records.emplace_back();
      Reuse(&ahead, kSerialTake, &fresh_);
      if (ReadOne(slot, slot.ticket->item(), &ahead, &offset, &slot.finished,
                  &slot.error)) {
        slot.offsets.push_back(offset);
      } else {
        slot.records.pop_back();
      }
    }
    if (slot.records.empty()) {
      block->finished = slot.finished;
      block->error = slot.error;
    }
  }

  // Appends `block` to the slot's buffer. Requires mu_.
  static void AppendLocked(Slot& slot, SlotBlock<R>& block) {
    for (size_t k = 0; k < block.records.size(); ++k) {
      slot.records.push_back(std::move(block.records[k]));
      slot.offsets.push_back(block.offsets[k]);
    }
    slot.finished = block.finished;
    slot.error = std::move(block.error);
  }

  // Whether a reading thread should refill `slot`: it has an item with
  // more to read and its buffer fell below half of the read-ahead (or below
  // what the merger waits for). Refilling in bursts rather than record by
  // record keeps the wake-ups few.
  bool NeedsReadLocked(const Slot& slot) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t low = std::max(options_.block_length + 1, AheadLocked() / 2);
    return slot.ticket != nullptr && !slot.reading && !slot.finished &&
           slot.error.ok() && static_cast<int64_t>(slot.records.size()) < low;
  }

  // Records a slot is read ahead to: read_ahead when set; else about
  // kAheadBytes of records at the mean size read so far, within
  // [min_ahead_, kMaxAheadRecords] (min_ahead_ before any was read, and for
  // records of unknown size).
  int64_t AheadLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (options_.read_ahead > 0 || records_read_ == 0) return min_ahead_;
    const int64_t mean = std::max<int64_t>(1, bytes_read_ / records_read_);
    return std::clamp(kAheadBytes / mean, min_ahead_,
                      std::max(min_ahead_, kMaxAheadRecords));
  }

  void WakeReaderLocked(size_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reader_cvs_[slot % reader_cvs_.size()]->Signal();
  }

  const ItemReaderFactory<R> factory_;
  const InterleaveOptions options_;
  StringPool* const pool_;
  const bool parallel_;
  const int64_t min_ahead_;  // read_ahead, or MinAhead(block_length) for 0
  // Serial mode (the one reading thread's): pooled strings taken, not yet
  // read into, taken kSerialTake at a time (a batch's worth: one lock of
  // the pool, whose mutex the consumer side touches too, every few blocks
  // rather than every block).
  static constexpr size_t kSerialTake = 256;
  std::vector<std::string> fresh_;
  absl::Mutex mu_;
  absl::CondVar slot_cv_;  // the merger waits for a slot's records
  // Reading thread t waits on reader_cvs_[t] for one of its slots to need
  // a read.
  std::vector<std::unique_ptr<absl::CondVar>> reader_cvs_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Read-ahead by bytes (read_ahead 0): what the reading threads have read
  // so far, for the mean record size.
  int64_t bytes_read_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t records_read_ ABSL_GUARDED_BY(mu_) = 0;
  // The vector never changes size; the fields of a Slot are guarded as
  // described in Slot. A slot's ticket changes only in the merge's calls,
  // under mu_, so the merge reads it without the lock.
  std::vector<Slot> slots_;
};

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_ITEM_SLOTS_H_
