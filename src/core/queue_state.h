// The state of one work queue: pending items per epoch, leases with
// deadlines, completions, expiries and counters. Pure logic: no I/O, no
// clock, no threads — every call takes the current time `now`, so tests
// drive it with a fake clock and the simulator with a virtual one.
//
// Rules enforced here (SPEC.md "Leases, failures, accounting"):
//  * an expired or released item goes back to the FRONT of the queue;
//  * each (epoch, item) is completed once; a later completion of it from
//    another lease that ended (expired, released) is counted as a
//    duplicate and changes nothing else;
//  * a late completion from an expired lease counts if the item is not yet
//    completed (the first completion counts);
//  * a completion is accepted only from the worker a lease was handed out
//    to: a lease never handed out is NOT_FOUND, another worker's
//    PERMISSION_DENIED. The holder repeating the completion of its own
//    lease (a lost answer, retried) is answered kDuplicate ("already
//    completed, nothing changed") and counted nowhere. Ended leases are remembered for this (the last
//    kEndedLeasesKept of them; an older one is NOT_FOUND);
//  * a failed attempt (Fail) sends the item to the BACK of the pending
//    items; after config.max_attempts failed attempts it is set aside as
//    failed: never handed out again, counted and listed in Stats;
//  * Take reports end of input only when every item of every epoch is
//    done (completed or failed); while items are only leased elsewhere it
//    says "wait";
//  * a worker holds at most num_clients leases;
//  * tail rebalancing (config.split): when a worker asks for work and
//    nothing is pending, the held item expected to finish last is proposed
//    a split point (ProposeSplit, inside Take). Its holder answers with
//    AcceptSplit: its item becomes [start, S) and [S, end) a new "extra"
//    item at the front of the queue. A planned item counts as completed
//    when its own (head) range is; extras are completed on their own and
//    the queue is finished only when every extra is too. Take-ahead: an
//    item a busy worker (holding several) has not started is proposed
//    first, at its start; the holder answering its start gives it back
//    whole, as a release (not a failed attempt).
//
// Epochs are materialised lazily: the order of epoch e+1 is generated when
// the pending items of epoch e run out, so memory holds at most two epochs'
// orders and items of the next epoch flow while stragglers finish the last.
// Only epochs in progress have a record (completion bits and counts); an
// epoch's order is a pure function of seed and epoch, so memory does not
// grow with num_epochs: an epoch below the next one to materialise without
// a record is done, one at or above it untouched.
//
// Durability: every change of state is a journal::Update passed to Apply();
// the public operations only decide which update to make. An update sink,
// when set, sees every applied update in order (the coordinator journals
// them); recovery rebuilds the state from a snapshot and replays the
// journal through the same Apply(). Heartbeats and progress reports are not
// journaled: a recovered state gives every lease a fresh lease period.
//
// Thread-compatible: callers serialise access (the backends hold a mutex).
#ifndef SHARDQ_CORE_QUEUE_STATE_H_
#define SHARDQ_CORE_QUEUE_STATE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/shardq/journal.pb.h"
#include "shardq/work_item.h"
#include "src/core/ended_leases.h"
#include "src/core/item_table.h"
#include "src/types/queue_types.h"

namespace shardq {

// Limits on what a queue may be (ValidateConfig enforces them, naming the
// field and the limit; docs/cli.md "Limits" lists them).
// Epochs per queue.
inline constexpr int64_t kMaxEpochs = 100'000'000;
// Items in a slice plan (one epoch).
inline constexpr int64_t kMaxItemsPerQueue = 1'000'000;
// Bytes of one item string, and of a whole plan (all items together).
inline constexpr int64_t kMaxItemBytes = 4096;
inline constexpr int64_t kMaxPlanBytes = int64_t{128} << 20;
// Lease ids are ((epoch * num_items + index) << 20) | sequence: items x
// epochs (plus ranges split off) must stay below this many hand-out slots.
inline constexpr int64_t kMaxHandOutSlots = int64_t{1} << 43;
// config.max_attempts.
inline constexpr int64_t kMaxAttemptsLimit = 1000;
// config.lease_timeout of a queue created now (CoordinatorImpl::CreateQueue;
// a queue recovered or restored keeps what it had): an item whose worker
// died must go to another within a day, and an infinite (or NaN) timeout
// would hold it forever.
inline constexpr absl::Duration kMaxLeaseTimeout = absl::Hours(24);
// Bytes of a failure reason kept (longer ones are cut).
inline constexpr size_t kMaxFailureReasonBytes = 1024;
// Bytes of a worker name.
inline constexpr size_t kMaxWorkerNameBytes = 256;
// Epochs listed by Stats: every epoch up to this many, else those in
// progress, at most this many. Failed items listed by Stats, at most.
inline constexpr int64_t kMaxEpochsListed = 100;
inline constexpr int64_t kMaxFailedListed = 1000;

// Field names on which `requested` disagrees with `existing`, e.g.
// {"num_epochs (existing 2, requested 3)"}. An unset requested seed matches
// any seed; split_min_residual is compared only when both split. Empty
// when the configs are compatible.
std::vector<std::string> ConfigDifferences(const QueueConfig& existing,
                                           const QueueConfig& requested);

// INVALID_ARGUMENT naming the field when the config cannot make a queue.
absl::Status ValidateConfig(const QueueConfig& config);
// The part of ValidateConfig that checks the limits above.
absl::Status ValidateLimits(const QueueConfig& config);

// The wire/journal form of a config (seed_set tells whether seed is set).
void ConfigToProto(const QueueConfig& config, v1::QueueConfig* out);
QueueConfig ConfigFromProto(const v1::QueueConfig& config);

// ConfigDifferences for an existing queue whose plan is `existing_items`
// (a QueueState's config holds no items; see QueueState::items()).
std::vector<std::string> ConfigDifferences(const QueueConfig& existing,
                                           const ItemTable& existing_items,
                                           const QueueConfig& requested);
// ValidateConfig for a config whose plan of `num_items` items is already
// an ItemTable (config.items is empty): every check but the item strings'.
absl::Status ValidateCompactConfig(const QueueConfig& config, int64_t num_items);

enum class TakeOutcome { kItem, kWait, kEndOfInput };
struct TakeResult {
  TakeOutcome outcome = TakeOutcome::kWait;
  WorkItem item;  // set when outcome == kItem
  // kWait only: the lease a split was just proposed for (0: none).
  uint64_t proposed_lease = 0;
};

// Called with every update applied to a QueueState, in order.
using UpdateSink = std::function<void(const journal::Update&)>;

class QueueState {
 public:
  // `config.seed` must be set. INVALID_ARGUMENT on a bad config.
  static absl::StatusOr<std::unique_ptr<QueueState>> Create(QueueConfig config);

  // The state a creating update (create or restore) makes.
  static absl::StatusOr<std::unique_ptr<QueueState>> FromCreation(
      const journal::Update& update);

  // The update that creates a queue of `config` (seed must be set), in
  // creation format kCreationFormat: the plan as an ItemTable.
  static journal::Update CreationUpdate(const QueueConfig& config, absl::Time now);
  // The formats this version writes (and the newest it reads; it also
  // reads format 1, the plan as item strings, and snapshot format 2, the
  // ended leases as LeaseRecords): journal::CreateQueue.format and
  // journal::QueueSnapshot.format. A newer one is FAILED_PRECONDITION.
  static constexpr uint32_t kCreationFormat = 2;
  static constexpr uint32_t kSnapshotFormat = 3;
  // The update that creates a queue from a checkpoint (INVALID_ARGUMENT if
  // the checkpoint does not fit its own config). `name` overrides the
  // checkpoint's queue name when non-empty.
  static absl::StatusOr<journal::Update> RestoreUpdate(journal::Checkpoint checkpoint,
                                                       const std::string& name,
                                                       absl::Time now);

  // Rebuilds a state from ToSnapshot() (format kSnapshotFormat, or formats
  // 1 and 2 of earlier versions); every lease gets deadline now + lease_timeout.
  // DATA_LOSS when the snapshot is inconsistent; FAILED_PRECONDITION
  // naming the format when it is newer than kSnapshotFormat.
  static absl::StatusOr<std::unique_ptr<QueueState>> FromSnapshot(
      const journal::QueueSnapshot& snapshot, absl::Time now);
  journal::QueueSnapshot ToSnapshot() const;

  // A copy of this state without the update sink, to snapshot outside the
  // caller's lock: it shares the (immutable) item table, so it costs a copy
  // of the pending order and the bounded records, not of the plan.
  std::unique_ptr<QueueState> Clone() const;

  // Completed items and the unread rest of held items (from their last
  // reported progress), for a training job's checkpoint.
  journal::Checkpoint ToCheckpoint() const;

  // Applies one non-creating update. DATA_LOSS when it does not fit the
  // state (a journal from another history).
  absl::Status Apply(const journal::Update& update);

  // Sees every update applied from now on.
  void set_update_sink(UpdateSink sink) { sink_ = std::move(sink); }

  // Gives every lease the deadline now + lease_timeout (after recovery).
  void ResetDeadlines(absl::Time now);

  // How many lease ids SkipLeaseIdsAfterRecovery() leaves unused. A
  // coordinator that hands out grants before they are durable must keep
  // fewer than this many answered and not yet durable per queue.
  static constexpr uint64_t kLeaseIdsSkippedAtRecovery = uint64_t{1} << 13;

  // After recovery: the next lease ids continue kLeaseIdsSkippedAtRecovery
  // past the last journaled one. Grants answered before a crash but not yet
  // durable are not in the journal; without the gap the next grants would
  // reuse exactly their ids (the same front item, the same sequence), and a
  // worker still holding a lost grant would complete someone else's lease.
  // Not journaled: replay takes the sequence from the journaled lease ids
  // (see ApplyLease), so the gap survives later recoveries.
  void SkipLeaseIdsAfterRecovery();

  // Records that the holder of `lease_id` has consumed its item up to
  // `offset` (bytes for files, rows for tables; absolute, like the item's
  // start/end) at `now`; the rate of progress feeds split decisions. In
  // memory only. NOT_FOUND / PERMISSION_DENIED as Release.
  absl::Status ReportProgress(absl::string_view worker, uint64_t lease_id,
                              int64_t offset, absl::Time now);

  // Expires overdue leases, then leases the next pending item to `worker`.
  // When nothing is pending (kWait), proposes on behalf of `worker` a split
  // (ProposeSplit) or, with splitting off, the give-back of an item another
  // worker keeps ready and has not started (ProposeGiveBack).
  // FAILED_PRECONDITION when the worker already holds num_clients items
  // plus `ahead` (the items its client keeps ready beyond those it reads,
  // WorkQueueOptions::take_ahead; at most kMaxTakeAhead count). An item
  // granted beyond num_clients is one kept ready: until its holder reports
  // reading it, it may be given back whole to an idle worker
  // (ProposeGiveBack), even when it is the only item its holder holds.
  // INVALID_ARGUMENT for an empty worker name.
  absl::StatusOr<TakeResult> Take(absl::string_view worker, absl::Time now,
                                  int64_t ahead = 0);

  // Picks the held item with the latest estimated finish (from its
  // holder's reported offset and rate) and records a proposed split point
  // that lets `asker` (at its own rate) and the holder finish together.
  // At most one proposal per asker is outstanding; items whose holder
  // refused, items without a byte/row range and items too short to leave
  // split_min_residual on both sides are skipped. Preferred to all that:
  // the item a worker holding several was granted last, while nothing past
  // its start is reported, proposed at its start (give it back whole).
  // Proposals are soft state (not journaled).
  // Returns the lease proposed for, or 0 when none.
  uint64_t ProposeSplit(absl::string_view asker, absl::Time now);

  // The holder's answer to a proposal: `split_point` >= the proposed point
  // where its reader will stop, or -1 to refuse (the lease is then never
  // proposed again). An accepted split is journaled (Update.split) and
  // returns true. NOT_FOUND / PERMISSION_DENIED as Release (the holder
  // must then not complete the item: it is read again whole elsewhere);
  // INVALID_ARGUMENT for a point outside (start, end) or before the one
  // proposed. `split_point` equal to the item's start gives the whole item
  // back (journaled as a release: it goes to the front of the queue, no
  // failed attempt) and returns true, whatever point was proposed;
  // INVALID_ARGUMENT when progress past the start was reported.
  absl::StatusOr<bool> AcceptSplit(absl::string_view worker, uint64_t lease_id,
                                   int64_t split_point, absl::Time now);

  // Completes the item of `lease_id`. kDuplicate (and no other change) when
  // the item was already completed by another lease. NOT_FOUND for a lease
  // never handed out (or ended longer ago than kEndedLeasesKept leases);
  // PERMISSION_DENIED when the lease is or was another worker's. The
  // worker completing its own completed lease again gets kDuplicate and
  // nothing changes (nothing is journaled, no duplicate is counted).
  // `records` (0: not counted) is how many records the worker read from
  // the item: summed into Stats().records and the worker's records when the
  // completion is journaled (a first completion or a re-run);
  // INVALID_ARGUMENT when negative or above kMaxRecordsPerItem.
  absl::StatusOr<CompleteOutcome> Complete(absl::string_view worker,
                                           uint64_t lease_id, absl::Time now,
                                           int64_t records = 0);
  // (Counts refusals in Stats().refused_completions, in memory only.)

  // Gives the item back at once: it goes to the front of the queue.
  // NOT_FOUND / PERMISSION_DENIED as for Complete.
  absl::Status Release(absl::string_view worker, uint64_t lease_id,
                       absl::Time now);

  // `worker` failed to process the item of `lease_id` (`reason` is kept,
  // cut to kMaxFailureReasonBytes): the item goes to the BACK of the
  // pending items, or, at its config.max_attempts-th failed attempt, is
  // set aside as failed. Returns true when it was set aside.
  // NOT_FOUND / PERMISSION_DENIED as Release.
  absl::StatusOr<bool> Fail(absl::string_view worker, uint64_t lease_id,
                            absl::string_view reason, absl::Time now);

  // Renews `worker`'s leases to now + lease_timeout. Returns the lease ids
  // of `lease_ids` that the worker no longer holds (expired, completed,
  // unknown or someone else's), which the worker should stop reading, and
  // the split proposals awaiting its answer.
  HeartbeatReply Heartbeat(absl::string_view worker,
                           const std::vector<uint64_t>& lease_ids,
                           absl::Time now);

  // Returns every lease whose deadline is <= now to the front of the queue.
  // Returns how many expired.
  int64_t ExpireLeases(absl::Time now);

  // True while proposals may come: nothing is pending and items are held
  // (a take would be told to wait), so a take may propose a split or, with
  // splitting off too, the give-back of an item kept ready.
  bool SplitsPossible() const { return !leases_.empty() && !PeekFront().has_value(); }

  // Earliest lease deadline; InfiniteFuture when nothing is leased.
  absl::Time NextDeadline() const;

  // True when a take now would not be told to wait: an item is pending, or
  // the queue is finished (a waiting take is worth trying again).
  bool TakeWouldAnswer() const { return Finished() || PeekFront().has_value(); }

  // ---- Worker sessions (queue_state_sessions.cc): soft state, not
  // journaled. While `worker` has a session open, its leases never expire;
  // once its last session closes they expire lease_timeout after the close
  // (or later, when renewed by a heartbeat). Nothing runs per session:
  // ExpireLeases moves a due lease of such a worker to its new deadline
  // when it comes across it (once per lease timeout per lease at most).
  void OpenSession(absl::string_view worker);
  // `now`: when the session closed. Every OpenSession needs one close.
  void CloseSession(absl::string_view worker, absl::Time now);
  // The leases `worker` holds right now (any order).
  std::vector<uint64_t> LeasesHeldBy(absl::string_view worker) const;
  // Sessions `worker` has open (tests, status).
  int64_t SessionsOpen(absl::string_view worker) const;
  // The worker holding `lease_id`; nullptr when it is not held.
  const std::string* HolderOf(uint64_t lease_id) const;
  // The split proposal awaiting the answer of `lease_id`'s holder, if any.
  std::optional<SplitProposal> ProposalFor(uint64_t lease_id) const;
  // The end-of-pass rule of shardq.torch (OnlySiblingsHoldTheRest in
  // src/core/pass_rule.h) over this state, as it would answer over
  // Stats(): true when the queue is not finished, nothing is pending,
  // `worker` holds nothing, every open item is held, and every holder is a
  // worker whose id starts with `siblings` or has a session open. Costs
  // O(epochs in progress + holders without a session), not O(workers):
  // every starving DataLoader worker of a large job asks it often.
  bool PassOver(absl::string_view worker, absl::string_view siblings) const;

  // True when every item of every epoch is done: completed or failed.
  bool Finished() const {
    return total_completed_ + failed_planned_ == total_work() &&
           extras_completed_ + extras_failed_ == static_cast<int64_t>(extras_.size());
  }

  // How many ended leases are remembered (see Complete).
  static constexpr size_t kEndedLeasesKept = size_t{1} << 16;
  // How many workers' records (Stats().workers, snapshots) a queue keeps.
  // Past it, the records of workers that hold nothing are dropped, the
  // least recently active first, down to three quarters of it: a job whose
  // workers come under new names (shardq.torch names each DataLoader
  // worker per pass) would otherwise grow every snapshot and every Stats()
  // for good. A worker that holds an item is never dropped; the queue's
  // own counts (completed, records, ...) do not change.
  static constexpr size_t kWorkersKept = size_t{1} << 14;
  // The most records one completion may report (keeps the sums far from
  // overflow).
  static constexpr int64_t kMaxRecordsPerItem = int64_t{1} << 40;

  // Epochs with a record (in progress), for tests of bounded memory.
  int64_t epoch_records() const { return static_cast<int64_t>(epochs_.size()); }

  QueueStats Stats(absl::Time now) const;
  // The queue's config. Its `items` is empty: the plan is items().
  const QueueConfig& config() const { return config_; }
  // The slice plan (immutable, shared with clones).
  const std::shared_ptr<const ItemTable>& items() const { return items_; }
  uint64_t seed() const { return *config_.seed; }

 private:
  struct Ref {
    int64_t epoch = 0;
    int64_t index = 0;
  };
  struct Lease {
    Ref ref;
    std::string worker;
    absl::Time deadline;
    int64_t progress = -1;  // last reported consumed offset; -1: none
    // Soft state for split decisions (not journaled; reset on recovery).
    absl::Time granted = absl::InfinitePast();
    absl::Time progress_time = absl::InfinitePast();
    int64_t first_progress = -1;
    absl::Time first_progress_time = absl::InfinitePast();
    // The item's range, parsed once (start < 0: the item has no range).
    int64_t start = -1;
    int64_t end = -1;
    int64_t proposal = -1;  // split point proposed and not yet answered
    std::string proposed_for;  // the asker of that proposal
    bool no_split = false;  // the holder refused a split
    // Granted beyond num_clients (taken ahead) and not known to be started:
    // may be given back whole (ProposeGiveBack). Not soft state: set when
    // a lease is applied (so a journal replay sets it too) and kept in
    // snapshots (LeaseRecord.ahead), so a recovered or new leader knows it.
    bool ahead = false;
  };
  struct WorkerRecord {
    int64_t taken = 0;
    int64_t completed = 0;
    int64_t records = 0;  // Complete's `records`, summed
    int64_t held = 0;
    absl::Time first_take = absl::InfinitePast();
    absl::Time last_completion = absl::InfinitePast();
    double unit_rate = 0;  // units (bytes/rows) per second; soft state
  };
  // A range split off a held item. Refs to extra k have index
  // num_items() + k; its lease ids use slot total_work() + k.
  struct Extra {
    int64_t epoch = 0;
    int64_t parent = 0;  // index of the planned item it came from
    ItemRange range;     // of the parent's work
    bool completed = false;
    bool failed = false;
  };
  // An epoch in progress (see the top of this file).
  struct EpochRecord {
    std::vector<bool> completed_bits;  // empty: none (or all) completed
    int64_t completed = 0;
    int64_t leased = 0;
    int64_t failed = 0;
  };
  // Failed attempts at an item (by slot).
  struct Failure {
    Ref ref;
    int64_t attempts = 0;
    std::string reason;
  };

  QueueState(QueueConfig config, std::shared_ptr<const ItemTable> items);
  QueueState(const QueueState&) = default;
  // Create() for a plan already in compact form (config.items empty).
  static absl::StatusOr<std::unique_ptr<QueueState>> CreateCompact(
      QueueConfig config, std::shared_ptr<const ItemTable> items);
  // The state of a format 2 snapshot, and of a format 1 one.
  static absl::StatusOr<std::unique_ptr<QueueState>> FromSnapshotItems(
      const journal::QueueSnapshot& snapshot);
  absl::Status LoadRanges(const journal::QueueSnapshot& snapshot, const std::string& what);

  int64_t num_items() const { return items_->size(); }
  int64_t total_work() const { return num_items() * config_.num_epochs; }
  // Lease ids encode the (epoch, item) they lease, so that a completion of
  // an already completed item is recognised without remembering every
  // lease ever issued: id = ((epoch * num_items + index) << 20) | sequence.
  uint64_t MakeLeaseId(Ref ref);
  std::optional<Ref> DecodeLeaseId(uint64_t lease_id) const;
  bool IsExtra(Ref ref) const { return ref.index >= num_items(); }
  Extra& ExtraOf(Ref ref) { return extras_[static_cast<size_t>(ref.index - num_items())]; }
  const Extra& ExtraOf(Ref ref) const {
    return extras_[static_cast<size_t>(ref.index - num_items())];
  }
  bool IsCompleted(Ref ref) const;
  bool IsFailed(Ref ref) const { return failed_.count(Slot(ref)) > 0; }
  bool IsDone(Ref ref) const { return IsCompleted(ref) || IsFailed(ref); }
  void MarkCompleted(Ref ref, const std::string& worker, absl::Time now);
  void MarkFailed(const Failure& failure);
  // Drops the record of `epoch` once it is materialised and every item of
  // it is done and none is leased.
  void MaybeRetire(int64_t epoch);
  // Remembers how lease `lease_id` ended (see Complete).
  void RememberEnded(uint64_t lease_id, Ref ref, const std::string& worker, LeaseEnd how);
  // The completion bits of `epoch` as a checkpoint stores them.
  std::vector<bool> CompletedBits(int64_t epoch) const;
  absl::Status ApplyFail(const journal::Fail& fail);
  // Sets the records that snapshots hold (queue_state_epochs.cc).
  absl::Status LoadEpochs(const journal::QueueSnapshot& snapshot, const std::string& what);
  void StoreEpochs(journal::QueueSnapshot* out) const;
  // Generates the next epoch's order into pending_ (skipping completed
  // items); false when none is left.
  bool MaterializeNextEpoch();
  // Drops completed items from the front and materialises epochs until the
  // front is an item to hand out; false when nothing is pending.
  bool PrepareFront();
  // The item PrepareFront would put at the front, without changing
  // anything: only applied updates may change the state, so that a replayed
  // journal rebuilds exactly the same state.
  std::optional<Ref> PeekFront() const;
  // Applies `update` and passes it to the sink; `outcome` (optional) gets
  // the result of a completion.
  absl::Status Commit(const journal::Update& update,
                      CompleteOutcome* outcome = nullptr);
  absl::Status ApplyInternal(const journal::Update& update, CompleteOutcome* outcome);
  absl::Status ApplyLease(const journal::Lease& lease, absl::Time now);
  absl::StatusOr<CompleteOutcome> ApplyComplete(const journal::Complete& complete,
                                                absl::Time now);
  absl::Status ApplyRelease(const journal::Release& release);
  absl::Status ApplyExpire(const journal::Expire& expire);
  absl::Status ApplyRestore(const journal::Checkpoint& checkpoint);
  // The item string a ref hands out, rendered from its range.
  std::string ItemString(Ref ref) const;
  // The planned item a ref belongs to, and the range it hands out.
  int64_t PlannedIndex(Ref ref) const { return IsExtra(ref) ? ExtraOf(ref).parent : ref.index; }
  ItemRange RangeOf(Ref ref) const;
  // The range of `item`, a string of planned item `index` (a checkpoint's
  // residual, a format 1 snapshot's override or extra).
  absl::StatusOr<ItemRange> RangeFromString(int64_t index, const std::string& item) const;
  int64_t Slot(Ref ref) const {
    return IsExtra(ref) ? total_work() + (ref.index - num_items())
                        : ref.epoch * num_items() + ref.index;
  }
  // Sets the range a ref hands out (a split head).
  void SetRange(Ref ref, ItemRange range);
  absl::Status ApplySplit(const journal::Split& split);
  // An update stamped `now` (queue_state.cc).
  static journal::Update NewUpdate(absl::Time now);
  // Whether a lease slot fits the bits above the lease sequence.
  static bool SlotFits(int64_t slot);
  // Leases per epoch count planned items only; extras are counted apart.
  void CountLease(Ref ref, int delta);
  void DropLease(uint64_t lease_id, const Lease& lease);
  // The lease if `worker` holds it; NOT_FOUND / PERMISSION_DENIED otherwise.
  absl::StatusOr<Lease*> HeldBy(absl::string_view worker, uint64_t lease_id);
  // Removes a lease (remembering it ended `how`) and puts its item at the
  // front (release, expiry) or, for a failure, nowhere (ApplyFail decides);
  // DATA_LOSS naming `verb` when the journal names an unknown lease.
  absl::StatusOr<Ref> ReturnToFront(uint64_t lease_id, absl::string_view verb, LeaseEnd how);
  // The record of `worker`, made if it has none (see kWorkersKept).
  WorkerRecord& Worker(absl::string_view worker);
  // Drops the records of the longest idle workers that hold nothing (see
  // kWorkersKept). Deterministic: from journaled state only, so that a
  // replay drops the same records.
  void ForgetIdleWorkers();

  QueueConfig config_;  // items moved to items_
  std::shared_ptr<const ItemTable> items_;
  std::deque<Ref> pending_;  // front is handed out next
  int64_t next_epoch_ = 0;   // first epoch not yet materialised
  std::map<int64_t, EpochRecord> epochs_;  // epochs in progress
  absl::flat_hash_map<uint64_t, Lease> leases_;
  std::set<std::pair<absl::Time, uint64_t>> deadlines_;
  // Leases that ended (at most kEndedLeasesKept): a late completion
  // counts, a repeated one is told apart from a bogus one.
  EndedLeases ended_{kEndedLeasesKept};
  // Items with failed attempts and not yet done; items set aside as failed.
  absl::flat_hash_map<int64_t, Failure> attempts_;
  std::map<int64_t, Failure> failed_;
  int64_t failed_planned_ = 0;
  int64_t extras_failed_ = 0;
  std::map<std::string, WorkerRecord, std::less<>> workers_;
  int64_t holders_ = 0;  // workers_ whose held > 0
  // Ranges that replace planned items (by slot): split heads, residual
  // ranges after a restore.
  absl::flat_hash_map<int64_t, ItemRange> overrides_;
  std::vector<Extra> extras_;
  int64_t extras_completed_ = 0;
  int64_t extras_leased_ = 0;
  int64_t splits_ = 0;
  // Sum and count of the workers' positive unit_rate (soft state).
  double rate_sum_ = 0;
  int64_t rate_count_ = 0;
  // Sets lease.start/end from its item's range.
  void ParseRange(Lease& lease) const;
  // Worker sessions (queue_state_sessions.cc).
  struct SessionPresence {
    int64_t open = 0;
    absl::Time closed = absl::InfinitePast();  // when the last one closed
  };
  absl::flat_hash_map<std::string, SessionPresence> sessions_;
  // Workers holding an item with no session open (for PassOver), kept
  // with every change of a worker's held count or open sessions.
  absl::flat_hash_set<std::string> sessionless_holders_;
  // Keeps sessionless_holders_ for `worker` after its held count or its
  // sessions changed.
  void NoteHolder(const std::string& worker);
  // Leased items of the epochs in progress that are not done (what
  // Stats() calls leased), and per epoch in *per_epoch when not null. An
  // item is leased at most once at a time, but it can be done while
  // leased: an earlier holder's late completion (its lease had expired and
  // the item was handed out again) completes it. Such an item counts as
  // completed, not leased, so that pending + leased + completed + failed
  // is every item. O(leases).
  int64_t LeasedInEpochs(std::map<int64_t, int64_t>* per_epoch = nullptr) const;
  // For ExpireLeases: when lease `lease_id` (due by `now`) belongs to a
  // worker with a session open, or closed less than lease_timeout ago,
  // moves its deadline past `now` and returns true.
  bool KeepAliveBySession(uint64_t lease_id, absl::Time now);
  // Take-ahead (queue_state_split.cc): proposes that a busy worker (one
  // holding several items) give back whole an item it has not started.
  // nullopt: no such item; 0: the asker already has a proposal out.
  std::optional<uint64_t> ProposeGiveBack(absl::string_view asker);
  UpdateSink sink_;
  // The sequence part of the last lease id issued (mod 2^20 - 1); taken
  // from each applied lease's id, so replay restores it exactly.
  uint64_t lease_sequence_ = 0;
  int64_t total_completed_ = 0;
  int64_t taken_ = 0;
  int64_t expired_count_ = 0;
  int64_t released_ = 0;
  int64_t given_back_ = 0;  // releases with Release.given_back
  int64_t records_ = 0;     // Complete.records, summed
  int64_t duplicates_ = 0;
  // Completions refused (NOT_FOUND / PERMISSION_DENIED): soft state, not
  // journaled; after a crash these are mostly grants the crash lost.
  int64_t refused_completions_ = 0;
};

}  // namespace shardq

#endif  // SHARDQ_CORE_QUEUE_STATE_H_
