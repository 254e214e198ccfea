// Internal to the pipeline: what flows between stages, the interface of a
// built stage, and the state one built pipeline shares.
//
// Stages form a chain; each pulls from its input with Next(). A stage that
// owns threads (ReadItems, Map with threads, Prefetch) fills a bounded
// queue from them and its Next() takes from that queue; the others (Map
// with 0 threads, Shuffle, Batch, Distribute, FromVector) do their work in
// the calling thread. Errors travel in-band, at their position in the
// stream: a stage hands an error on as its next result, and the pipeline
// ends there.
#ifndef SHARDQ_SRC_PIPELINE_STAGE_H_
#define SHARDQ_SRC_PIPELINE_STAGE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shardq/pipeline/coordinator.h"
#include "shardq/pipeline/queues.h"
#include "shardq/pipeline/internal/item_ledger.h"
#include "shardq/pipeline/internal/string_pool.h"

namespace shardq::pipeline::internal {

// Elements a buffering stage (Shuffle, Prefetch) reserves room for up
// front, at most: its buffer grows past this only as it fills, so that a
// buffer_size far beyond the data (or the memory) costs nothing at once.
inline constexpr int64_t kReserveAtMost = 4096;

// What a stage returns once its pipeline is stopping.
inline absl::Status StoppingError(absl::string_view stage) {
  return absl::CancelledError(absl::StrCat(stage, ": pipeline is stopping"));
}

// An element in flight, with the records it is made of. A stall marker
// (see item_ledger.h) carries no value: the reading stage sends one when it
// goes idle so that stages holding records (a shuffle buffer, a partial
// batch) can tell whether to hand them on. Markers never reach the
// consumer.
template <typename T>
struct Tracked {
  T value{};
  RecordTags tags;
  bool marker = false;

  static Tracked Marker() {
    Tracked tracked;
    tracked.marker = true;
    return tracked;
  }
};

// What a stage's queue holds: an element, or the error that ends the
// stream at that position.
template <typename T>
using Envelope = absl::StatusOr<Tracked<T>>;

// Records carried by `tags` that the ledger counts in flight: all but those
// counted consumed early (see ItemLedger::ConsumeEarly).
inline int64_t NumRecords(const RecordTags& tags) {
  int64_t n = 0;
  tags.ForEach([&n](const RecordTag& tag) { n += tag.consumed_early() ? 0 : 1; });
  return n;
}

// A built stage. Next() is called by one thread at a time (the stage
// downstream, or the consumer); it returns the next element or marker,
// OUT_OF_RANGE at the end of the data, CANCELLED once the pipeline is
// stopping, or the error that ends the stream.
template <typename T>
class Stage {
 public:
  virtual ~Stage() = default;
  virtual Envelope<T> Next() = 0;

  // Moves elements in runs, so that the stages of a pipeline pay their
  // per-call costs once per run rather than once per element: appends the
  // next element to *out (waiting for it, as Next) and then up to max - 1
  // (max >= 1) more that the stage can give without waiting for another
  // thread, and returns OK; a run ends after a stall marker. Or appends
  // nothing and returns what Next() would (OUT_OF_RANGE at the end,
  // CANCELLED when stopping, the error that ends the stream). The same
  // elements, markers and errors, in the same order, as calls of Next().
  // Default: one Next().
  virtual absl::Status NextRun(int64_t max, std::vector<Tracked<T>>* out) {
    (void)max;
    Envelope<T> next = Next();
    if (!next.ok()) return next.status();
    out->push_back(*std::move(next));
    return absl::OkStatus();
  }

  // Waits up to `timeout` for the next result. false: none came in time
  // (nothing is consumed; call again). true: the next Next() returns
  // without waiting, or this stage cannot wait with a timeout (the default:
  // stages that work in the calling thread), and Next() may block.
  virtual bool WaitReady(absl::Duration timeout) {
    (void)timeout;
    return true;
  }
  // Whether WaitReady really waits (and answers false when nothing is
  // ready): true for a stage that hands elements over from a thread of its
  // own (Prefetch).
  virtual bool CanWaitReady() const { return false; }

  // Called once, before the pipeline starts, by a stage that pulls from
  // this one from a thread of its own (Prefetch) and is its only puller:
  // lets the reading stage upstream do its work in that thread instead of
  // a thread of its own (see read_stage.h). Stages that work in the calling
  // thread pass the call on; true when the reading stage took it. The
  // default (a stage with threads of its own) declines.
  virtual bool ReadInPullingThread() { return false; }

  // Takes back an element the consumer is done with (Iterator::Recycle).
  // The default destroys it here, in the calling thread; a stage whose
  // elements were made in a thread of its own (Prefetch) destroys it there.
  virtual void Recycle(T spent) { (void)spent; }
  // Takes back the tags of an element the consumer received (Iterator
  // calls it once the ledger counted them); like Recycle.
  virtual void RecycleTags(RecordTags spent) { (void)spent; }
};

// Moves up to `max` elements of `from`, starting at *next, to the end of
// *out, ending the run after a stall marker (see Stage::NextRun). When *out
// is empty and all of `from` goes, the two vectors swap their storage
// instead: no element moves, and `from` gets *out's buffer to refill.
template <typename T>
void MoveRun(std::vector<Tracked<T>>& from, size_t* next, int64_t max,
             std::vector<Tracked<T>>* out) {
  if (out->empty() && *next == 0 &&
      static_cast<int64_t>(from.size()) <= max) {
    bool marker_inside = false;
    for (size_t k = 0; k + 1 < from.size() && !marker_inside; ++k) {
      marker_inside = from[k].marker;
    }
    if (!marker_inside) {
      out->swap(from);
      from.clear();
      return;
    }
  }
  for (int64_t n = 0; n < max && *next < from.size(); ++n) {
    out->push_back(std::move(from[(*next)++]));
    if (out->back().marker) break;
  }
}

// Results handed between threads a block at a time: one queue operation
// (and at most one wake-up) per block rather than per result. `end`, when
// not OK, is the error that follows the elements and ends the stream.
template <typename T>
struct TrackedBlock {
  std::vector<Tracked<T>> elements;
  absl::Status end;
};

// The single consumer of a queue of TrackedBlocks: returns their results
// one by one or in runs.
// Not thread-safe.
template <typename T>
class BlockDrain {
 public:
  BlockDrain(Queue<TrackedBlock<T>>* queue, std::string stage)
      : queue_(queue), stage_(std::move(stage)) {}

  Envelope<T> Next() {
    while (next_ == block_.elements.size()) {
      if (!block_.end.ok()) return TakeEnd();
      Fill();
    }
    return std::move(block_.elements[next_++]);
  }

  // See Stage::NextRun.
  absl::Status NextRun(int64_t max, std::vector<Tracked<T>>* out) {
    while (next_ == block_.elements.size()) {
      if (!block_.end.ok()) return TakeEnd();
      Fill();
    }
    MoveRun(block_.elements, &next_, max, out);
    return absl::OkStatus();
  }

 private:
  absl::Status TakeEnd() {
    absl::Status end = std::move(block_.end);
    block_.end = absl::OkStatus();
    return end;
  }

  // Waits for the next block; once the queue is closed and drained, an
  // empty block with its end (OUT_OF_RANGE, or CANCELLED when stopping).
  void Fill() {
    block_.elements.clear();
    next_ = 0;
    absl::StatusOr<TrackedBlock<T>> block = queue_->Dequeue();
    if (block.ok()) {
      block_ = *std::move(block);
    } else {
      block_.end = absl::IsOutOfRange(block.status())
                       ? block.status()
                       : StoppingError(stage_);
    }
  }

  Queue<TrackedBlock<T>>* const queue_;
  const std::string stage_;
  TrackedBlock<T> block_;
  size_t next_ = 0;
};

// Shared by the stages of one built pipeline. Declared in the order of
// destruction that keeps threads from outliving what they use: the
// coordinator (whose destruction stops and joins every thread) goes first.
struct PipelineContext {
  // Run once every stage is built, to launch the threads: a pipeline that
  // fails to build never starts any.
  std::vector<std::function<void()>> starters;
  // Set by the reading stage; null for a pipeline without one (FromVector).
  std::unique_ptr<ItemLedger> ledger;
  // Counters for PipelineStats, bumped by the stages.
  std::atomic<int64_t> short_batches{0};
  std::atomic<int64_t> records_dropped{0};
  std::atomic<int64_t> shuffle_drains{0};
  std::atomic<int64_t> corrupt_regions{0};  // skipped by the readers
  std::atomic<int64_t> skipped_bytes{0};
  // Set while the stages are built: a Distribute drops short batches, so
  // a Batch must not make one when the held-item limit stalls it.
  bool short_batches_dropped = false;
  // Strings of recycled elements, for the reading stage to reuse. On a
  // cache line of its own: its mutex is locked by the reading thread, and
  // the consumer reads the fields around it on every element.
  alignas(64) StringPool strings;
  alignas(64) ThreadCoordinator coordinator;  // (not on strings' lines)

  // See ItemLedger::Stalled.
  StallReason Stalled(int64_t own_records) const {
    return ledger == nullptr ? StallReason::kNone
                             : ledger->Stalled(own_records);
  }
};


}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_STAGE_H_
