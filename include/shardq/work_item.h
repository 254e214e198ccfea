// A leased work item and the queue counters reported by stats.
#ifndef SHARDQ_WORK_ITEM_H_
#define SHARDQ_WORK_ITEM_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "shardq/slice.h"

namespace shardq {

class SplittableRange;

// One item handed out by a WorkQueue. Valid until completed or released.
struct WorkItem {
  std::string item;       // e.g. "data/part-3.txt?start=1048576&end=2097152"
  int64_t epoch = 0;      // 0-based epoch this hand-out belongs to
  int64_t index = 0;      // position of the item in the slice plan
  uint64_t lease_id = 0;  // identifies this hand-out; pass it to Complete
  // Set by a WorkQueue when the coordinator may split this item while it
  // is read (shardq/splittable_range.h): readers claim each record's start
  // offset and stop where a split ended the range. Null: read to the end.
  std::shared_ptr<SplittableRange> range;
  // `item` parsed (work, start/end, parameters; shardq/slice.h). Filled
  // once, by ParseWorkItem, where the item enters the client (WorkQueue,
  // ListItemSource); readers use it and never parse `item` again. Unset for
  // an item whose string does not parse (its reader reports the error) and
  // for items from an ItemSource that does not call ParseWorkItem.
  std::optional<SliceSpec> spec;
  // Records read from the item, set by the reader (or pipeline) that read
  // it before it hands the item to ItemSource::ItemDone; a WorkQueue
  // reports it with the completion (QueueStats::records). -1: not counted.
  int64_t records = -1;
  // The size of the item's work when the plan was made (bytes of a file),
  // set by the coordinator when the plan cut the work into ranges; -1 when
  // not known (a whole-work item, an item from a custom ItemSource, an
  // older coordinator). File readers refuse a file whose size now differs,
  // FAILED_PRECONDITION "'PATH' changed since the plan was made": the
  // records appended after planning would otherwise be read by no item.
  int64_t work_size = -1;
};

// Sets item->spec from item->item (the one place a client parses an item
// string). Returns ParseItem's INVALID_ARGUMENT, naming the item and the
// field, and leaves spec unset when the string does not parse.
absl::Status ParseWorkItem(WorkItem* item);

// The parsed item: item.spec, or, for an item made without ParseWorkItem
// (a custom ItemSource), item.item parsed now. INVALID_ARGUMENT as
// ParseItem.
absl::StatusOr<SliceSpec> SpecOf(const WorkItem& item);

// True when the record starting at `offset` belongs to `item` (always, for
// an item that cannot be split). Readers call it before handing a record out.
bool ClaimRecord(const WorkItem& item, int64_t offset);

// Equal steps across ranks (WorkQueue::AgreeSteps): one participant's
// report for one pass (`key`) of `participants` participants.
struct StepReport {
  std::string key;          // the pass, e.g. "epoch-3"; the same on every rank
  std::string participant;  // e.g. "rank1-w0"
  int64_t participants = 1; // how many report under `key`, all told
  int64_t count = 0;        // batches yielded, including the one about to be
  bool done = false;        // no real batch left; later counts are padding
};

// The coordinator's answer (see WorkQueue::AgreeSteps).
struct StepTally {
  bool granted = false;   // the count was recorded (padding may be yielded)
  bool agreed = false;    // every participant is done: `steps` is final
  int64_t steps = 0;      // the agreed batches per participant
  int64_t max_count = 0;  // the largest count reported so far
  int64_t reported = 0;   // participants heard from
  int64_t done = 0;       // participants done
};

struct EpochStats {
  int64_t pending = 0;    // not handed out, or returned by expiry/release
  // Held by a worker right now and not done. An item a worker holds after
  // an earlier holder's late completion completed it (its run will be a
  // duplicate) counts as completed: pending + leased + completed + failed
  // is every item.
  int64_t leased = 0;
  int64_t completed = 0;  // completed exactly once
  int64_t epoch = 0;      // which epoch (0-based)
  int64_t failed = 0;     // set aside after max_attempts failed attempts
};

// An item set aside as failed (see QueueStats::failed).
struct FailedItemStats {
  std::string item;
  int64_t epoch = 0;
  int64_t index = 0;     // position of its planned item in the slice plan
  int64_t attempts = 0;  // failed attempts
  std::string reason;    // the last one's
};

struct WorkerStats {
  int64_t taken = 0;
  int64_t completed = 0;  // first completions only
  int64_t held = 0;       // leases held right now
  double items_per_second = 0;  // completed / seconds since first take
  int64_t records = 0;    // records reported with its completions (re-runs included)
  int64_t sessions = 0;   // its worker sessions open right now (a live client)
};

// A consistent snapshot of one queue.
struct QueueStats {
  std::string name;
  uint64_t seed = 0;
  int64_t num_items = 0;   // items per epoch (the slice plan's size)
  int64_t num_epochs = 0;
  int64_t pending = 0;     // summed over epochs
  int64_t leased = 0;      // summed over epochs (see EpochStats::leased)
  int64_t completed = 0;
  int64_t taken = 0;       // hand-outs, including repeats after expiry
  int64_t expired = 0;     // leases that timed out
  int64_t released = 0;    // leases given back by their worker
  int64_t given_back = 0;  // items taken ahead, given back unstarted (take-ahead)
  // Records read, as the workers' readers reported them with their
  // completions (first completions and re-runs; items completed without a
  // count add nothing). The status page's records/s.
  int64_t records = 0;
  // Completions of an item already completed by another lease (a real
  // re-run); a worker repeating the completion of its own lease is not one.
  int64_t duplicates = 0;
  // Completions refused since the coordinator started (in memory only): of
  // a lease never handed out, such as a grant lost in a coordinator crash
  // (whose item then ran twice), or of another worker's lease.
  int64_t refused_completions = 0;
  // Every item of every epoch is done: completed, or failed (see below).
  bool finished = false;
  // Tail rebalancing: held items split so far, and the ranges split off
  // that are not completed yet (they are counted in no epoch above).
  int64_t splits = 0;
  int64_t split_items_open = 0;
  // Items set aside after max_attempts failed attempts: never handed out
  // again, not completed. `failed_items` lists the first 1000 of them.
  int64_t failed = 0;
  int64_t max_attempts = 0;
  std::vector<FailedItemStats> failed_items;
  // Epochs whose every item is done. `epochs` lists every epoch when
  // num_epochs <= 100, else only the epochs in progress (at most 100,
  // lowest first); the counters above cover every epoch either way.
  int64_t epochs_done = 0;
  std::vector<EpochStats> epochs;
  std::map<std::string, WorkerStats> workers;
};

}  // namespace shardq

#endif  // SHARDQ_WORK_ITEM_H_
