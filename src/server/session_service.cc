#include "src/server/session_service.h"

#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/rpc/convert.h"
#include "src/rpc/protocol_version.h"

namespace shardq {
namespace {

// Longest a take waits server-side (as the unary Take); clients ask again.
constexpr int64_t kMaxTakeWaitMs = 60'000;

void ToOps(const v1::SessionRequest& req, SessionOps* ops) {
  ops->Clear();
  for (const v1::SplitAnswer& a : req.split_answers()) {
    ops->split_answers.push_back({a.lease_id(), a.split_point()});
  }
  for (const v1::LeaseProgress& p : req.progress()) {
    ops->progress.emplace_back(p.lease_id(), p.offset());
  }
  ops->completions.assign(req.complete_lease_ids().begin(), req.complete_lease_ids().end());
  ops->completion_records.assign(req.complete_records().begin(), req.complete_records().end());
  for (const v1::SessionRelease& r : req.releases()) {
    ops->releases.push_back({r.lease_id(), r.failed(), r.reason()});
  }
  ops->take = req.take();
  ops->take_ahead = req.take_ahead();
  ops->take_wait = absl::Milliseconds(std::clamp<int64_t>(req.take_wait_ms(), 0, kMaxTakeWaitMs));
}

void ToProto(const SplitProposal& p, v1::SplitProposal* out) {
  out->set_lease_id(p.lease_id);
  out->set_split_point(p.split_point);
  out->set_min_residual(p.min_residual);
}

// Moves the item strings out of `result`.
void ToResponse(SessionResult& result, v1::SessionResponse* out) {
  for (const SessionResult::Split& s : result.splits) {
    v1::SplitResult* r = out->add_split_results();
    r->set_lease_id(s.lease_id);
    if (!s.status.ok()) shardq::ToProto(s.status, r->mutable_status());
    r->set_accepted(s.accepted);
  }
  if (!result.progress.ok()) shardq::ToProto(result.progress, out->mutable_progress_status());
  for (const SessionResult::Completion& c : result.completions) {
    v1::CompleteResult* r = out->add_complete_results();
    r->set_lease_id(c.lease_id);
    if (!c.status.ok()) shardq::ToProto(c.status, r->mutable_status());
    r->set_duplicate(c.duplicate);
  }
  for (const SessionResult::Release& rel : result.releases) {
    v1::ReleaseResult* r = out->add_release_results();
    r->set_lease_id(rel.lease_id);
    if (!rel.status.ok()) shardq::ToProto(rel.status, r->mutable_status());
    r->set_item_failed(rel.item_failed);
  }
  if (!result.take.ok()) shardq::ToProto(result.take, out->mutable_take_status());
  for (WorkItem& item : result.items) {
    v1::WorkItem* w = out->add_items();
    w->set_item(std::move(item.item));
    w->set_epoch(item.epoch);
    w->set_index(item.index);
    w->set_lease_id(item.lease_id);
    if (item.work_size >= 0) w->mutable_work_size()->set_size(item.work_size);
  }
  out->set_end_of_input(result.end_of_input);
  for (const SplitProposal& p : result.proposals) ToProto(p, out->add_splits());
}

class SessionReactor final : public SessionStream, public SessionSink {
 public:
  // Owned by itself from here until its OnDone.
  static SessionStream* Create(CoordinatorImpl* coordinator, SessionAuthorizer authorize,
                               std::shared_ptr<SessionLimit> limit) {
    auto reactor =
        std::make_shared<SessionReactor>(coordinator, std::move(authorize), std::move(limit));
    reactor->self_ = reactor;
    return reactor.get();
  }

  SessionReactor(CoordinatorImpl* coordinator, SessionAuthorizer authorize,
                 std::shared_ptr<SessionLimit> limit)
      : coordinator_(coordinator), authorize_(std::move(authorize)), limit_(std::move(limit)) {}

  void OnStarted() override {
    if (absl::Status authorized = authorize_(context()); !authorized.ok()) {
      Finish(ToGrpcStatus(authorized));
      return;
    }
    if (!limit_->TryEnter()) {
      Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("the coordinator already holds ", limit_->max(),
                       " Session streams, its limit (shardq serve --max-sessions): close the "
                       "WorkQueues that are done, or raise the limit")));
      return;
    }
    counted_ = true;
    {
      absl::MutexLock lock(&mu_);
      read_in_flight_ = true;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client half-closed, or the stream broke
      std::shared_ptr<CoordinatorImpl::Session> session;
      {
        absl::MutexLock lock(&mu_);
        read_in_flight_ = false;
        reads_done_ = true;
        session = session_;
      }
      if (session != nullptr) coordinator_->CancelSessionTakes(*session);
      Advance();
      return;
    }
    if (!opened_) {
      Open();
    } else {
      Step();
    }
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_->Clear();
      free_responses_.push_back(std::move(writing_));
      if (!ok) EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the stream broke"));
    }
    Advance();
  }

  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      EndLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
    }
    Advance();
  }

  void OnDone() override {
    std::shared_ptr<CoordinatorImpl::Session> session;
    {
      absl::MutexLock lock(&mu_);
      session = session_;
    }
    if (session != nullptr) coordinator_->CloseSession(*session);
    if (counted_) limit_->Leave();
    // May destroy this reactor (once no waiting take or journal callback
    // holds it): the last thing done here.
    std::shared_ptr<SessionReactor> self = std::move(self_);
  }

  // SessionSink.
  void StepDone(uint64_t cookie) override {
    {
      absl::MutexLock lock(&mu_);
      reinterpret_cast<Slot*>(cookie)->ready = true;
    }
    Advance();
  }

  void PushSplit(const SplitProposal& proposal) override {
    {
      absl::MutexLock lock(&mu_);
      if (ending_) return;
      std::unique_ptr<v1::SessionResponse> push = NewResponseLocked();
      ToProto(proposal, push->add_splits());
      writes_.push_back(std::move(push));
    }
    Advance();
  }

  void CoordinatorShuttingDown() override {
    {
      absl::MutexLock lock(&mu_);
      EndLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down"));
    }
    Advance();
  }

 private:
  // One request's answer, kept in request order until written.
  struct Slot {
    uint64_t request_id = 0;  // 0: applied, not answered
    bool ready = false;
    SessionResult result;
  };

  void Open() {
    const v1::SessionRequest& req = request_;
    if (!req.has_open()) {
      return Refuse(absl::InvalidArgumentError(
          "the first message of a session must carry `open` (queue, worker, version)"));
    }
    const v1::SessionOpen& open = req.open();
    if (open.version().major() != kProtocolMajor) {
      return Refuse(absl::FailedPreconditionError(absl::StrCat(
          "worker '", open.worker(), "' speaks session protocol ", open.version().major(), ".",
          open.version().minor(), "; this coordinator speaks ", kProtocolMajor, ".",
          kProtocolMinor, " (the major versions must match: use a client and a coordinator of "
          "the same major version)")));
    }
    SessionOpening opening;
    absl::StatusOr<std::shared_ptr<CoordinatorImpl::Session>> session = coordinator_->OpenSession(
        open.queue(), open.worker(),
        std::vector<uint64_t>(open.lease_ids().begin(), open.lease_ids().end()), self_,
        &opening, open.reopen());
    if (!session.ok()) return Refuse(session.status());
    bool ended;
    {
      absl::MutexLock lock(&mu_);
      opened_ = true;
      opened_session_ = session->get();
      session_ = *session;
      ended = ending_;
      std::unique_ptr<v1::SessionResponse> answer = NewResponseLocked();
      answer->set_request_id(req.request_id());
      v1::SessionOpened* opened = answer->mutable_opened();
      opened->mutable_version()->set_major(kProtocolMajor);
      opened->mutable_version()->set_minor(kProtocolMinor);
      ToProto(opening.queue, opened->mutable_queue());
      for (uint64_t id : opening.lost_lease_ids) opened->add_lost_lease_ids(id);
      for (const SplitProposal& p : opening.proposals) ToProto(p, answer->add_splits());
      // First, before any proposal pushed since OpenSession registered the
      // session (no write starts before `opened_`).
      writes_.push_front(std::move(answer));
      read_in_flight_ = !ended;
    }
    if (!ended) StartRead(&request_);
    Advance();
  }

  void Step() {
    const v1::SessionRequest& req = request_;
    if (req.has_open()) {
      return Refuse(absl::InvalidArgumentError(
          "`open` may only be in the first message of a session"));
    }
    if (req.request_id() == 0 && req.take() > 0) {
      return Refuse(absl::InvalidArgumentError(
          "a session request with a take needs a non-zero request_id (its answer carries it)"));
    }
    ToOps(req, &ops_);
    Slot* slot;
    {
      // read_in_flight_ stays set until the step is applied: the next
      // request is read only then, so requests apply in order.
      absl::MutexLock lock(&mu_);
      if (free_slots_.empty()) {
        slots_.push_back(std::make_unique<Slot>());
      } else {
        slots_.push_back(std::move(free_slots_.back()));
        free_slots_.pop_back();
      }
      slot = slots_.back().get();
      slot->request_id = req.request_id();
      slot->ready = false;
    }
    const bool done = coordinator_->SessionStep(*opened_session_, ops_, &slot->result,
                                                reinterpret_cast<uint64_t>(slot));
    {
      absl::MutexLock lock(&mu_);
      if (done) slot->ready = true;
      read_in_flight_ = false;
    }
    Advance();
  }

  // Ends the stream with `status` once the writes in flight are done.
  void Refuse(const absl::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      read_in_flight_ = false;
      EndLocked(ToGrpcStatus(status));
    }
    Advance();
  }

  void EndLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ending_) return;
    ending_ = true;
    end_status_ = std::move(status);
  }

  std::unique_ptr<v1::SessionResponse> NewResponseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (free_responses_.empty()) return std::make_unique<v1::SessionResponse>();
    std::unique_ptr<v1::SessionResponse> r = std::move(free_responses_.back());
    free_responses_.pop_back();
    return r;
  }

  // Moves answers that are ready, in request order, to the writes; starts
  // the next write, the next read, or the end of the stream, as due. Called
  // without mu_ after every change; gRPC is called unlocked.
  void Advance() {
    const v1::SessionResponse* write = nullptr;
    bool read = false;
    bool finish = false;
    grpc::Status status;
    std::shared_ptr<CoordinatorImpl::Session> session;
    {
      absl::MutexLock lock(&mu_);
      while (!slots_.empty() && slots_.front()->ready) {
        std::unique_ptr<Slot> slot = std::move(slots_.front());
        slots_.pop_front();
        if (slot->request_id != 0 && !ending_) {
          std::unique_ptr<v1::SessionResponse> answer = NewResponseLocked();
          answer->set_request_id(slot->request_id);
          ToResponse(slot->result, answer.get());
          writes_.push_back(std::move(answer));
        }
        free_slots_.push_back(std::move(slot));
      }
      if (finished_) return;
      if (opened_ && !ending_ && !reads_done_ && !read_in_flight_ &&
          slots_.size() < kMaxUnanswered) {
        read_in_flight_ = read = true;
      }
      if (writing_ == nullptr && !writes_.empty() && !ending_ && opened_) {
        writing_ = std::move(writes_.front());
        writes_.pop_front();
        write = writing_.get();
      }
      const bool drained = slots_.empty() && writes_.empty();
      if (writing_ == nullptr && (ending_ || (reads_done_ && drained))) {
        finished_ = finish = true;
        status = ending_ ? end_status_ : grpc::Status::OK;
        session = session_;
      }
    }
    if (read) StartRead(&request_);
    if (write != nullptr) StartWrite(write);
    if (finish) {
      if (session != nullptr) coordinator_->CloseSession(*session);
      Finish(status);
    }
  }

  CoordinatorImpl* const coordinator_;
  const SessionAuthorizer authorize_;
  const std::shared_ptr<SessionLimit> limit_;
  bool counted_ = false;  // in limit_: set in OnStarted, read in OnDone (the queue's thread)
  // This reactor's own reference, dropped in OnDone; waiting takes and
  // journal callbacks hold others (as the SessionSink) while they run.
  std::shared_ptr<SessionReactor> self_;
  // Only the thread of the read that just completed touches these (reads
  // are one at a time, and the next starts after they are used).
  v1::SessionRequest request_;
  SessionOps ops_;
  // Set under mu_ by that thread, which alone reads them unlocked
  // (session_ below owns the session).
  bool opened_ = false;
  CoordinatorImpl::Session* opened_session_ = nullptr;

  absl::Mutex mu_;
  std::shared_ptr<CoordinatorImpl::Session> session_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);  // unanswered, in order
  std::vector<std::unique_ptr<Slot>> free_slots_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<v1::SessionResponse>> writes_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<v1::SessionResponse> writing_ ABSL_GUARDED_BY(mu_);  // in flight
  std::vector<std::unique_ptr<v1::SessionResponse>> free_responses_ ABSL_GUARDED_BY(mu_);
  bool read_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;  // end with end_status_
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Finish called
};

}  // namespace

bool SessionLimit::TryEnter() {
  if (live_.fetch_add(1, std::memory_order_relaxed) < max_) return true;
  live_.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

void SessionLimit::Leave() { live_.fetch_sub(1, std::memory_order_relaxed); }

SessionStream* NewSessionStream(CoordinatorImpl* coordinator, SessionAuthorizer authorize,
                                std::shared_ptr<SessionLimit> limit) {
  return SessionReactor::Create(coordinator, std::move(authorize), std::move(limit));
}

}  // namespace shardq
