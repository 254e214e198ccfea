// Options of the pipeline stages in dataset.h. Plain structs: defaults live
// here, and each field says what it trades off. Every stage checks its
// options when the pipeline is built (Dataset::MakeIterator), which fails
// with INVALID_ARGUMENT naming the stage and the field.
#ifndef SHARDQ_PIPELINE_STAGE_OPTIONS_H_
#define SHARDQ_PIPELINE_STAGE_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "shardq/work_item.h"

namespace shardq::pipeline {

// ReadItems: takes items from an ItemSource and interleaves their records.
// The most threads one stage may start (Map's num_threads, ReadItems'
// num_parallel_reads): more is refused with INVALID_ARGUMENT rather than
// spending minutes starting them.
inline constexpr int64_t kMaxStageThreads = 1024;

struct InterleaveOptions {
  // Names the stage in errors and stats.
  std::string name = "read";

  // Items read at once, taking turns. 0: max_items_held if that is finite
  // (a WorkQueue's num_clients), else 1. More items mix records of more
  // slices and hide the latency of opening one, but each is a lease held.
  int64_t cycle_length = 0;

  // Records taken from one item before moving to the next (>= 1). Larger
  // blocks read more sequentially; 1 mixes finest.
  int64_t block_length = 1;

  // Threads reading items ahead of the merge, each serving
  // cycle_length / num_parallel_reads of the items. <= 1: the merging
  // thread reads itself (one thread in all). The merged order is the same
  // for any number of threads. At most kMaxStageThreads.
  int64_t num_parallel_reads = 1;

  // With num_parallel_reads > 1: records each item's reader keeps ready
  // ahead of the merge (at least block_length + 1; refilled in bursts when
  // half are gone). Memory: cycle_length * read_ahead records. 0: sized by
  // the records' bytes, about 256 KiB of records per item (so that small
  // records are read, and their threads woken, in bursts of hundreds), at
  // least the larger of 64 and 4 * block_length records and at most 4096.
  // Records read ahead are claimed: a split of an item falls after them.
  int64_t read_ahead = 0;

  // Records held between this stage and the next.
  int64_t buffer_size = 256;

  // Items taken from the source and not yet completed, at most. An item is
  // completed only once every one of its records has left the pipeline
  // (returned by Iterator::Next, or dropped by Batch / Distribute), so the
  // items whose records sit in later buffers (shuffle, batch, prefetch)
  // count too. 0: the source's own limit (WorkQueue::num_clients, an
  // InputProducer's capacity), unlimited for other sources. A WorkQueue
  // refuses more than num_clients leases, so with a WorkQueue a value of 0
  // or at most num_clients is required. Give the queue a num_clients
  // comfortably larger than cycle_length: when every held item is fully
  // read and waiting in buffers, reading pauses (stats().stalls), a
  // shuffle buffer drains early, and a batch that cannot be filled from
  // the held items is handed on short, or (where short batches are
  // dropped) has its records counted consumed early (see dataset.h). That
  // never happens with max_items_held >= the batch size (each held item
  // would have a record in the batch); with items much larger than a
  // batch, a few more than cycle_length is plenty.
  int64_t max_items_held = 0;

  // false (the default): an item is completed once every record of it has
  // left the pipeline, so a crash never loses records waiting in buffers.
  // true: once every record of it has been read into the pipeline, as the
  // plain readers do (TextLineReader & co. complete an item when ReadUpTo
  // has returned its last record). The pipeline then never holds more than
  // cycle_length items, so a batch spanning items can always be filled even
  // with max_items_held = 1; a crash may lose the records of completed
  // items still in buffers (at most the buffers' capacity).
  bool complete_when_read = false;

  // true: an item slot whose item ran out waits for the source's next item
  // in its turn, so the order of records is a function of the order of
  // items (and of these options) only. false: the other slots go on
  // reading while the next item is being fetched. Either way a slot never
  // waits while the source has nothing to hand out right now (the end of
  // the data, or every remaining item held by others) or the held limit is
  // reached; the order then depends on timing.
  bool deterministic = true;

  // How often a take from a WorkQueue that is waiting for items held by
  // other workers wakes to check whether the pipeline is being destroyed.
  absl::Duration take_poll_interval = absl::Milliseconds(100);

  // >= 0: read one epoch the torch way (set_epoch): items of epochs up to
  // max_epoch only. The first item taken of a later epoch is given back to
  // the queue at once (WorkQueue::Release: it goes to the front, no failed
  // attempt) and the stage ends after the items it holds, as at the end of
  // the data. So a pass with max_epoch = e reads what is left of epochs
  // <= e (epoch e, plus items of earlier epochs given back or expired
  // since), and nothing of later epochs. -1 (the default): every epoch.
  // Needs a WorkQueue source (INVALID_ARGUMENT otherwise: other sources
  // cannot take an item back).
  int64_t max_epoch = -1;

  // Called, each time the stage takes an item, with the item the source
  // will hand out next when it has it at hand (ItemSource::PeekNextItem: a
  // WorkQueue's item taken ahead), so that a remote item's first bytes are
  // on their way when its turn comes: TextOpenAhead() or TFRecordOpenAhead()
  // (shardq/pipeline/record_reader.h) for those readers. Null: nothing.
  std::function<void(const WorkItem&)> open_ahead;
};

// Map: applies a function to every element.
struct MapOptions {
  std::string name = "map";

  // Threads calling the function. 0: the function runs in the thread that
  // pulls from this stage (the consumer's, or a Prefetch thread). At most
  // kMaxStageThreads.
  int64_t num_threads = 1;

  // true: results leave in input order (a slow element holds back those
  // after it). false: in the order they finish; the order then depends on
  // timing. Errors are reported at their element's position when true.
  bool deterministic = true;

  // Elements taken in and not yet handed on, at most (at least
  // num_threads). Elements move between threads in chunks of what is
  // ready, so a larger buffer means fewer, larger hand-offs. 0: the larger
  // of 256 and 4 * num_threads.
  int64_t buffer_size = 0;
};

// Shuffle: a shuffle buffer, as tf.data's shuffle(buffer_size, seed).
struct ShuffleOptions {
  std::string name = "shuffle";

  // Elements to choose from (>= 1): an element is handed on only once the
  // buffer is full (or the input ended), and then a uniformly random one.
  // Larger mixes better, costs memory, and delays the first element.
  int64_t buffer_size = 1024;

  // Seeds the choices (SplitMix64, see shardq/internal/rng.h): the same seed and
  // the same input order give the same output order on every machine.
  uint64_t seed = 0;
};

// Batch: groups consecutive elements into a Batch.
struct BatchOptions {
  // Rows per batch (>= 1).
  int64_t batch_size = 32;

  // At the end of the data, drop a last batch that has fewer than
  // batch_size rows (its records still count as consumed, so their items
  // are completed). false: hand it on short.
  bool drop_remainder = false;
};

// Distribute: splits every global batch into one batch per replica, as
// tf.distribute's experimental_distribute_dataset.
struct DistributeOptions {
  // Replicas, R >= 1. The batch size of the batched input must be a
  // multiple of R; each replica's batch has batch_size / R rows.
  int64_t num_replicas = 1;

  // What happens to a global batch with fewer rows than the batch size
  // (the last one, or one made short by a source that ran dry, see
  // stats().short_batches). Either way every replica gets a batch in every
  // step, so synchronous replicas never wait for one that has none.
  enum class Remainder {
    // Drop it (its records count as consumed).
    kDrop,
    // Spread its real rows over the replicas as evenly as possible (they
    // differ by at most one row) and pad every replica's batch to full
    // size with default-constructed rows marked in Batch::padded.
    kPad,
  };
  Remainder remainder = Remainder::kPad;
};

}  // namespace shardq::pipeline

#endif  // SHARDQ_PIPELINE_STAGE_OPTIONS_H_
