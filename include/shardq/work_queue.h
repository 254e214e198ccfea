// shardq's WorkQueue: one global queue of work items shared by every worker
// that names it. Fast workers take more items, slow ones fewer, so an epoch
// ends for everyone at nearly the same moment.
//
//   shardq::WorkQueueOptions options;
//   options.works = {"data/a.txt", "data/b.txt"};
//   options.num_slices = 80;
//   auto queue = shardq::WorkQueue::Create(options);   // StatusOr
//   while (true) {
//     absl::StatusOr<shardq::WorkItem> item = (*queue)->Take();
//     if (absl::IsOutOfRange(item.status())) break;      // all completed
//     ... read item->item ...
//     (*queue)->Complete(*item);
//   }
//
// A WorkQueue object is one worker. It is thread-safe; several threads may
// share it (they then share its num_clients limit), or each thread may make
// its own WorkQueue with the same name to be a worker of its own.
#ifndef SHARDQ_WORK_QUEUE_H_
#define SHARDQ_WORK_QUEUE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "shardq/item_source.h"
#include "shardq/options.h"
#include "shardq/work_item.h"

namespace shardq {

class InputProducer;
class ItemStream;

class WorkQueue final : public LeaseSource {
 public:
  // Plans the slices (the files must exist: NOT_FOUND names a missing one),
  // then creates the queue or attaches to the queue of the same name.
  // INVALID_ARGUMENT names a bad option (empty works, num_epochs < 1,
  // num_slices < 1, num_clients < 1); FAILED_PRECONDITION when a queue of
  // that name exists with a different config (the message lists the fields).
  // With options.address empty the queue lives in this process.
  static absl::StatusOr<std::unique_ptr<WorkQueue>> Create(
      const WorkQueueOptions& options);

  // Attaches to an existing queue by options.name without planning (works
  // are ignored): for workers that did not create the queue. NOT_FOUND when
  // there is no such queue.
  static absl::StatusOr<std::unique_ptr<WorkQueue>> Attach(
      const WorkQueueOptions& options);

  // Stops heartbeats and releases every item still held, so that they go
  // back to the front of the queue at once instead of waiting for expiry.
  ~WorkQueue() override;

  // Leases the next item. Blocks while every remaining item is held by other
  // workers (one of them may die and its item come back). OUT_OF_RANGE when
  // every item of every epoch is completed; DEADLINE_EXCEEDED after
  // `timeout`; FAILED_PRECONDITION when this worker already holds
  // num_clients items.
  absl::StatusOr<WorkItem> Take(absl::Duration timeout = absl::InfiniteDuration());

  // Marks the item done. A completion of an item someone else completed
  // first (after this worker's lease expired) is OK and counted as a
  // duplicate. NOT_FOUND / PERMISSION_DENIED for a lease this worker never
  // held. An item whose reader stopped at a split the coordinator never
  // recorded (the lease was lost meanwhile) is released instead, so that
  // it is read again whole elsewhere: nothing is skipped.
  //
  // A lease lost in a coordinator crash is OK too: the coordinator writes
  // grants behind (it answers a take before the grant is on disk), so after
  // a crash and restart it may not know a lease this worker holds. It then
  // answers NOT_FOUND; the item is pending again there and will be read
  // again by some worker (records are delivered at least once). This
  // worker logs a warning to stderr, counts it in lost_leases() and
  // forgets the lease, rather than failing the training process.
  absl::Status Complete(const WorkItem& item);

  // Gives the item back unfinished: it goes to the front of the queue. OK
  // also when the coordinator no longer holds the lease for this worker
  // (it expired, or was lost in a coordinator crash): the item is back in
  // the queue either way.
  absl::Status Release(const WorkItem& item) override;

  // Gives back the unread rest of an item a reader stopped in, as noted by
  // NoteReturned: the item is split where the records returned in order
  // end, the part before is completed (with their count), and the rest
  // goes to the front of the queue as an item of its own; true. Without a
  // noted offset, for an item that cannot be split (no byte range, the
  // queue's split off) or when the coordinator refuses the split, the item
  // goes back whole, as Release; false. Records returned that will be
  // returned again (out of order after the split point, or all of them when
  // the item went back whole) are counted in records_read_again() and
  // logged. The destructor does the same for every item a reader returned
  // records of. A pipeline over this queue calls it for the items it holds
  // when its iterator is destroyed.
  absl::StatusOr<bool> ReleaseRest(const WorkItem& item) override;

  // Reports a failed attempt at the item (`reason` is shown by `shardq
  // status --failed`): it goes to the back of the queue, or, after the
  // queue's max_attempts failed attempts, is set aside as failed. Returns
  // true when it was set aside. A lease the coordinator no longer holds for
  // this worker is NOT_FOUND (the item is back in the queue already).
  absl::StatusOr<bool> Fail(const WorkItem& item, absl::string_view reason);

  // Gives back the items taken ahead (WorkQueueOptions::take_ahead) that
  // Take has not handed out yet, as if released: for a reader that stops
  // for good while this WorkQueue lives on (a pipeline being destroyed).
  // Best effort: an item whose lease is gone is back in the queue anyway.
  void ReleaseReady() override;

  // Ends this worker's use of the queue: gives back every item it holds
  // (taken ahead or returned by Take and not completed: whole; being read
  // by a reader or pipeline that returned records of it: the unread rest,
  // as ReleaseRest), stops renewing leases and ends its session. Each call
  // to the coordinator is tried once (a coordinator that is away: the
  // leases expire instead, and records returned of them are counted in
  // records_read_again()). Take, the readers and pipelines over this queue
  // fail with FAILED_PRECONDITION afterwards (CheckOpen): none of them
  // returns another record of an item given back here; Stats still
  // answers. Idempotent; the destructor calls it.
  void Close();
  // ItemSource: FAILED_PRECONDITION once Close was called.
  absl::Status CheckOpen() const override;

  // Gives back what a reader that stops for good holds (see
  // LeaseSource::GiveBackStopped): here, with a coordinator in this
  // process. With a remote one the calls go to the background thread and
  // this waits for them at most kGiveBackWait: a coordinator that is away
  // does not hold up the reader's end (a pipeline iterator's destructor);
  // the background thread goes on retrying (the leases stay renewed), and
  // the destructor gives back what is still held.
  void GiveBackStopped(const std::vector<StoppedItem>& items) override;
  static constexpr absl::Duration kGiveBackWait = absl::Seconds(5);

  // For a reader that may stop before the queue is finished, such as a
  // DataLoader worker of shardq.torch whose siblings hold the rest
  // (python/src/py_torch_support.cc says why it must not wait for them).
  // EndTakesIf decides, atomically with respect to this worker's takes,
  // whether they end: it holds new takes back, waits until those on their
  // way are answered, and when this worker then holds no lease and
  // `over()` returns true, ends them: every Take from then on returns
  // OUT_OF_RANGE. Otherwise takes go on. Nothing is held when they end, so
  // nothing is given back, and an item granted meanwhile is read by this
  // worker. A take still on its way a second past its poll (a slow or
  // absent coordinator) leaves it undecided: false, takes go on. Returns
  // whether the takes ended, or over()'s error (they go on). `over` runs
  // without this queue's lock and may call Stats().
  absl::StatusOr<bool> EndTakesIf(absl::FunctionRef<absl::StatusOr<bool>()> over);
  // How long one take waits at the coordinator before it asks again
  // (default 10 s), and so about the longest EndTakesIf waits.
  void SetTakePoll(absl::Duration poll);

  // Completions of leases that the coordinator no longer knew (lost in a
  // coordinator crash, see Complete) since this worker started.
  int64_t lost_leases() const;
  // Records this worker's readers returned of items it gave back unfinished
  // (ReleaseRest, the destructor) that will be returned again by whoever
  // reads the rest, since this worker started.
  int64_t records_read_again() const;
  // Records of items completed when read (a pipeline's complete_when_read)
  // or counted consumed early (pipeline::PipelineStats) that a destroyed
  // pipeline still held, never returned to anyone, since this worker
  // started; each such loss is also logged (NoteLost).
  int64_t records_lost() const;

  absl::StatusOr<QueueStats> Stats();
  // True when this worker may end its pass of a torch DataLoader: the
  // queue is not finished, nothing is pending, this worker holds nothing,
  // every open item is held, and each holder will read what it holds
  // without this worker: its id starts with `siblings` (this pass's
  // workers) or it has a worker session open. Asked of the coordinator
  // without listing the queue's workers (an older coordinator: over its
  // Stats()). For EndTakesIf's `over`.
  absl::StatusOr<bool> OnlyOthersHoldTheRest(absl::string_view siblings);

  // ItemSource: remembers how far `item` was read; sent with the next
  // heartbeat.
  void NoteProgress(const WorkItem& item, int64_t offset) override;
  // ItemSource: remembers what a reader returned of `item`, for
  // ReleaseRest, and its progress, as NoteProgress.
  void NoteReturned(const WorkItem& item, int64_t offset, int64_t in_order,
                    int64_t returned) override;
  // ItemSource: counts them in records_lost() and logs them.
  void NoteLost(const WorkItem& item, int64_t records) override;

  // Sends the progress noted so far now, synchronously (call before
  // SaveCheckpoint so that nothing already read is read again).
  absl::Status ReportProgress();

  // Equal steps across ranks: reports this participant's batch count for
  // one pass to the coordinator and returns the tally, at once (never
  // waits; a participant waiting for the others calls again). The
  // protocol: report count n before yielding real batch n; with no real
  // batch left, report done; then yield padding batch n + 1 only once a
  // report of n + 1 is `granted`, and stop at `steps` once `agreed`.
  // Every participant of the pass then yields the same number of batches,
  // and no one's count ever exceeds it. Soft state on the coordinator
  // (not journaled). INVALID_ARGUMENT / FAILED_PRECONDITION for a report
  // that breaks the protocol (a count going down, more participants than
  // announced, a count above the agreed one), naming the queue and key.
  absl::StatusOr<StepTally> AgreeSteps(const StepReport& report);

  // Saves the queue's checkpoint to `path` (after ReportProgress): which
  // items are completed and the unread rest of held ones. Save it next to
  // the model checkpoint; RestoreCheckpoint resumes from it. A held item
  // resumes after the records its reader returned in order: records a
  // shuffle returned beyond that point are returned again after a restore
  // (at least once). Of this worker's items, their count is logged and
  // returned by records_beyond_checkpoint() (other workers' are not known
  // here).
  absl::Status SaveCheckpoint(const std::string& path);
  // Records that this worker's readers returned of the items it held at
  // the last SaveCheckpoint, beyond their resume offsets (see above).
  int64_t records_beyond_checkpoint() const;

  // Creates queue `name` (empty: the name saved in the checkpoint) from the
  // checkpoint at `path` on the coordinator `options` select, and returns a
  // worker of it. FAILED_PRECONDITION when a queue of that name exists.
  static absl::StatusOr<std::unique_ptr<WorkQueue>> RestoreCheckpoint(
      const WorkQueueOptions& options, const std::string& path, const std::string& name = "");

  // The `input_dataset` shape: items one after another, each completed when
  // the next is requested.
  std::unique_ptr<ItemStream> InputDataset();

  // The `input_producer` shape: a local bounded proxy queue of `capacity`
  // items (0: num_clients), kept filled by a background thread. Each call
  // makes a new producer whose thread takes items for this worker, and all
  // of them share its num_clients leases: make one per WorkQueue and keep it
  // (Python's `input_producer()` returns the queue's one producer).
  std::unique_ptr<InputProducer> MakeInputProducer(int64_t capacity = 0);

  // ItemSource: NextItem() is Take(), ItemDone() is Complete().
  absl::StatusOr<WorkItem> NextItem() override { return Take(); }
  absl::Status ItemDone(const WorkItem& item) override { return Complete(item); }
  // The oldest item taken ahead (the one Take hands out next), if any.
  std::optional<WorkItem> PeekNextItem() override;
  // LeaseSource: TakeWithin(timeout) is Take(timeout).
  absl::StatusOr<WorkItem> TakeWithin(absl::Duration timeout) override { return Take(timeout); }
  absl::StatusOr<WorkItem> TakeWithinUnless(absl::Duration timeout,
                                            const std::atomic<bool>* cancel) override;

  const std::string& name() const override;
  const std::string& worker_id() const;
  uint64_t seed() const;
  int64_t num_items() const;
  int64_t num_epochs() const;
  int64_t num_clients() const override;
  // Leases held by this worker right now (items being read and items
  // taken ahead, see WorkQueueOptions::take_ahead).
  int64_t held() const;
  // Of those, items taken ahead and not handed out by Take yet.
  int64_t ready() const;

  // Opaque: the worker's state, its backend and its heartbeat thread
  // (src/client/work_queue.cc).
  class Impl;

 private:
  friend class WorkQueueFactory;  // src/client/work_queue_backend.h
  explicit WorkQueue(std::unique_ptr<Impl> impl);

  const std::unique_ptr<Impl> impl_;
};

// Items of a WorkQueue one after another; see WorkQueue::InputDataset.
// Not thread-safe.
class ItemStream {
 public:
  explicit ItemStream(WorkQueue* queue) : queue_(queue) {}
  // Releases an item still held (it was not finished).
  ~ItemStream();
  // Completes the previous item, then takes the next. OUT_OF_RANGE at end.
  absl::StatusOr<WorkItem> Next();

 private:
  WorkQueue* const queue_;
  std::optional<WorkItem> current_;
};

}  // namespace shardq

#endif  // SHARDQ_WORK_QUEUE_H_
