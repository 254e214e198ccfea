// Where readers get their work items from: a WorkQueue, the local proxy
// queue of an input producer, or a fixed list (tests, `shardq cat`).
#ifndef SHARDQ_ITEM_SOURCE_H_
#define SHARDQ_ITEM_SOURCE_H_

#include <atomic>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shardq/work_item.h"

namespace shardq {

class LeaseSource;

// Implementations say whether they are thread-safe.
class ItemSource {
 public:
  virtual ~ItemSource() = default;

  // The next item to read. Blocks while none is available yet; OUT_OF_RANGE
  // at end of input; any other error is the source's failure.
  virtual absl::StatusOr<WorkItem> NextItem() = 0;

  // Called by a reader once every record of `item` has been read out, so the
  // source can complete it (a crash before this re-reads the item: records
  // are delivered at least once, never skipped).
  virtual absl::Status ItemDone(const WorkItem& item) = 0;

  // Called by a reader with the offset up to which it has returned the
  // records of `item` (bytes for files, rows for tables; absolute like the
  // item's start/end). A WorkQueue sends it with its next heartbeat, so a
  // checkpoint can resume the item where reading stopped. Default: ignored.
  virtual void NoteProgress(const WorkItem& item, int64_t offset) {}
  // Called by a reader with what it has returned of `item` so far, so that
  // a source that gets the item back unfinished (the reader stopped, its
  // process is closing) can give back only the unread rest (see
  // LeaseSource::ReleaseRest): `returned` of its records were returned to
  // the consumer, and the first `in_order` of them are every record before
  // `offset` (the resume offset; -1 when none is known). Records returned
  // after `offset` (out of order, through a shuffle) would be returned again
  // by whoever reads the rest. The latest call counts. It notes `offset` as
  // NoteProgress does too, so a reader calls only this one. Default:
  // NoteProgress(item, offset) when offset >= 0.
  virtual void NoteReturned(const WorkItem& item, int64_t offset, int64_t in_order,
                            int64_t returned) {
    if (offset >= 0) NoteProgress(item, offset);
  }
  // Called by a reader that stops for good while it still holds `records`
  // records of `item` that it will never return, after it already passed
  // the item to ItemDone (a pipeline that completes items when they are
  // read, or that counted records consumed early at a stall, destroyed
  // with them in its buffers): they are lost. Default: ignored.
  virtual void NoteLost(const WorkItem& item, int64_t records) {}

  // OK while the source is open; once it is closed (WorkQueue::Close),
  // the error that says so. Readers check it at each call, so that a
  // reader in an item the source gave back when it closed stops there
  // instead of returning more of its records (someone else reads them).
  // Cheap (no lock). Default: always open.
  virtual absl::Status CheckOpen() const { return absl::OkStatus(); }

  // The item NextItem would return next, when the source has it at hand
  // already (an item a WorkQueue took ahead, one an input producer
  // buffered); nullopt when it has none yet or cannot tell. A hint, never
  // a promise (the item may still go elsewhere): a reader uses it to start
  // fetching a remote item's bytes while it reads the one before. Does not
  // block. Default: nullopt.
  virtual std::optional<WorkItem> PeekNextItem() { return std::nullopt; }

  // True when NextItem waits until items handed out before are done (an
  // input producer at its capacity): a reader that holds several items
  // before it finishes one, as the pipeline does, cannot read from it.
  virtual bool NextWaitsForItemsDone() const { return false; }

  // This source as a LeaseSource, when its items are leases of a shared
  // queue; null otherwise.
  virtual LeaseSource* leases() { return nullptr; }
};

// A source whose items are leases of a shared queue (a WorkQueue): a reader
// may also take with a deadline, give an item back unread, and knows how
// many items it may hold at once. The pipeline reads through this
// interface, so it needs no particular queue.
class LeaseSource : public ItemSource {
 public:
  LeaseSource* leases() final { return this; }

  // The next item, waiting at most `timeout` (DEADLINE_EXCEEDED then);
  // otherwise as NextItem.
  virtual absl::StatusOr<WorkItem> TakeWithin(absl::Duration timeout) = 0;
  // As TakeWithin, but gives up (CANCELLED) soon after *cancel becomes
  // true, also while it waits out a coordinator that is away (which a
  // WorkQueue otherwise does for up to 10 minutes): for a reader that may
  // stop meanwhile (a pipeline's fetcher). Default: TakeWithin.
  virtual absl::StatusOr<WorkItem> TakeWithinUnless(absl::Duration timeout,
                                                    const std::atomic<bool>* cancel) {
    (void)cancel;
    return TakeWithin(timeout);
  }
  // Gives an item back unread: it goes to the front of the queue.
  virtual absl::Status Release(const WorkItem& item) = 0;
  // Gives back what is left of an item a reader stopped in (after
  // NoteReturned): the part before the offset noted for it, whose records
  // were all returned, is completed, and the rest goes to the front of the
  // queue as an item of its own (a split); true then. false when the item
  // went back whole instead, as Release (nothing returned in order, an item
  // that cannot be split there). Default: Release.
  virtual absl::StatusOr<bool> ReleaseRest(const WorkItem& item) {
    absl::Status s = Release(item);
    if (!s.ok()) return s;
    return false;
  }
  // Gives back the items taken ahead and not handed out yet.
  virtual void ReleaseReady() = 0;
  // An item held by a reader that stops for good, and whether the reader
  // returned records of it (NoteReturned was called for it).
  struct StoppedItem {
    WorkItem item;
    bool partly_returned = false;
  };
  // Called once by a reader that stops for good (a destroyed pipeline
  // iterator) with the items it holds: gives back the unread rest of each
  // (ReleaseRest) or the whole item (Release), then the items taken ahead
  // (ReleaseReady). Best effort: an item whose lease is gone is back in the
  // queue anyway. May return before the queue's coordinator answered (a
  // WorkQueue with a remote coordinator that is away waits a few seconds,
  // then leaves the rest to its background thread). Default: the calls
  // above, here.
  virtual void GiveBackStopped(const std::vector<StoppedItem>& items) {
    for (const StoppedItem& stopped : items) {
      if (stopped.partly_returned) {
        ReleaseRest(stopped.item).IgnoreError();
      } else {
        Release(stopped.item).IgnoreError();
      }
    }
    ReleaseReady();
  }
  // How many items this reader may hold at once (being read).
  virtual int64_t num_clients() const = 0;
  // The queue's name, for messages.
  virtual const std::string& name() const = 0;
};

// Hands out a fixed list of item strings once, in order. ItemDone is a
// no-op. Not thread-safe.
class ListItemSource final : public ItemSource {
 public:
  explicit ListItemSource(std::vector<std::string> items);
  absl::StatusOr<WorkItem> NextItem() override;
  absl::Status ItemDone(const WorkItem& item) override;

 private:
  std::deque<std::string> items_;
  int64_t next_index_ = 0;
};

}  // namespace shardq

#endif  // SHARDQ_ITEM_SOURCE_H_
