// WorkQueue's private state (include/shardq/work_queue.h hides it behind
// WorkQueue::Impl). Shared by work_queue.cc (the factories and the per-item
// calls) and work_queue_background.cc (the thread that renews leases or
// answers a session's pushed proposals, and the split answers).
#ifndef SHARDQ_CLIENT_WORK_QUEUE_IMPL_H_
#define SHARDQ_CLIENT_WORK_QUEUE_IMPL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/call_once.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shardq/work_queue.h"
#include "src/client/backend.h"
#include "src/core/process.h"
#include "src/types/queue_types.h"

namespace shardq {

// Everything a worker keeps: what it learnt of its queue, its leases (those
// being read and those taken ahead, ready), their progress, its session
// with the coordinator if the backend has sessions, and the background
// thread that renews leases by heartbeat (no session) or answers pushed
// split proposals and sends progress (session). Thread-safe.
class WorkQueue::Impl final : public SessionListener {
 public:
  Impl(std::shared_ptr<QueueBackend> backend, std::string name, std::string worker_id)
      : backend_(std::move(backend)), name_(std::move(name)), worker_id_(std::move(worker_id)) {}
  ~Impl() override;

  absl::StatusOr<WorkItem> Take(absl::Duration timeout);
  // See WorkQueue::Close; the destructor calls it.
  void Close();
  absl::Status ClosedError() const {
    return absl::FailedPreconditionError(absl::StrCat(
        "queue '", name_, "': worker '", worker_id_, "' closed this WorkQueue; take no more"));
  }
  // OK in the process that made this queue; FAILED_PRECONDITION in a
  // process forked from it: the leases, and the items taken ahead (which a
  // take there would hand out with no call), are the parent's, who reads
  // them. Checked by every call that takes, reads or settles an item.
  absl::Status CheckOwner() const;
  absl::Status Complete(const WorkItem& item);
  absl::Status Release(const WorkItem& item);
  absl::StatusOr<bool> ReleaseRest(const WorkItem& item);
  void NoteReturned(const WorkItem& item, int64_t offset, int64_t in_order, int64_t returned);
  int64_t records_read_again() const;
  void NoteLost(const WorkItem& item, int64_t records);
  int64_t records_lost() const;
  absl::StatusOr<bool> Fail(const WorkItem& item, absl::string_view reason);
  int64_t lost_leases() const;
  int64_t held() const;
  int64_t ready() const;
  std::optional<WorkItem> PeekReady() const;
  void ReleaseReady();
  void GiveBackStopped(const std::vector<LeaseSource::StoppedItem>& items);
  absl::StatusOr<bool> EndTakesIf(absl::FunctionRef<absl::StatusOr<bool>()> over);
  void SetTakePoll(absl::Duration poll);
  void NoteProgress(const WorkItem& item, int64_t offset);
  absl::Status ReportProgress();
  absl::Status SaveCheckpoint(const std::string& path);
  int64_t records_beyond_checkpoint() const;
  absl::StatusOr<QueueStats> Stats() { return backend_->Stats(name_); }
  absl::StatusOr<bool> OnlyOthersHoldTheRest(absl::string_view siblings) {
    return backend_->PassOver(name_, worker_id_, siblings);
  }

  // SessionListener (called on the session's thread): queued for the
  // background thread.
  void OnSplitProposals(const std::vector<SplitProposal>& proposals) override;
  void OnLostLeases(const std::vector<uint64_t>& lease_ids) override;

  // Opens the session once (the first Take); false: no sessions here.
  absl::StatusOr<bool> EnsureSession();
  void StartBackgroundIfNeeded();
  // Without a session: renews leases and fetches proposals by heartbeat.
  void HeartbeatLoop();
  // With a session: answers pushed proposals and sends noted progress.
  void SessionLoop();
  // Gives back the items of stopped_ (background thread).
  void GiveBackStoppedNow();
  // Answers the coordinator's split proposals (background thread).
  void AnswerSplits(const std::vector<SplitProposal>& proposals);
  // A proposal for an item taken ahead and not started: it is given back
  // whole (split at its start).
  void GiveBackReady(const SplitProposal& proposal, const WorkItem& item);
  // Waits until no split answer of `lease_id` is in flight; true when the
  // item may be completed (false: release it instead).
  bool SettleSplit(uint64_t lease_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After NOT_FOUND for `item`'s lease: true (and the lease is forgotten)
  // when this worker holds it and the queue still exists, i.e. the
  // coordinator lost the lease; false when the error is the caller's.
  bool LeaseLostByCoordinator(const WorkItem& item);
  // Gives back a held lease at the destructor: its unread rest when a
  // reader returned part of it (ReleaseRest), else whole. Best effort.
  // Returns whether the coordinator answered; with `ask` false (an earlier
  // lease went unanswered) it is not asked: the lease is forgotten (it
  // expires) and the records a reader returned of it are counted as read
  // again.
  bool ReleaseAtShutdown(uint64_t lease_id, const WorkItem& item, bool ask);
  // Counts records that will be returned again and says so on stderr.
  void CountReadAgain(const WorkItem& item, int64_t records, absl::string_view why);
  // Drops a lease from held_, ready_, progress_ and returned_; false if it
  // was not held.
  bool Forget(uint64_t lease_id);
  // Parses granted items (no lock needed).
  static void Prepare(std::vector<WorkItem>& items);
  // Holds a prepared item; `ready`: taken ahead, not started.
  void HoldLocked(const WorkItem& item, bool ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many items to take ahead now, within take_ahead and the leases the
  // coordinator allows (num_clients + TakeAllowance()): beyond the one a
  // take is for, or (`completing`) with a completion.
  int64_t AheadWanted(bool completing) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The leases beyond num_clients the coordinator lets this worker hold
  // for the items it keeps ready (QueueState::Take's `ahead`).
  int64_t TakeAllowance() const { return std::min<int64_t>(take_ahead_, kMaxTakeAhead); }

  const std::shared_ptr<QueueBackend> backend_;
  const std::string name_;
  const std::string worker_id_;
  uint64_t seed_ = 0;
  int64_t num_items_ = 0;
  int64_t num_epochs_ = 0;
  int64_t num_clients_ = 1;
  int64_t take_ahead_ = 1;
  absl::Duration lease_timeout_;
  absl::Duration heartbeat_interval_ = absl::Seconds(1);

  absl::once_flag session_once_;
  absl::StatusOr<bool> session_ = false;  // written once, under session_once_

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, WorkItem> held_ ABSL_GUARDED_BY(mu_);
  // Leases of held_ taken ahead and not handed out yet, oldest first.
  std::deque<uint64_t> ready_ ABSL_GUARDED_BY(mu_);
  // Takes (Take) and refills (a completion's take) on their way to the
  // coordinator; ready_changed_ is signalled when a refill lands. At most
  // one of them is on its way at a time, and its items join held_ and
  // ready_ under the same hold of mu_ that ends it: ready_ is then in the
  // coordinator's grant order, which is what keeps a pipeline's record
  // order deterministic with take-ahead (two refills racing from two
  // threads completing items used to land in either order).
  int64_t takes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t refills_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar ready_changed_;
  // EndTakesIf: while it decides, takes wait (ready_changed_ is signalled
  // when it is done); once it ended them, every take is OUT_OF_RANGE.
  bool takes_held_back_ ABSL_GUARDED_BY(mu_) = false;
  bool takes_ended_ ABSL_GUARDED_BY(mu_) = false;
  // How long one take waits at the coordinator (SetTakePoll): a remote
  // take is re-issued at least this often, so a dead connection is noticed.
  absl::Duration take_poll_ ABSL_GUARDED_BY(mu_) = absl::Seconds(10);
  // Consumed offset per held lease, as noted by readers.
  absl::flat_hash_map<uint64_t, int64_t> progress_ ABSL_GUARDED_BY(mu_);
  bool progress_unsent_ ABSL_GUARDED_BY(mu_) = false;
  // What readers returned of held leases (NoteReturned).
  struct Returned {
    int64_t offset = -1;
    int64_t in_order = 0;
    int64_t returned = 0;
  };
  absl::flat_hash_map<uint64_t, Returned> returned_ ABSL_GUARDED_BY(mu_);
  // Records returned before whose items went back: read again by someone.
  int64_t records_read_again_ ABSL_GUARDED_BY(mu_) = 0;
  // See WorkQueue::records_beyond_checkpoint.
  int64_t records_beyond_checkpoint_ ABSL_GUARDED_BY(mu_) = 0;
  // Records of completed items a destroyed pipeline never returned.
  int64_t records_lost_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lost_leases_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Set by Close (stopping_ is too), read without the lock (CheckOpen).
  std::atomic<bool> closed_{false};
  // Signalled when stopping_ is set or a pushed proposal arrives.
  absl::CondVar stop_changed_;
  bool background_started_ ABSL_GUARDED_BY(mu_) = false;
  // Items of stopped readers the background thread is to give back (a
  // remote coordinator: GiveBackStopped), each still in held_ and none in
  // ready_; whatever is left at the destructor is given back there.
  // stopped_done_ counts the batches handed over (stopped_handed_) that the
  // background thread finished.
  std::vector<LeaseSource::StoppedItem> stopped_ ABSL_GUARDED_BY(mu_);
  int64_t stopped_handed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t stopped_done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar stopped_changed_;
  // Proposals pushed by the session, not yet answered.
  std::vector<SplitProposal> pushed_splits_ ABSL_GUARDED_BY(mu_);
  // Leases whose split answer is being sent, and leases whose reader was cut
  // short by a split the coordinator did not record.
  absl::flat_hash_set<uint64_t> split_in_flight_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> split_unrecorded_ ABSL_GUARDED_BY(mu_);
  // Items taken ahead that are being given back whole (GiveBackReady):
  // still in held_, neither ready nor read.
  int64_t giving_back_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar split_settled_;
  std::thread background_thread_;
  OwnerProcess owner_;  // see src/core/process.h
};

}  // namespace shardq

#endif  // SHARDQ_CLIENT_WORK_QUEUE_IMPL_H_
