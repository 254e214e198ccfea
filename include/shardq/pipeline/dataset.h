// Composable input pipelines in the shape of tf.data: a Dataset describes
// the stages, MakeIterator builds them and starts their threads, and the
// Iterator hands out the elements.
//
//   shardq::WorkQueueOptions options;           // works, num_slices, ...
//   options.num_clients = 16;                   // items this worker may hold
//   auto queue = shardq::WorkQueue::Create(options);
//
//   BatchOptions batch;
//   batch.batch_size = 256;
//   Dataset<Batch<std::string>> dataset =
//       ReadItems(queue->get(), TextReaderFactory())     // Dataset<Record>
//           .Map([](Record r) { return std::move(r.value); })
//           .Shuffle(ShuffleOptions())
//           .Batch(batch)
//           .Prefetch(2);
//   auto it = dataset.MakeIterator();          // StatusOr<unique_ptr<...>>
//   while (true) {
//     absl::StatusOr<Batch<std::string>> next = (*it)->Next();
//     if (absl::IsOutOfRange(next.status())) break;  // every item completed
//     if (!next.ok()) ...                       // an error, with its stage
//   }
//
// Contract:
//  * Bounded: every stage holds a bounded number of elements (its options
//    say how many), so memory stays flat whatever the size of the data.
//  * Held items: the pipeline holds at most max_items_held items not yet
//    completed (a WorkQueue's num_clients). When all of them are read and
//    their records wait in later stages, reading pauses (stats().stalls);
//    a shuffle buffer then hands on what it holds, and a Batch that still
//    cannot be filled hands on what it has as a short batch
//    (stats().short_batches). With drop_remainder, or a Distribute that
//    drops short batches, it keeps its rows and counts their records
//    consumed now (stats().records_consumed_early; logged once) so that
//    their items complete and the batch can fill: a stop or a crash before
//    that batch is returned loses them (a stop logs them,
//    WorkQueue::records_lost), so give such pipelines a max_items_held
//    above cycle_length. None of this
//    happens with max_items_held >= batch_size. When the source has
//    nothing more to hand out until held items complete (the end of the
//    data), a partial batch is handed on short (or dropped with
//    drop_remainder).
//  * Exactly-once accounting: a work item is completed (WorkQueue::Complete)
//    only once every one of its records has left the pipeline (returned by
//    Next, or dropped on purpose by Batch / Distribute; with
//    Iterator::DeferConsumption, only some elements after that), so a crash
//    never loses a half-read item; it is re-read, as at-least-once delivery
//    requires. Progress (ItemSource::NoteProgress) follows the
//    records returned in order.
//  * Errors (a missing file, a corrupt record, a failing map function, a
//    failing take) reach the consumer from Next at their position in the
//    stream, keeping their code, with the stage and the item or element
//    named. They end the pipeline: later calls return the same error, and
//    items whose records were not all consumed are never completed (see
//    ~Iterator).
//  * Determinism: with InterleaveOptions::deterministic and
//    MapOptions::deterministic (the defaults), a fixed item order (a
//    WorkQueue with a seed, and one worker) and seeded shuffles, the output
//    is identical across runs, whatever the numbers of threads, as long as
//    the held-item limit never binds and the source is never dry before
//    its end (stats().stalls stays at most 1: the end of the data).
//  * Destroying an Iterator stops and joins every thread of its pipeline
//    promptly (a blocked take from a WorkQueue within
//    take_poll_interval; an ItemSource other than a WorkQueue is called
//    blocking, and a map function or a read in progress is let finish).
//
// A Dataset is an immutable, cheap-to-copy description; MakeIterator may be
// called several times, each Iterator taking its own items from the source.
// Thread safety: Dataset is thread-safe (const); an Iterator is not (one
// consumer thread; the stages' own threads are internal).
#ifndef SHARDQ_PIPELINE_DATASET_H_
#define SHARDQ_PIPELINE_DATASET_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shardq/item_source.h"
#include "shardq/pipeline/element.h"
#include "shardq/pipeline/record_reader.h"
#include "shardq/pipeline/stage_options.h"

namespace shardq::pipeline {

namespace internal {
struct PipelineContext;
class RecordTags;
template <typename T>
class Stage;
template <typename T>
class Node;

template <typename U>
struct UnwrapStatusOr {
  using type = U;
};
template <typename U>
struct UnwrapStatusOr<absl::StatusOr<U>> {
  using type = U;
};
// The element type of Map(fn): what fn returns, without a StatusOr.
template <typename Fn, typename T>
using MapResult = typename UnwrapStatusOr<
    std::decay_t<std::invoke_result_t<Fn&, T>>>::type;

template <typename B>
struct BatchRow;  // defined for Batch<U> only: Distribute needs batches
template <typename U>
struct BatchRow<Batch<U>> {
  using type = U;
};
}  // namespace internal

// What a pipeline has done so far. Items and records are those of the
// reading stage (all zero for FromVector).
struct PipelineStats {
  int64_t items_taken = 0;      // items taken from the source
  int64_t items_completed = 0;  // items whose records all left (ItemDone)
  int64_t items_held = 0;       // taken and not yet completed
  int64_t records_read = 0;     // records handed on by the reading stage
  int64_t records_consumed = 0; // left the pipeline, including dropped
  int64_t records_dropped = 0;  // dropped by Batch / Distribute remainders
  // Times the reading stage ran out of items to read: once at the end of
  // the data; more means the held-item limit or a dry source paused it.
  int64_t stalls = 0;
  int64_t shuffle_drains = 0;   // shuffle buffers emptied early by a stall
  int64_t short_batches = 0;    // batches with fewer than batch_size rows
  // Counted consumed before they were returned: at stalls at the held-item
  // limit of a Batch that may not hand on a short batch (see the contract),
  // and by ConsumeAll with kUntilTold.
  int64_t records_consumed_early = 0;
  // Passed over by the readers of items read to their end (TFRecord with
  // on_corrupt = kSkip): corrupt regions, and their bytes.
  int64_t corrupt_regions = 0;
  int64_t skipped_bytes = 0;
};

// Hands out the elements of a built pipeline. Not thread-safe.
template <typename T>
class Iterator {
 public:
  // Stops every thread of the pipeline and joins them. Items whose records
  // were not all consumed go back to a WorkQueue source, to the front of
  // the queue for this or another worker: of an item whose first records
  // were consumed, only the rest after them (WorkQueue::ReleaseRest: the
  // item is split there and the part consumed completed; records consumed
  // out of order after that point are read again, and counted in
  // WorkQueue::records_read_again). Other sources keep their items.
  ~Iterator();
  Iterator(const Iterator&) = delete;
  Iterator& operator=(const Iterator&) = delete;

  // The next element. OUT_OF_RANGE at the end of the data (for a WorkQueue:
  // every item of every epoch completed); any other error ends the
  // pipeline (see the contract at the top). After an error or the end,
  // returns the same status again.
  absl::StatusOr<T> Next();

  // As Next(), but when the last stage is a Prefetch (whose thread runs
  // the stages before it) waits at most about `timeout`: std::nullopt if
  // no element was ready by then, and nothing changes (call again). A
  // pipeline that ends in another stage works in the calling thread and so
  // waits as Next(). Lets a caller that must stay responsive (Python, for
  // Ctrl-C) wait in slices.
  absl::StatusOr<std::optional<T>> TryNext(absl::Duration timeout);

  // Optional: hands back an element that Next() returned and the caller is
  // done with. When the last stage is a Prefetch, the element is destroyed
  // in the prefetch thread, the thread that made it, at its next hand-off,
  // and its strings (of std::string rows, a Record's value) are first
  // offered to the reading stage to read new records into (a bounded
  // pool); otherwise it is destroyed here. Never required (an element
  // simply dropped is freed as usual) and it changes nothing the pipeline
  // yields. Why: with glibc's malloc, freeing many small blocks (a batch's
  // strings) in another thread than the one that allocated them makes the
  // two threads contend for the allocating thread's arena; a consumer that
  // recycles its batches keeps every allocation and free on the prefetch
  // thread (bench/results/pipeline.md). Bounded: what is handed back waits
  // for the fill thread's next hand-off, and once the consumer has seen the
  // end it is destroyed here. Call it from the thread that calls Next.
  void Recycle(T spent);

  PipelineStats stats() const;

  // From now on, the records of an element returned by Next count as
  // consumed (so their items may complete) only once `elements` (>= 0)
  // more elements were returned after it, when the pipeline cannot go on
  // without their items completed (its reading stage idle at the held-item
  // limit, or with nothing else to take: Next then waits in slices of
  // kDeferredPoll and checks), or at the end of the data; never earlier.
  // For a consumer that is still using an element after it asked for the
  // next ones: a DataLoader worker, whose batches wait in the DataLoader's
  // prefetch queue before training uses them. If the iterator is destroyed
  // (or fails) first, their items are released unfinished and read again.
  // INVALID_ARGUMENT for a pipeline that does not end in a Prefetch (its
  // Next cannot tell that it is about to wait).
  absl::Status DeferConsumption(int64_t elements);
  static constexpr absl::Duration kDeferredPoll = absl::Milliseconds(5);

  // DeferConsumption(kUntilTold): the records of returned elements count
  // as consumed only once Consume names them, or at the end of the data.
  // For a consumer that passes elements on through stages of its own
  // (Python's, after a Python map) and knows when each one reached its
  // user. When the pipeline cannot go on without their items, TryNext does
  // not consume them itself: it returns std::nullopt at once with stalled()
  // true, and the consumer flushes what its stages hold, says what reached
  // its user, and (if the pipeline is still stalled then) consumes the rest
  // with ConsumeAll. Destroyed first, the iterator gives their items back
  // unfinished, and the records the consumer never named are not counted as
  // read again (they did not reach the user).
  static constexpr int64_t kUntilTold = std::numeric_limits<int64_t>::max();

  // True when the last TryNext returned std::nullopt because the pipeline
  // waits for the items of deferred elements (kUntilTold only).
  bool stalled() const { return stalled_; }

  // The `elements` (numbered from 0 in the order Next returned them since
  // DeferConsumption) reached their user: their records count as consumed
  // now, in any order. Numbers already consumed, or not returned, are
  // ignored. Returns the pipeline's error if consuming fails (Next then
  // returns it too).
  absl::Status Consume(const std::vector<int64_t>& elements);

  // Every element returned so far counts as consumed. With kUntilTold, the
  // elements not named yet count as consumed early (PipelineStats::
  // records_consumed_early): their items complete now, a later Consume
  // naming them only settles them, and the records of those never named
  // before the iterator is destroyed are lost, and reported as such
  // (ItemSource::NoteLost).
  absl::Status ConsumeAll();

 private:
  template <typename>
  friend class Dataset;
  Iterator(std::unique_ptr<internal::PipelineContext> context,
           std::unique_ptr<internal::Stage<T>> stage);
  // Consumes the deferred records of the oldest elements until at most
  // `keep` elements' wait. False (and status_ set) on an error.
  bool ConsumeDeferred(size_t keep);
  // Consumes one deferred element's records. False (and status_ set, the
  // deferred elements dropped) on an error.
  bool ConsumeTags(internal::RecordTags tags);

  const std::unique_ptr<internal::PipelineContext> context_;
  const std::unique_ptr<internal::Stage<T>> stage_;
  absl::Status status_;  // sticky: the end or the error
  int64_t defer_ = 0;    // DeferConsumption's
  // Records of returned elements not yet consumed, oldest first.
  std::deque<internal::RecordTags> deferred_;
  int64_t deferred_records_ = 0;  // the records of deferred_
  int64_t deferred_returned_ = 0;  // elements ever pushed on deferred_
  // Per element of deferred_: consumed already (Consume, out of order).
  std::deque<bool> deferred_done_;
  bool stalled_ = false;  // stalled()
};

template <typename T>
class Dataset {
 public:
  using element_type = T;

  // fn: T -> U or T -> absl::StatusOr<U> (an error ends the pipeline,
  // named "<options.name>: element <n>: ..."). Must be thread-safe when
  // options.num_threads > 1.
  template <typename Fn>
  Dataset<internal::MapResult<Fn, T>> Map(Fn fn,
                                          MapOptions options = {}) const;

  // A shuffle buffer. Runs in the thread that pulls from it.
  Dataset<T> Shuffle(ShuffleOptions options) const;

  // Groups elements into batches. Runs in the thread that pulls from it.
  Dataset<pipeline::Batch<T>> Batch(BatchOptions options) const;

  // For a dataset of batches made by Batch (possibly followed by Shuffle or
  // Prefetch): splits each into options.num_replicas per-replica batches.
  // INVALID_ARGUMENT from MakeIterator if there is no Batch before it or
  // its batch_size is not a multiple of num_replicas.
  template <typename B = T>
  Dataset<PerReplicaBatches<typename internal::BatchRow<B>::type>> Distribute(
      DistributeOptions options) const;

  // A thread that keeps up to `buffer_size` (>= 1) elements ready, so the
  // stages before it run while the consumer works. (The consumer takes
  // what is ready in one go, so up to twice that may be held for a moment.
  // A consumer that finds nothing ready is woken once buffer_size elements
  // are, the input ended, or 1 ms after the first one came: woken once per
  // buffer rather than per element, at the price of at most 1 ms more
  // latency, never of throughput.)
  Dataset<T> Prefetch(int64_t buffer_size) const;

  // Builds the stages and starts their threads. INVALID_ARGUMENT naming
  // the stage and field of a bad option; nothing is started then.
  absl::StatusOr<std::unique_ptr<Iterator<T>>> MakeIterator() const;

  // Internal: a dataset from its description.
  explicit Dataset(std::shared_ptr<const internal::Node<T>> node)
      : node_(std::move(node)) {}

 private:
  template <typename>
  friend class Dataset;

  std::shared_ptr<const internal::Node<T>> node_;
};

// The records of the items of `source`, read by readers from `factory` and
// interleaved (see InterleaveOptions). `source` must outlive every Iterator
// of the dataset. It is used from several threads (NextItem from one,
// ItemDone and NoteProgress from others), so it must be thread-safe, or
// like ListItemSource call nothing shared from ItemDone. A WorkQueue is
// used best: taken from with timeouts, its num_clients respected, and the
// items of a destroyed Iterator released. The pipeline counts on being the
// WorkQueue's only taker: Iterators sharing one WorkQueue share its
// num_clients, so give each a max_items_held that sums to at most that
// (or each its own WorkQueue); a take over the limit fails the pipeline
// with FAILED_PRECONDITION. An InputProducer is refused (INVALID_ARGUMENT):
// its NextItem waits for items this pipeline holds; pass its WorkQueue, the
// pipeline fetches items ahead itself. At most one ReadItems per pipeline.
template <typename R>
Dataset<R> ReadItems(ItemSource* source, ItemReaderFactory<R> factory,
                     InterleaveOptions options = {});

// The elements of `elements` (copied per Iterator), e.g. for tests.
template <typename T>
Dataset<T> FromVector(std::vector<T> elements);

}  // namespace shardq::pipeline

// Template definitions.
#include "shardq/pipeline/internal/dataset_impl.h"  // IWYU pragma: export

#endif  // SHARDQ_PIPELINE_DATASET_H_
