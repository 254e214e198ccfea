// Internal to the pipeline: which work items the pipeline holds, which of
// their records are still inside it, and when an item may be completed.
//
// Accounting. Every record that leaves the reading stage carries a
// RecordTag: its item's ticket and its sequence number within the item.
// The ledger counts, per item, the records handed on (Emit) and the records
// that left the pipeline (Consume: returned to the consumer, or dropped on
// purpose by Batch / Distribute). An item is completed (ItemSource::ItemDone)
// once its reader has reached its end (FinishReading) and every record it
// handed on was consumed, never earlier, so a crash re-reads it. Records
// consumed in order advance the item's progress, sent with NoteReturned
// Records that die with a destroyed pipeline are neither: their items go
// back to the queue (ReleaseHeld, ~WorkQueue, or lease expiry), split where
// the records consumed in order end, so that only the rest is read again.
//
// Fetching. A fetcher thread takes the next item from the source ahead of
// need, keeping at most max_items_held items taken and not completed. From
// a WorkQueue it takes with a timeout, so it notices a stop within
// take_poll_interval and can report that the queue has nothing to hand out
// right now ("dry": the end of the data, or the rest held by others); other
// sources are called blocking.
//
// Stalls. When the reading stage has nothing to read (every slot empty)
// and no item can be had because the source is dry or the held limit is
// reached, it is idle, and the pipeline can only move if later stages hand
// on the records they hold. A stage that holds records (a shuffle buffer,
// a partial batch) declares them with a WaitingHold while it waits for
// input; once every record in the pipeline is held that way, waiting would
// be forever, and Stalled() says so. The reading stage then sends a stall
// marker down the stream (and one when it first goes idle, so that stages
// already blocked wake to declare what they hold); the first holding stage
// that receives it while Stalled() hands its records on.
//
// Thread-safe.
#ifndef SHARDQ_SRC_PIPELINE_ITEM_LEDGER_H_
#define SHARDQ_SRC_PIPELINE_ITEM_LEDGER_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shardq/item_source.h"
#include "shardq/pipeline/coordinator.h"
#include "shardq/work_item.h"

namespace shardq {
}  // namespace shardq

namespace shardq::pipeline::internal {

class ItemLedger;

// A FIFO of the records of an item not yet consumed in order: whether each
// was consumed and the resume offset after it. A ring over one buffer that
// only grows (doubling), so that popping never frees: records are pushed
// by the reading thread and popped by the consumer, and a block freed by
// another thread than its allocator costs glibc's arena lock.
class RecordProgress {
 public:
  struct Entry {
    int64_t resume_offset = -1;
    bool consumed = false;
  };
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  Entry& operator[](size_t i) { return buf_[(head_ + i) & (buf_.size() - 1)]; }
  Entry& front() { return (*this)[0]; }
  void push_back(Entry e) {
    if (size_ == buf_.size()) Grow();
    ++size_;
    (*this)[size_ - 1] = e;
  }
  void pop_front() {
    head_ = (head_ + 1) & (buf_.size() - 1);
    --size_;
  }

 private:
  void Grow() {
    std::vector<Entry> bigger(std::max<size_t>(16, buf_.size() * 2));
    for (size_t i = 0; i < size_; ++i) bigger[i] = (*this)[i];
    buf_.swap(bigger);
    head_ = 0;
  }
  std::vector<Entry> buf_;  // a power of two long
  size_t head_ = 0;
  size_t size_ = 0;
};

// One item taken from the source. The ledger keeps it alive while any of
// its records may still be in flight (until it is done and all its records
// were consumed, or the ledger is destroyed), so that records name it with
// a plain pointer; the reading stage holds it while it reads the item. Its
// fields are guarded by the ledger's mutex.
class ItemTicket {
 public:
  const WorkItem& item() const { return item_; }

 private:
  friend class ItemLedger;
  explicit ItemTicket(WorkItem item) : item_(std::move(item)) {}

  const WorkItem item_;
  int64_t emitted_ = 0;
  int64_t consumed_ = 0;
  bool read_all_ = false;
  bool done_ = false;
  // Progress: records [0, in_order_) were all consumed. For records from
  // in_order_ on: whether each was consumed, and the resume offset after
  // it (-1: unknown).
  int64_t in_order_ = 0;
  RecordProgress progress_;
  // The latest known resume offset (-1: none yet) and the records before
  // it (all consumed), for ItemSource::NoteReturned.
  int64_t resume_offset_ = -1;
  int64_t resume_in_order_ = 0;
  // Records handed to the consumer whose consumption was deferred
  // (Iterator::DeferConsumption) when the pipeline stopped.
  int64_t deferred_ = 0;
  // Records counted consumed early (ItemLedger::ConsumeEarly) and not yet
  // returned: the ticket stays alive until they are, or until the pipeline
  // stops (then they are lost, and reported with ItemSource::NoteLost).
  int64_t early_ = 0;
};

// Which record of which item an element carries. A plain value: the
// ticket is kept alive by the ledger (see ItemTicket), which outlives every
// stage of its pipeline. A record counted consumed early (ConsumeEarly)
// carries ~seq (negative): its return then only settles the early count.
struct RecordTag {
  ItemTicket* ticket = nullptr;
  int64_t seq = 0;
  bool consumed_early() const { return seq < 0; }
};
// The records an element is made of: one for a record, many for a batch.
// The first is held inline and the rest on the heap, so that the many
// moves of a single record's element are cheap. Iterable.
class RecordTags {
 public:
  bool empty() const { return first_.ticket == nullptr; }
  size_t size() const { return empty() ? 0 : 1 + (rest_ ? rest_->size() : 0); }
  void push_back(RecordTag tag) {
    if (empty()) {
      first_ = tag;
      return;
    }
    if (!rest_) rest_ = std::make_unique<std::vector<RecordTag>>();
    rest_->push_back(tag);
  }
  void reserve(size_t n) {
    if (n <= 1) return;
    if (!rest_) rest_ = std::make_unique<std::vector<RecordTag>>();
    rest_->reserve(n - 1);
  }
  void clear() {
    first_ = RecordTag();
    rest_.reset();
  }
  // Calls f(tag) for every tag, in order.
  template <typename F>
  void ForEach(F f) const {
    if (empty()) return;
    f(first_);
    if (rest_) {
      for (const RecordTag& tag : *rest_) f(tag);
    }
  }
  // Marks every tag as consumed early (see RecordTag).
  void MarkConsumedEarly() {
    auto mark = [](RecordTag& tag) {
      if (!tag.consumed_early()) tag.seq = ~tag.seq;
    };
    if (empty()) return;
    mark(first_);
    if (rest_) {
      for (RecordTag& tag : *rest_) mark(tag);
    }
  }
  // Moves every tag of `other` to the end of this.
  void Append(RecordTags&& other) {
    if (other.empty()) return;
    if (empty() && (other.rest_ || !rest_)) {
      *this = std::move(other);
      return;
    }
    // (An empty this with room reserved keeps its room: a batch's tags
    // are appended a record at a time.)
    push_back(other.first_);
    if (other.rest_) {
      if (!rest_) rest_ = std::make_unique<std::vector<RecordTag>>();
      rest_->insert(rest_->end(), other.rest_->begin(), other.rest_->end());
    }
    other.clear();
  }

 private:
  RecordTag first_;
  std::unique_ptr<std::vector<RecordTag>> rest_;
};

struct LedgerOptions {
  std::string name;              // the reading stage's, for errors
  int64_t max_items_held = 0;    // resolved: > 0, or 0 for unlimited
  absl::Duration take_poll_interval = absl::Milliseconds(100);
  bool complete_when_read = false;  // see InterleaveOptions
  int64_t max_epoch = -1;           // see InterleaveOptions
  std::function<void(const WorkItem&)> open_ahead;  // see InterleaveOptions
};

// Why a stalled pipeline cannot get more records.
enum class StallReason {
  kNone,   // not stalled: records or items may still come
  kDry,    // the source has nothing to hand out until held items complete
  kLimit,  // max_items_held items are held
};

struct LedgerStats {
  int64_t items_taken = 0;
  int64_t items_completed = 0;
  int64_t items_held = 0;
  int64_t records_read = 0;      // handed on by the reading stage
  int64_t records_consumed = 0;  // left the pipeline (including dropped)
  int64_t stalls = 0;            // times the reading stage went idle
  int64_t records_consumed_early = 0;  // see ItemLedger::ConsumeEarly
};

class ItemLedger {
 public:
  // `source` must outlive the ledger's threads. `leases` is `source` when
  // its items are leases of a queue (a WorkQueue: taken from with a
  // timeout, given back when not read), else null.
  ItemLedger(ItemSource* source, LeaseSource* leases, LedgerOptions options);
  ItemLedger(const ItemLedger&) = delete;
  ItemLedger& operator=(const ItemLedger&) = delete;

  // Launches the fetcher thread in `coordinator`, whose stop wakes every
  // wait of the ledger. Call once.
  void Start(ThreadCoordinator* coordinator);

  // --- The reading stage ---

  enum class Poll {
    kItem,       // *ticket is the next item, now held
    kPending,    // a fetch is in progress and may succeed soon
    kNoItemNow,  // dry or at the held limit: none until items complete
    kEnd,        // the source is exhausted
    kError,      // the source failed: *error
    kStopped,    // the pipeline is stopping
  };
  // Never blocks.
  Poll TryTakeItem(std::shared_ptr<ItemTicket>* ticket, absl::Status* error);

  // `count` records of `ticket` handed on, in order, right after those of
  // the ticket handed on before: their sequence numbers follow on (the
  // first record of an item is 0), so the reading stage numbers them
  // itself. Their resume offsets are offsets[begin, begin + count).
  struct EmitRun {
    ItemTicket* ticket = nullptr;
    size_t begin = 0;
    size_t count = 0;
  };
  // Counts the records of `runs` handed on, under one lock. Call before the
  // records can reach a consumer, and before FinishReading of their item.
  void Emit(const std::vector<EmitRun>& runs,
            const std::vector<int64_t>& offsets);

  // Every record of `ticket` has been handed on. Completes the item now if
  // they were all consumed already (an empty item). Errors are ItemDone's.
  absl::Status FinishReading(const std::shared_ptr<ItemTicket>& ticket);

  // The reading stage has no readable item (idle = true) or has one again.
  void SetReaderIdle(bool idle);

  // Counts changes that may let a waiting reading stage go on: an item
  // fetched, the source's state, a record consumed, an item completed.
  uint64_t change_count() const;
  // Blocks until change_count() differs from `seen` or a stop; returns it.
  uint64_t AwaitChange(uint64_t seen);

  // --- Later stages and the consumer ---

  // The records of `tags` left the pipeline (returned to the consumer, or
  // dropped on purpose). Completes the items none of whose records remain
  // and notes the progress of the others. Returns the first error of
  // ItemDone; the accounting is updated regardless.
  absl::Status Consume(const RecordTags& tags);

  // At a stall at the held-item limit, a stage that may neither hand on
  // nor drop the records it holds (a Batch that drops short batches), or a
  // consumer forcing the elements it has not named (Iterator::ConsumeAll),
  // counts them consumed now, so that their items complete and others can
  // be taken; the records stay where they are and are returned later.
  // Marks `tags` (see RecordTag); tags marked already are skipped. A stop
  // before they are returned loses them: ReleaseHeld reports them with
  // ItemSource::NoteLost. Errors are Consume's.
  absl::Status ConsumeEarly(RecordTags* tags);
  // A stage acted on a stall at the held-item limit (a shuffle buffer
  // emptied early, a batch handed on short or counted early): the first
  // call logs a warning that says how to avoid it.
  void NoteLimitStall();
  // A batch with `records` records counted consumed early is handed on
  // (not dropped at the end of the data): the first call logs a warning.
  void NoteEarlyHandedOn(int64_t records);

  // Whether the pipeline is stalled: the reading stage is idle (for the
  // reason returned), no item is being completed, and every record in the
  // pipeline is either one of the `own_records` the caller holds or held
  // by a stage waiting for input (see WaitingHold).
  StallReason Stalled(int64_t own_records) const;

  // True while the reading stage is idle; a hint read without the lock.
  bool reader_idle_hint() const {
    return reader_idle_hint_.load(std::memory_order_acquire);
  }

  // Declares, for its lifetime, that a stage holding `records` records is
  // waiting for input. Only counted while the reading stage is idle (no
  // cost otherwise): a stage that blocked before the stall began is woken
  // by the first stall marker and declares its records on its next wait.
  class WaitingHold {
   public:
    WaitingHold(ItemLedger* ledger, int64_t records);
    ~WaitingHold();
    WaitingHold(const WaitingHold&) = delete;
    WaitingHold& operator=(const WaitingHold&) = delete;

   private:
    ItemLedger* const ledger_;
    const int64_t records_;
  };

  // Gives the items still held back to a lease source, to the front of the
  // queue for this or another worker to read: only the rest of an item the
  // consumer got records of (LeaseSource::ReleaseRest, after telling the
  // source what it got with NoteReturned), others whole (Release). Call
  // after every thread using the ledger was joined. Other sources have no
  // way to take items back: they keep them, and are only told what the
  // consumer got (a WorkQueue behind them gives back the rest when it is
  // destroyed).
  void ReleaseHeld();
  // The source's CheckOpen.
  absl::Status SourceOpen() const { return source_->CheckOpen(); }
  // Before ReleaseHeld: records the consumer got whose consumption was
  // deferred and will not be counted (the iterator is being destroyed).
  // They were returned, and will be read again.
  void NoteDeferred(const RecordTags& tags);

  int64_t max_items_held() const { return options_.max_items_held; }
  LedgerStats stats() const;

 private:
  // The fetcher thread's body.
  absl::Status FetchLoop();
  // One fetch from the source (no lock held).
  absl::StatusOr<WorkItem> FetchOne(bool* dry);
  // FetchOne from a lease source, before the max_epoch check.
  absl::StatusOr<WorkItem> TakeFromQueue(bool* stopped);
  bool AtLimitLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts consumed records of `ticket`; true when the item is now done.
  bool ConsumeLocked(ItemTicket& ticket, int64_t seq, int64_t* progress)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the ledger's hold on `ticket` once no record of it can be in
  // flight any more (done, and every record consumed), returning it (null
  // otherwise) so that the caller keeps it alive while it still uses it.
  std::shared_ptr<ItemTicket> RetireIfSettledLocked(ItemTicket& ticket)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls ItemDone for `done` items (no lock held), then un-holds them.
  absl::Status CompleteItems(const std::vector<std::shared_ptr<ItemTicket>>& done)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sets this->*said; true the first time (a warning said once a pipeline).
  bool FirstTime(bool ItemLedger::*said) ABSL_LOCKS_EXCLUDED(mu_);
  // Consume, and with `early` ConsumeEarly's counting (tags not marked).
  absl::Status ConsumeTags(const RecordTags& tags, bool early);
  void ChangedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddWaitingHold(int64_t records) ABSL_LOCKS_EXCLUDED(mu_);

  ItemSource* const source_;
  // Set when the pipeline stops: a take in flight (waiting out a
  // coordinator that is away) gives up, so that stopping never waits on it.
  std::atomic<bool> cancel_takes_{false};
  LeaseSource* const leases_;
  const LedgerOptions options_;
  ThreadCoordinator* coordinator_ = nullptr;

  mutable absl::Mutex mu_;
  absl::CondVar changed_cv_;  // the reading stage waits here
  absl::CondVar fetch_cv_;    // the fetcher waits here
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Items taken (including one being fetched) and not yet completed.
  int64_t held_ ABSL_GUARDED_BY(mu_) = 0;
  bool fetching_ ABSL_GUARDED_BY(mu_) = false;
  bool dry_ ABSL_GUARDED_BY(mu_) = false;
  bool end_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fetch_error_ ABSL_GUARDED_BY(mu_);
  std::optional<WorkItem> fetched_ ABSL_GUARDED_BY(mu_);
  bool reader_idle_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> reader_idle_hint_{false};
  // Records declared by WaitingHolds.
  int64_t waiting_held_ ABSL_GUARDED_BY(mu_) = 0;
  // Items whose ItemDone call is under way.
  int64_t completing_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // WorkQueue source only: the items taken and not completed, by lease.
  std::map<uint64_t, WorkItem> held_items_ ABSL_GUARDED_BY(mu_);
  // Tickets whose records may still be in flight (see ItemTicket).
  std::unordered_map<const ItemTicket*, std::shared_ptr<ItemTicket>> live_
      ABSL_GUARDED_BY(mu_);
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  LedgerStats stats_ ABSL_GUARDED_BY(mu_);
  bool warned_early_ ABSL_GUARDED_BY(mu_) = false;
  bool warned_limit_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_ITEM_LEDGER_H_
