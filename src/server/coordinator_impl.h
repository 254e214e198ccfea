// The coordinator: owns every named queue and serialises access to each.
// Knows nothing of any transport: the gRPC service (remote workers) and the
// embedded backend (worker threads in this process) both call it.
//
// Durable when given a state directory: every state change of a queue is an
// update that QueueState applies in memory and hands to the journal under
// the queue's mutex (cheap, no I/O); the call then releases the mutex and
// waits for its update to be durable before it answers. The mutex is never
// held across the disk write (group commit lets concurrent calls share one
// fsync). Later updates are journaled after earlier ones, so anything a
// client saw depends only on durable or still-pending state. CompleteAsync
// is the same without the wait: it answers by callback once durable.
//
// One exception: lease grants (and the expiries a Take notices) are written
// behind. A Take that hands out items journals them in the same ordered
// stream but answers without waiting for the disk. Everything else waits
// before it answers: completions, releases, queue creation and attach,
// restores, heartbeats, and a Take that reports end of input or an error.
// Why this is safe:
//  * SPEC.md requires every completion to be journaled before it is
//    acknowledged, and it is: a completion waits for its own update, and
//    since the journal is one ordered stream that wait also covers the
//    grant it completes.
//  * A grant lost in a crash cannot lose data. After recovery its item is
//    pending again and is read again by someone (an at-least-once
//    duplicate, one of the "leases in flight at the crash"). The worker
//    that held it gets NOT_FOUND when it completes it, and the client
//    library counts that as a lease lost in a coordinator crash.
//  * A lost grant's id is never issued again: recovery skips
//    QueueState::kLeaseIdsSkippedAtRecovery lease ids, and a Take waits
//    for the disk when half that many of its queue's answered grants are
//    not durable yet, so no crash can lose more grants than were skipped.
//
// Thread-safe. Each queue has its own mutex; blocked Takes wait on the
// queue's condition variable and wake on every completion, release and
// expiry. Waiting session takes wait in the queue's waiter list instead,
// served by one thread (WaitHub) for all of them.
#ifndef SHARDQ_SERVER_COORDINATOR_IMPL_H_
#define SHARDQ_SERVER_COORDINATOR_IMPL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/shardq/journal.pb.h"
#include "shardq/work_item.h"
#include "src/core/clock.h"
#include "src/core/queue_state.h"
#include "src/core/step_agreement.h"
#include "src/server/session_types.h"
#include "src/server/wait_hub.h"
#include "src/store/journal.h"
#include "src/store/state_store.h"
#include "src/types/queue_types.h"

namespace shardq {

struct CoordinatorOptions {
  // Must outlive the coordinator; nullptr means the real clock.
  Clock* clock = nullptr;
  // Empty: state lives in memory only. Otherwise every change is journaled
  // here and a restarted coordinator continues where the last one stopped.
  std::string state_dir;
  // When a queue is snapshotted, which bounds recovery time by the size of
  // the state rather than of the history: once both at least
  // `snapshot_every` updates were journaled since its last snapshot, and
  // at least one per `snapshot_bytes_per_update` bytes of that snapshot.
  // The second keeps a large queue (a 1M-slice snapshot is tens of MB and
  // takes a good part of a second to write) from being snapshotted every
  // few thousand completions: the snapshot's cost per update stays
  // bounded, and replaying the updates since it takes about as long as
  // loading it (one update replays in about the time 256 bytes of
  // snapshot load). A due snapshot is built from a copy of the queue's state
  // (QueueState::Clone, under the queue's mutex) and serialised and
  // journaled by a background thread, so takes and completions go on
  // meanwhile; a queue has at most one snapshot in progress.
  int64_t snapshot_every = 20000;
  int64_t snapshot_bytes_per_update = 256;
  // Durable coordinators answer a take before its grant is stored (up to a
  // bound; a crash then only re-issues items nobody completed). A
  // coordinator that may be deposed (the etcd store: another may lead after
  // a pause) must not hand out an item whose grant it could not store:
  // true answers every grant only once the store has it, so a fenced
  // leader hands out nothing.
  bool grants_wait_for_store = false;
};

class CoordinatorImpl {
 public:
  // The most items one take (unary or in a session) may ask for.
  static constexpr int64_t kMaxItemsPerTake = 1024;
  // A waiting take looks at its queue at least this often, so that lease
  // expiries are noticed even when nothing else happens.
  static constexpr absl::Duration kMaxWaitSlice = absl::Seconds(1);

  // An in-memory coordinator. `clock` may be nullptr (the real clock).
  explicit CoordinatorImpl(Clock* clock = nullptr);
  // Opens the state directory (if any) and recovers every queue in it.
  // Refuses to start (never starts empty) on corrupt or unreadable state:
  // DATA_LOSS / FAILED_PRECONDITION / PERMISSION_DENIED naming the dir.
  static absl::StatusOr<std::unique_ptr<CoordinatorImpl>> Create(
      const CoordinatorOptions& options);
  // A durable coordinator over an open `store` (options.state_dir is not
  // used): recovers every queue of `recovered` (what the store's Open read).
  // `store_name` names the store in errors ("etcd at H:P, job 'J'").
  // Refuses, like Create, on state that does not replay.
  static absl::StatusOr<std::unique_ptr<CoordinatorImpl>> CreateWithStore(
      const CoordinatorOptions& options, std::unique_ptr<StateStore> store,
      RecoveredState recovered, absl::string_view store_name);
  // Finishes the snapshots in progress, snapshots every queue (a fast next
  // start) and flushes the journal.
  ~CoordinatorImpl();
  CoordinatorImpl(const CoordinatorImpl&) = delete;
  CoordinatorImpl& operator=(const CoordinatorImpl&) = delete;

  // Creates queue `config.name`, or attaches to it when it exists with a
  // compatible config. An unset seed is drawn here. FAILED_PRECONDITION
  // listing the differing fields on a mismatch; INVALID_ARGUMENT on a bad
  // config.
  absl::StatusOr<QueueInfo> CreateQueue(QueueConfig config);

  // Describes an existing queue (NOT_FOUND otherwise), for workers that
  // attach by name without knowing the config.
  absl::StatusOr<QueueInfo> GetQueue(absl::string_view queue);

  // Leases up to `max_items` (>= 1) items to `worker`. Blocks until at least
  // one item is available, the queue is finished, or `deadline` passes.
  // Returns the items (empty at the deadline: "ask again"), or OUT_OF_RANGE
  // when every item of every epoch is completed. NOT_FOUND for an unknown
  // queue; FAILED_PRECONDITION when the worker holds num_clients items
  // plus `ahead` (the items it keeps ready, see QueueState::Take).
  absl::StatusOr<std::vector<WorkItem>> Take(absl::string_view queue,
                                             absl::string_view worker,
                                             int64_t max_items,
                                             absl::Time deadline,
                                             int64_t ahead = 0);

  // See QueueState::Complete / Release / Heartbeat / ReportProgress.
  // `records`: as QueueState::Complete's.
  absl::StatusOr<CompleteOutcome> Complete(absl::string_view queue,
                                           absl::string_view worker,
                                           uint64_t lease_id, int64_t records = 0);
  // Complete without blocking the caller until the completion is durable:
  // `done` gets the same answer, inline when nothing needs the disk, else
  // on the journal's thread once the completion is durable (it must be
  // quick). For servers that should not park a thread per waiting call.
  void CompleteAsync(absl::string_view queue, absl::string_view worker, uint64_t lease_id,
                     std::function<void(absl::StatusOr<CompleteOutcome>)> done,
                     int64_t records = 0);
  absl::Status Release(absl::string_view queue, absl::string_view worker,
                       uint64_t lease_id);
  // A failed attempt at the item of `lease_id` (QueueState::Fail): true when
  // the item is now set aside as failed. Durable before it returns.
  absl::StatusOr<bool> Fail(absl::string_view queue, absl::string_view worker,
                            uint64_t lease_id, absl::string_view reason);
  // While splits are possible (QueueState::SplitsPossible) and none is
  // proposed to `worker`, waits up to `wait` for one, so that a proposal
  // reaches its holder at once rather than with its next heartbeat.
  absl::StatusOr<HeartbeatReply> Heartbeat(absl::string_view queue,
                                           absl::string_view worker,
                                           const std::vector<uint64_t>& lease_ids,
                                           absl::Duration wait = absl::ZeroDuration());
  // The holder's answer to a split proposal (QueueState::AcceptSplit); an
  // accepted split is durable before this returns, and wakes waiting takes.
  absl::StatusOr<bool> AcceptSplit(absl::string_view queue, absl::string_view worker,
                                   uint64_t lease_id, int64_t split_point);
  // (lease id, consumed offset) pairs; the first failure is returned after
  // every pair was tried.
  absl::Status ReportProgress(absl::string_view queue, absl::string_view worker,
                              const std::vector<std::pair<uint64_t, int64_t>>& progress);

  // Equal steps across ranks (src/core/step_agreement.h): records one
  // participant's report for `queue` and answers the tally at once (a
  // participant waiting for the others asks again; nobody waits here).
  // Soft state, not journaled. NOT_FOUND for an unknown queue; the
  // errors of StepAgreements::Report. (coordinator_steps.cc)
  absl::StatusOr<StepTally> AgreeSteps(absl::string_view queue, const StepReport& report);

  // A training job's checkpoint of `queue` (see QueueState::ToCheckpoint).
  absl::StatusOr<journal::Checkpoint> ExportCheckpoint(absl::string_view queue);
  // Creates a queue from a checkpoint, named `name` (empty: the checkpoint's
  // name). FAILED_PRECONDITION when a queue of that name exists.
  absl::StatusOr<QueueInfo> RestoreCheckpoint(const journal::Checkpoint& checkpoint,
                                              const std::string& name);

  // Wakes every blocked Take (they return no items) and makes later Takes
  // return at once; used before the server stops.
  void Shutdown();

  // NOT_FOUND for an unknown queue.
  absl::StatusOr<QueueStats> Stats(absl::string_view queue);
  // QueueState::PassOver after expiring overdue leases (as Stats does):
  // whether `worker`, a DataLoader worker whose siblings' ids start with
  // `siblings`, may end its pass. NOT_FOUND for an unknown queue.
  absl::StatusOr<bool> PassOver(absl::string_view queue, absl::string_view worker,
                                absl::string_view siblings);
  // The full state of a queue, as a snapshot would store it (tests, debug).
  absl::StatusOr<journal::QueueSnapshot> DebugSnapshot(absl::string_view queue);
  // Waits until everything changed so far is durable, snapshots in
  // progress included (tests, shutdown).
  absl::Status Flush();

  // What Create recovered from the state dir (all zero in memory).
  struct Recovery {
    int64_t queues = 0;
    int64_t updates_replayed = 0;  // journaled after the queues' snapshots
    absl::Duration took;           // opening the dir through the last replay
  };
  const Recovery& recovery() const { return recovery_; }

  // What the journal has stored so far; nullopt in memory.
  std::optional<StoreTotals> journal_totals() const;
  // OK, or (durable only) the error that made the journal stop storing
  // anything (see Journal::status), as StoreError gives it. From then on
  // every change is refused with it up front, before it touches memory or
  // hands out an item whose grant could not be stored; reads still work.
  // `shardq serve` stops on it, and a restart recovers what was stored.
  absl::Status Writable() const;
  // Every queue, sorted by name.
  std::vector<QueueStats> AllStats();

  // ---- Worker sessions (coordinator_sessions.cc) ----
  // A worker's session with one queue (one open stream), as the transport
  // holds it. Opaque; thread-safe.
  class Session;

  // Opens a session of `worker` with `queue`. While any session of the
  // worker with the queue is open its leases do not expire; when the last
  // one closes they expire lease_timeout later (QueueState::OpenSession).
  // Of `lease_ids` (held from an earlier stream: a re-open), those still
  // held are kept; the others are listed in `opening->lost_lease_ids`.
  // `sink` gets the session's late answers and pushed split proposals
  // until CloseSession returns. Never waits for the disk. NOT_FOUND for an
  // unknown queue; INVALID_ARGUMENT for a bad name or too many lease ids;
  // `reopen` (a stream re-opened after a break): the worker's leases not in
  // `lease_ids` are released (the answers granting them were lost).
  // UNAVAILABLE while shutting down or when nothing can be stored.
  absl::StatusOr<std::shared_ptr<Session>> OpenSession(absl::string_view queue,
                                                       absl::string_view worker,
                                                       const std::vector<uint64_t>& lease_ids,
                                                       std::shared_ptr<SessionSink> sink,
                                                       SessionOpening* opening,
                                                       bool reopen = false);
  // Applies one request's `ops` in order (split answers, progress,
  // completions, releases, take) under one hold of the queue's mutex and
  // writes their results into `*out`; a failed operation is answered in
  // `*out` and stops nothing. Never blocks. Returns true when `*out` is
  // final now. Otherwise (a take that waits for an item, or, durable, a
  // change that must reach the disk before it is answered) `*out` must
  // stay valid and untouched until the coordinator calls
  // sink->StepDone(cookie), exactly once, from another thread (or from
  // CancelSessionTakes / CloseSession / Shutdown). A waiting take is
  // answered on the next change that lets it proceed (completion, release,
  // expiry, accepted split, end of input) or at its wait's end (real time)
  // with no items. Split proposals made by the take are pushed at once to
  // the sessions of the holder; proposals awaiting this worker's answer
  // are in every result until answered.
  bool SessionStep(Session& session, const SessionOps& ops, SessionResult* out,
                   uint64_t cookie);
  // Answers the session's waiting takes now, with no items.
  void CancelSessionTakes(Session& session);
  // Ends the session (idempotent): its waiting takes are answered with no
  // items; when it was the worker's last session, the worker's leases
  // expire lease_timeout from now. The sink is not called after this
  // returns.
  void CloseSession(Session& session);
  // Sessions `worker` has open with `queue` (0 for an unknown queue).
  int64_t SessionsOpen(absl::string_view queue, absl::string_view worker);

  // Sees what the coordinator does, for the status page's timeline and the
  // latency histograms on /metrics (`shardq serve --http`).
  class Observer {
   public:
    enum class Call { kTake, kComplete };
    virtual ~Observer() = default;
    // Every update a queue applies (the journal's stream, also in memory),
    // in order, with that queue's mutex held: must be quick and must not
    // call the coordinator.
    virtual void OnUpdate(absl::string_view queue, const journal::Update& update) = 0;
    // A Take or Complete (or CompleteAsync) answered, whatever the answer,
    // `took` (real time) after it was called. A session step counts as a
    // take when it asked for items and as one completion per lease it
    // completed, `took` being the time until its answer was final. No
    // lock held.
    virtual void OnCallDone(Call call, absl::Duration took) = 0;
  };
  // Observes every queue, those that exist already included, from now on;
  // nullptr stops. `observer` must outlive the coordinator or be replaced
  // first. Thread-safe; a call already running may still report to the
  // previous observer.
  void SetObserver(Observer* observer);

 private:
  struct EntrySessions;  // a queue's sessions and waiting takes
  struct PendingStep;    // a SessionStep answered later
  struct StepTiming;     // a SessionStep's latency, for the observer
  // Split proposals to push to sessions once the queue's mutex is released.
  using SplitPushes = std::vector<std::pair<std::shared_ptr<SessionSink>, SplitProposal>>;
  struct Entry {
    std::string name;
    absl::Mutex mu;
    absl::CondVar changed;  // signalled on completion, release, expiry
    std::unique_ptr<QueueState> state ABSL_GUARDED_BY(mu);
    uint64_t last_seq ABSL_GUARDED_BY(mu) = 0;        // last journaled update
    int64_t since_snapshot ABSL_GUARDED_BY(mu) = 0;   // updates since then
    int64_t snapshot_bytes ABSL_GUARDED_BY(mu) = 0;   // size of the last snapshot
    bool snapshot_running ABSL_GUARDED_BY(mu) = false;  // see SnapshotLoop
    // Journal sequence numbers of grants handed out without waiting that
    // may not be durable yet, oldest first (see the file comment).
    std::deque<uint64_t> grants_behind ABSL_GUARDED_BY(mu);
    // Open sessions and waiting session takes; null until the first session.
    std::shared_ptr<EntrySessions> sessions ABSL_GUARDED_BY(mu);
    // Equal-steps agreements; null until the first report (AgreeSteps).
    std::unique_ptr<StepAgreements> steps ABSL_GUARDED_BY(mu);
  };

  CoordinatorImpl(Clock* clock, std::unique_ptr<StateStore> journal, int64_t snapshot_every,
                  int64_t snapshot_bytes_per_update);
  absl::Status Recover(RecoveredState recovered);
  absl::StatusOr<std::shared_ptr<Entry>> Find(absl::string_view queue);
  // Adds a queue made by `creation` (a create or restore update), journals
  // it, and returns it. FAILED_PRECONDITION if the name exists.
  absl::StatusOr<std::shared_ptr<Entry>> AddQueue(const journal::Update& creation,
                                                  bool journal_it);
  // The QueueInfo of a queue AddQueue just made, once its creation is
  // durable (the journal's error otherwise).
  absl::StatusOr<QueueInfo> AddedQueueInfo(Entry& e);
  // Routes the state's updates to the journal (under e.mu).
  void AttachJournal(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  // Called with e.mu held after a change: when a snapshot is due (see
  // CoordinatorOptions::snapshot_every) and none is in progress, hands a
  // copy of the state to SnapshotLoop; returns the
  // sequence number the caller must wait for (0: nothing to wait for).
  uint64_t AfterChange(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  // Forgets the grants in e.grants_behind that the disk has caught up
  // with. True when too many are still behind for a Take to answer without
  // waiting for the disk.
  bool TooManyGrantsBehind(Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  // Ends the leases of `e` past their deadline (journaled by QueueState),
  // wakes its waiters and logs how many, at info.
  void ExpireLeases(Entry& e, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  absl::StatusOr<CompleteOutcome> CompleteLocked(Entry& e, absl::string_view worker,
                                                 uint64_t lease_id, int64_t records)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  // Waits (without any lock) until `seq` is durable.
  absl::Status Durable(uint64_t seq);
  // The error a call returns when the journal cannot store its change:
  // UNAVAILABLE, naming the journal's error.
  static absl::Status StoreError(const absl::Status& journal_error);
  // Runs `change(entry)` (returning absl::Status or StatusOr) under the
  // queue's mutex, then waits, unlocked, until what it journaled is durable.
  // NOT_FOUND for an unknown queue.
  template <typename Change>
  auto Mutate(absl::string_view queue, Change change)
      -> decltype(change(std::declval<Entry&>()));
  static QueueInfo Describe(const QueueState& state, bool created);

  // A copy of a queue's state to snapshot, and the last update it includes.
  struct SnapshotTask {
    Entry* entry = nullptr;
    uint64_t seq = 0;
    std::unique_ptr<QueueState> state;
  };
  // The snapshot thread: serialises and journals each task's copy, outside
  // every queue's mutex, then clears its entry's snapshot_running.
  void SnapshotLoop();
  // Blocks until every snapshot handed to SnapshotLoop is journaled.
  void WaitForSnapshots();
  // Stops the snapshot thread once it has journaled what it was handed.
  void StopSnapshots();
  // After a change that may let waiting takes proceed: wakes blocked Takes,
  // and has the wait hub serve the queue's waiting session takes when one
  // of them would now be answered (or always, with `may_propose`: after a
  // refused split, the first waiting take proposes another).
  void NotifyChanged(Entry& e, bool may_propose = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  // Queues a push of the proposal just made for `lease_id` to the sessions
  // of its holder.
  void CollectSplitPush(Entry& e, uint64_t lease_id, SplitPushes* pushes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  // Calls the sinks (no lock held).
  static void DeliverPushes(SplitPushes& pushes);
  // Leases up to `max_items` to `worker` into out->items (or sets
  // out->take / out->end_of_input); true when the take must wait. `ahead`:
  // as QueueState::Take's.
  bool TakeLocked(Entry& e, const std::string& worker, int64_t max_items, int64_t ahead,
                  absl::Time now, SessionResult* out, SplitPushes* pushes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  // The proposals awaiting `session`'s answer, into out->proposals.
  void AppendProposals(Entry& e, Session& session, SessionResult* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(e.mu);
  // SessionStep's work; `timing` goes with a step answered later.
  bool SessionStepTimed(Session& session, const SessionOps& ops, SessionResult* out,
                        uint64_t cookie, const StepTiming& timing);
  // The wait hub's work for one queue; returns when to run again.
  absl::Time ServeWaiters(Entry& e);
  // The wait hub, started on first use; nullptr once the coordinator is
  // being destroyed.
  WaitHub* Hub();
  // Answers every waiting session take and ends every session (Shutdown).
  void ShutdownSessions();

  Clock* const clock_;
  // The state store (the SQLite journal or etcd); null: in memory only.
  const std::unique_ptr<StateStore> journal_;
  const int64_t snapshot_every_;
  const int64_t snapshot_bytes_per_update_;
  // See CoordinatorOptions::grants_wait_for_store; set once, before serving.
  bool grants_wait_for_store_ = false;
  std::atomic<bool> shutting_down_{false};
  std::atomic<Observer*> observer_{nullptr};
  Recovery recovery_;  // set once by Create
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Entry>> queues_
      ABSL_GUARDED_BY(mu_);
  absl::Mutex snapshot_mu_;
  absl::CondVar snapshot_changed_;  // a task arrived or finished, or stopping
  std::deque<SnapshotTask> snapshot_tasks_ ABSL_GUARDED_BY(snapshot_mu_);
  bool snapshot_busy_ ABSL_GUARDED_BY(snapshot_mu_) = false;  // a task is being written
  bool snapshot_stop_ ABSL_GUARDED_BY(snapshot_mu_) = false;
  std::thread snapshot_thread_;  // runs SnapshotLoop while journal_ is set
  // Serves waiting session takes (Hub()); stopped first by the destructor.
  absl::Mutex hub_mu_;
  std::unique_ptr<WaitHub> hub_ ABSL_GUARDED_BY(hub_mu_);
  bool hub_stopped_ ABSL_GUARDED_BY(hub_mu_) = false;
};

class CoordinatorImpl::Session {
 public:
  const std::string& worker() const { return worker_; }

 private:
  friend class CoordinatorImpl;
  std::shared_ptr<Entry> entry_;
  std::string worker_;
  // The members below are guarded by entry_->mu.
  std::shared_ptr<SessionSink> sink_;  // null once closed
  std::vector<uint64_t> pushed_;       // leases whose proposal it was sent
  std::vector<uint64_t> waiting_;      // ids of its waiting takes
};

// A seed drawn from the operating system's entropy.
uint64_t DrawSeed();

}  // namespace shardq

#endif  // SHARDQ_SERVER_COORDINATOR_IMPL_H_
