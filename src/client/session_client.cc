#include "src/client/session_client.h"

#include <algorithm>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/sync_stream.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/core/process.h"
#include "src/log/log.h"
#include "src/rpc/convert.h"
#include "src/rpc/protocol_version.h"

namespace shardq {
namespace {

// How long a closing session waits for the coordinator to end the stream
// after the half-close before cancelling it, and the answer timeout of
// calls made while shutting down.
constexpr absl::Duration kCloseWait = absl::Seconds(2);
constexpr absl::Duration kShutdownAnswerTimeout = absl::Seconds(2);
constexpr absl::Duration kLongPoll = SessionClient::kLongPoll;

// The first operation of `answer` that failed with a status worth retrying
// (UNAVAILABLE, ABORTED, CANCELLED); OK when none did.
absl::Status TransientOpStatus(const v1::SessionResponse& answer) {
  auto check = [](const v1::OpStatus& op) {
    absl::Status s = FromProto(op);
    return IsRetryable(s) ? s : absl::OkStatus();
  };
  if (absl::Status s = check(answer.take_status()); !s.ok()) return s;
  if (absl::Status s = check(answer.progress_status()); !s.ok()) return s;
  for (const v1::CompleteResult& r : answer.complete_results()) {
    if (absl::Status s = check(r.status()); !s.ok()) return s;
  }
  for (const v1::ReleaseResult& r : answer.release_results()) {
    if (absl::Status s = check(r.status()); !s.ok()) return s;
  }
  for (const v1::SplitResult& r : answer.split_results()) {
    if (absl::Status s = check(r.status()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// The lease is no longer the worker's once the coordinator has answered
// its completion or release so.
bool LeaseGone(const v1::OpStatus& op) {
  const auto code = static_cast<absl::StatusCode>(op.code());
  return code == absl::StatusCode::kOk || code == absl::StatusCode::kNotFound ||
         code == absl::StatusCode::kPermissionDenied;
}

using Stream = grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>;

}  // namespace

class SessionClient::Impl {
 public:
  Impl(std::shared_ptr<CoordinatorChannels> channels, SessionOptions options,
       SessionListener* listener)
      : options_(std::move(options)), channels_(std::move(channels)), listener_(listener) {}

  // Starts the reader thread, which opens the stream; waits for the outcome.
  absl::Status Start(QueueInfo* info);
  void Close();
  absl::StatusOr<v1::SessionResponse> CallRetrying(const v1::SessionRequest& request,
                                                   absl::Duration wait);
  void BeginShutdown() { shutting_down_.store(true); }
  void AbandonReader() { AbandonThread(reader_); }
  std::vector<uint64_t> HeldLeases() const {
    absl::MutexLock lock(&mu_);
    return std::vector<uint64_t>(held_.begin(), held_.end());
  }
  void ForgetLease(uint64_t lease_id) {
    absl::MutexLock lock(&mu_);
    held_.erase(lease_id);
  }
  int64_t streams_opened() const {
    absl::MutexLock lock(&mu_);
    return streams_opened_;
  }
  // InterruptRequested() without mu_ held (Python's check takes the GIL).
  bool InterruptRequestedUnlocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    mu_.Unlock();
    const bool interrupted = InterruptRequested();
    mu_.Lock();
    return interrupted;
  }
  absl::Status Interrupted() const {
    return absl::CancelledError(absl::StrCat(Name(), ": interrupted"));
  }
  // The session gave up re-opening, or was closed.
  bool Ended() const {
    absl::MutexLock lock(&mu_);
    return state_ == State::kDead || state_ == State::kClosed;
  }
  const std::string& queue() const { return options_.queue; }
  std::string Name() const {
    return absl::StrCat("session of worker '", options_.worker, "' with queue '",
                        options_.queue, "' at coordinator ", options_.address);
  }

 private:
  enum class State { kOpening, kOpen, kReopening, kDead, kClosed };
  struct Pending {
    bool done = false;
    absl::StatusOr<v1::SessionResponse> result;
    absl::CondVar cv;
  };

  void ReaderLoop();
  // Opens streams until one is open (OK), the failure is not transient, the
  // budget is spent, or the session closes.
  absl::Status OpenWithRetries(absl::Duration budget);
  absl::Status OpenOnce();
  // One attempt of a request: UNAVAILABLE when the stream broke first.
  absl::StatusOr<v1::SessionResponse> CallOnce(v1::SessionRequest request,
                                               absl::Duration answer_timeout);
  // Ends every pending call with `status`.
  void FailPendingLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Dispatch(v1::SessionResponse& response);
  void CancelStream() ABSL_LOCKS_EXCLUDED(mu_);

  const SessionOptions options_;
  const std::shared_ptr<CoordinatorChannels> channels_;
  SessionListener* const listener_;
  std::atomic<bool> shutting_down_{false};

  // Order: write_mu_ before mu_. write_mu_ serialises writes to the stream
  // and the replacement of the stream (only the reader thread replaces it).
  absl::Mutex write_mu_;
  std::unique_ptr<Stream> stream_ ABSL_GUARDED_BY(write_mu_);
  // The coordinator stream_ is open with (only the reader thread sets it).
  CoordinatorChannels::Target stream_target_ ABSL_GUARDED_BY(write_mu_);

  mutable absl::Mutex mu_;
  absl::CondVar state_changed_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kOpening;
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);  // why the session is dead
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<uint64_t, Pending*> pending_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<uint64_t> held_ ABSL_GUARDED_BY(mu_);
  int64_t streams_opened_ ABSL_GUARDED_BY(mu_) = 0;
  QueueInfo opened_info_ ABSL_GUARDED_BY(mu_);
  std::thread reader_;
};

absl::Status SessionClient::Impl::Start(QueueInfo* info) {
  reader_ = std::thread([this] {
    NameThisThread("session-read");
    ReaderLoop();
  });
  absl::MutexLock lock(&mu_);
  const absl::Time give_up = absl::Now() + options_.open_timeout + kCloseWait;
  while (state_ == State::kOpening) {
    if (state_changed_.WaitWithDeadline(&mu_, give_up)) break;
  }
  if (state_ == State::kOpen) {
    *info = opened_info_;
    return absl::OkStatus();
  }
  if (state_ == State::kDead) return end_status_;
  // A coordinator that accepted the stream and never answered.
  return absl::UnavailableError(absl::StrCat(Name(), ": no answer to the session's open within ",
                                             absl::FormatDuration(options_.open_timeout)));
}

void SessionClient::Impl::ReaderLoop() {
  absl::Status opened = OpenWithRetries(options_.open_timeout);
  while (opened.ok()) {
    v1::SessionResponse response;
    // Only this thread replaces stream_, so it may read it unlocked.
    Stream* stream = ABSL_TS_UNCHECKED_READ(stream_).get();
    if (stream->Read(&response)) {
      Dispatch(response);
      continue;
    }
    absl::Status broke;
    {
      absl::MutexLock lock(&mu_);
      state_ = State::kReopening;
      state_changed_.SignalAll();
      broke = absl::UnavailableError(absl::StrCat(Name(), ": the stream broke"));
      FailPendingLocked(broke);
    }
    grpc::Status finished;
    std::string lost_address;
    {
      absl::MutexLock wlock(&write_mu_);
      finished = stream_->Finish();
      stream_.reset();
      lost_address = stream_target_.address;
      stream_target_ = {};
    }
    std::string leader_hint;
    {
      absl::MutexLock lock(&mu_);
      if (closing_) break;
      if (context_ != nullptr) leader_hint = LeaderHint(*context_);
    }
    // The re-open asks `channels_` again: a list moves on, etcd is read.
    channels_->Failed(lost_address, leader_hint);
    // Worded as the unary calls' note, which users and tests look for.
    SHARDQ_LOG_WARN(
        "lost the coordinator at {} ({}), re-opening the session of worker '{}' with queue "
        "'{}' (keeping its {} lease(s)) for up to {}",
        lost_address,
        finished.error_message().empty() ? "the stream ended" : finished.error_message(),
        options_.worker, options_.queue, HeldLeases().size(),
        absl::FormatDuration(options_.retry.total_budget));
    opened = OpenWithRetries(options_.retry.total_budget);
  }
  absl::MutexLock lock(&mu_);
  if (closing_) {
    state_ = State::kClosed;
    end_status_ = absl::FailedPreconditionError(absl::StrCat(Name(), ": closed"));
  } else {
    state_ = State::kDead;
    end_status_ = opened;
    // (A first open that failed is the caller's error to report.)
    if (streams_opened_ > 0) SHARDQ_LOG_WARN("{}: ended: {}", Name(), opened.ToString());
  }
  FailPendingLocked(end_status_);
  state_changed_.SignalAll();
}

absl::Status SessionClient::Impl::OpenWithRetries(absl::Duration budget) {
  const absl::Time give_up = absl::Now() + budget;
  absl::Duration backoff = options_.retry.initial_backoff;
  std::minstd_rand jitter(std::random_device{}());
  while (true) {
    absl::Status s = OpenOnce();
    if (s.ok() || !IsRetryable(s)) return s;
    if (InterruptRequested()) {
      return absl::CancelledError(absl::StrCat(Name(), ": interrupted while opening: ",
                                               s.message()));
    }
    absl::MutexLock lock(&mu_);
    if (closing_) return s;
    const absl::Time now = absl::Now();
    if (now >= give_up) {
      return absl::UnavailableError(absl::StrCat(Name(), ": gave up re-opening after ",
                                                 absl::FormatDuration(budget), ": ",
                                                 s.message()));
    }
    const double factor = 0.5 + 0.5 * static_cast<double>(jitter() - jitter.min()) /
                                    static_cast<double>(jitter.max() - jitter.min());
    const absl::Time wake = std::min(give_up, now + backoff * factor);
    while (!closing_ && !state_changed_.WaitWithDeadline(&mu_, wake)) {
    }
    if (closing_) return s;
    backoff = std::min(backoff * 2, options_.retry.max_backoff);
  }
}

absl::Status SessionClient::Impl::OpenOnce() {
  auto context = std::make_shared<grpc::ClientContext>();
  if (!options_.token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.token);
  }
  v1::SessionRequest open;
  v1::SessionOpen* o = open.mutable_open();
  o->set_queue(options_.queue);
  o->set_worker(options_.worker);
  o->mutable_version()->set_major(kProtocolMajor);
  o->mutable_version()->set_minor(kProtocolMinor);
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return absl::CancelledError(absl::StrCat(Name(), ": closed while opening"));
    context_ = context;
    o->mutable_lease_ids()->Add(held_.begin(), held_.end());
    // After a break, leases granted in answers lost with the stream are
    // unknown here: the coordinator releases them (not on a first open:
    // `shardq take` keeps what earlier runs left).
    o->set_reopen(streams_opened_ > 0);
  }
  absl::StatusOr<CoordinatorChannels::Target> target = channels_->Current();
  if (!target.ok()) {
    // etcd cannot be read or names nobody: retried (UNAVAILABLE) or not,
    // as the resolver says.
    return absl::Status(target.status().code(),
                        absl::StrCat(Name(), ": ", target.status().message()));
  }
  std::unique_ptr<Stream> stream = target->stub->Session(context.get());
  v1::SessionResponse answer;
  if (!stream->Write(open) || !stream->Read(&answer)) {
    absl::Status s = FromGrpcStatus(stream->Finish());
    if (s.ok()) s = absl::UnavailableError("the coordinator ended the stream before opening it");
    if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
      // Down, or a standby ("not leader: ..."): the next try goes to the
      // coordinator the resolver names then.
      channels_->Failed(target->address, LeaderHint(*context));
      return absl::UnavailableError(absl::StrCat("coordinator ", target->address,
                                                 " unavailable: ", s.message()));
    }
    return absl::Status(s.code(), absl::StrCat(Name(), ": ", s.message()));
  }
  const v1::ProtocolVersion& theirs = answer.opened().version();
  if (!answer.has_opened() || theirs.major() != kProtocolMajor) {
    context->TryCancel();
    stream->Finish().ok();  // the stream's status is of no interest now
    if (!answer.has_opened()) {
      return absl::InternalError(
          absl::StrCat(Name(), ": the coordinator's first message is not `opened`"));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        Name(), ": the coordinator speaks session protocol ", theirs.major(), ".",
        theirs.minor(), ", this client ", kProtocolMajor, ".", kProtocolMinor,
        " (major versions must match: upgrade the older side)"));
  }
  std::vector<uint64_t> lost(answer.opened().lost_lease_ids().begin(),
                             answer.opened().lost_lease_ids().end());
  // Proposals still awaiting this worker's answer come with `opened`.
  std::vector<SplitProposal> splits;
  for (const v1::SplitProposal& p : answer.splits()) {
    splits.push_back({p.lease_id(), p.split_point(), p.min_residual()});
  }
  {
    absl::MutexLock wlock(&write_mu_);
    stream_ = std::move(stream);
    stream_target_ = *std::move(target);
    absl::MutexLock lock(&mu_);
    for (uint64_t id : lost) held_.erase(id);
    opened_info_ = FromProto(answer.opened().queue());
    ++streams_opened_;
    state_ = State::kOpen;
    state_changed_.SignalAll();
  }
  if (listener_ != nullptr) {
    if (!lost.empty()) listener_->OnLostLeases(lost);
    if (!splits.empty()) listener_->OnSplitProposals(splits);
  }
  return absl::OkStatus();
}

void SessionClient::Impl::FailPendingLocked(const absl::Status& status) {
  for (auto& [id, pending] : pending_) {
    pending->done = true;
    pending->result = status;
    pending->cv.Signal();
  }
  pending_.clear();
}

void SessionClient::Impl::Dispatch(v1::SessionResponse& response) {
  std::vector<SplitProposal> splits;
  for (const v1::SplitProposal& p : response.splits()) {
    splits.push_back({p.lease_id(), p.split_point(), p.min_residual()});
  }
  std::vector<uint64_t> lost(response.lost_lease_ids().begin(),
                             response.lost_lease_ids().end());
  std::vector<uint64_t> orphans;  // granted to a call that gave up waiting
  {
    absl::MutexLock lock(&mu_);
    for (const v1::WorkItem& item : response.items()) held_.insert(item.lease_id());
    for (const v1::CompleteResult& r : response.complete_results()) {
      if (LeaseGone(r.status())) held_.erase(r.lease_id());
    }
    for (const v1::ReleaseResult& r : response.release_results()) {
      if (LeaseGone(r.status())) held_.erase(r.lease_id());
    }
    for (uint64_t id : lost) held_.erase(id);
    if (response.request_id() != 0) {
      auto it = pending_.find(response.request_id());
      if (it != pending_.end()) {
        Pending* pending = it->second;
        pending_.erase(it);
        pending->done = true;
        pending->result = std::move(response);
        pending->cv.Signal();
      } else {
        for (const v1::WorkItem& item : response.items()) orphans.push_back(item.lease_id());
      }
    }
  }
  if (!orphans.empty()) {
    // Nobody will read these items: give them back now rather than let
    // them count against num_clients until the session ends.
    v1::SessionRequest release;
    for (uint64_t id : orphans) release.add_releases()->set_lease_id(id);
    absl::MutexLock wlock(&write_mu_);
    uint64_t id;
    {
      absl::MutexLock lock(&mu_);
      id = ++next_request_id_;
    }
    release.set_request_id(id);
    if (stream_ != nullptr) stream_->Write(release);
  }
  if (listener_ == nullptr) return;
  if (!splits.empty()) listener_->OnSplitProposals(splits);
  if (!lost.empty()) listener_->OnLostLeases(lost);
}

void SessionClient::Impl::CancelStream() {
  absl::MutexLock lock(&mu_);
  if (context_ != nullptr) context_->TryCancel();
}

absl::StatusOr<v1::SessionResponse> SessionClient::Impl::CallOnce(
    v1::SessionRequest request, absl::Duration answer_timeout) {
  absl::Time give_up = absl::Now() + answer_timeout;
  // Once the owner is closing (BeginShutdown), a call waits at most
  // kShutdownAnswerTimeout more.
  bool shortened = false;
  auto shorten_at_shutdown = [&] {
    if (!shortened && shutting_down_.load()) {
      shortened = true;
      give_up = std::min(give_up, absl::Now() + kShutdownAnswerTimeout);
    }
  };
  Pending pending;
  uint64_t id = 0;
  while (id == 0) {
    {
      absl::MutexLock lock(&mu_);
      while ((state_ == State::kOpening || state_ == State::kReopening) &&
             absl::Now() < give_up) {
        if (InterruptRequestedUnlocked()) return Interrupted();
        shorten_at_shutdown();
        state_changed_.WaitWithDeadline(&mu_, std::min(give_up, absl::Now() + kInterruptPoll));
      }
      if (state_ == State::kDead || state_ == State::kClosed) return end_status_;
      if (state_ != State::kOpen) {
        return absl::UnavailableError(absl::StrCat(Name(), ": still re-opening the stream"));
      }
    }
    absl::MutexLock wlock(&write_mu_);
    {
      absl::MutexLock lock(&mu_);
      if (state_ != State::kOpen) continue;  // broke meanwhile: wait again
      id = ++next_request_id_;
      pending_[id] = &pending;
    }
    request.set_request_id(id);
    // A failed write means a broken stream: the reader thread notices it
    // and fails this call.
    stream_->Write(request);
  }
  absl::MutexLock lock(&mu_);
  while (!pending.done) {
    pending.cv.WaitWithDeadline(&mu_, std::min(give_up, absl::Now() + kInterruptPoll));
    if (pending.done) break;
    shorten_at_shutdown();
    if (InterruptRequestedUnlocked() && !pending.done) {
      pending_.erase(id);
      return Interrupted();
    }
    if (absl::Now() >= give_up) {
      pending_.erase(id);
      // Silent past its time: treat the stream as broken.
      if (context_ != nullptr) context_->TryCancel();
      return absl::UnavailableError(absl::StrCat(Name(), ": no answer within ",
                                                 absl::FormatDuration(answer_timeout)));
    }
  }
  return std::move(pending.result);
}

absl::StatusOr<v1::SessionResponse> SessionClient::Impl::CallRetrying(
    const v1::SessionRequest& request, absl::Duration wait) {
  const bool brief = shutting_down_.load();
  const absl::Duration answer_timeout =
      brief ? kShutdownAnswerTimeout : std::min(wait, kLongPoll) + options_.answer_timeout;
  const absl::Time give_up = absl::Now() + (brief ? absl::ZeroDuration()
                                                  : options_.retry.total_budget);
  absl::Duration backoff = options_.retry.initial_backoff;
  while (true) {
    absl::StatusOr<v1::SessionResponse> answer = CallOnce(request, answer_timeout);
    if (answer.ok()) {
      // An operation the coordinator could not do now (it is stopping, its
      // storage failed) is retried like a unary call that failed so; the
      // operations repeat safely (a repeated completion is a duplicate).
      const absl::Status transient = TransientOpStatus(*answer);
      if (transient.ok() || absl::Now() >= give_up || shutting_down_.load()) return answer;
      if (absl::IsUnavailable(transient) && absl::StrContains(transient.message(), "not leader")) {
        // A deposed leader: re-open the stream (with the leader the
        // resolver names then) rather than ask it again.
        CancelStream();
      }
      if (!SleepUnlessInterrupted(std::min(backoff, give_up - absl::Now()))) return answer;
      backoff = std::min(backoff * 2, options_.retry.max_backoff);
      continue;
    }
    // A call that began before BeginShutdown stops retrying now too.
    if (!IsRetryable(answer.status()) || absl::Now() >= give_up || Ended() ||
        shutting_down_.load()) {
      return answer;
    }
    if (InterruptRequested()) {
      return absl::CancelledError(
          absl::StrCat(Name(), ": interrupted after: ", answer.status().message()));
    }
  }
}

void SessionClient::Impl::Close() {
  bool open;
  {
    absl::MutexLock lock(&mu_);
    if (closing_) return;
    closing_ = true;
    open = state_ == State::kOpen;
    state_changed_.SignalAll();
  }
  if (open) {
    absl::MutexLock wlock(&write_mu_);
    if (stream_ != nullptr) stream_->WritesDone();
  } else {
    CancelStream();  // an open attempt in progress ends now
  }
  {
    absl::MutexLock lock(&mu_);
    const absl::Time give_up = absl::Now() + kCloseWait;
    while (state_ != State::kClosed && state_ != State::kDead) {
      if (state_changed_.WaitWithDeadline(&mu_, give_up)) break;
    }
  }
  CancelStream();
  if (reader_.joinable()) reader_.join();
}

// ---- SessionClient ---------------------------------------------------------

SessionClient::SessionClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SessionClient::~SessionClient() {
  if (!owner_.current()) {
    // Inherited through fork(): leak the parent's state rather than join a
    // thread or tear down a stream that do not exist here.
    impl_->AbandonReader();
    (void)impl_.release();  // NOLINT: intentional leak
    return;
  }
  impl_->Close();
}

absl::StatusOr<std::unique_ptr<SessionClient>> SessionClient::Open(
    std::shared_ptr<grpc::Channel> channel, SessionOptions options, SessionListener* listener) {
  std::shared_ptr<CoordinatorChannels> channels =
      CoordinatorChannels::Fixed(options.address, std::move(channel));
  return Open(std::move(channels), std::move(options), listener);
}

absl::StatusOr<std::unique_ptr<SessionClient>> SessionClient::Open(
    std::shared_ptr<CoordinatorChannels> channels, SessionOptions options,
    SessionListener* listener) {
  auto impl = std::make_unique<Impl>(std::move(channels), std::move(options), listener);
  QueueInfo info;
  absl::Status s = impl->Start(&info);
  if (!s.ok()) {
    impl->Close();
    return s;
  }
  std::unique_ptr<SessionClient> session(new SessionClient(std::move(impl)));
  session->queue_info_ = std::move(info);
  return session;
}

absl::StatusOr<v1::SessionResponse> SessionClient::Call(v1::SessionRequest request,
                                                        absl::Duration wait) {
  const bool waiting_take = request.take() > 0 && wait > absl::ZeroDuration();
  if (waiting_take) ++waiting_takes_;
  absl::StatusOr<v1::SessionResponse> answer = impl_->CallRetrying(request, wait);
  if (waiting_take) --waiting_takes_;
  return answer;
}

void SessionClient::ForgetLease(uint64_t lease_id) { impl_->ForgetLease(lease_id); }

void SessionClient::BeginShutdown() { impl_->BeginShutdown(); }
std::vector<uint64_t> SessionClient::HeldLeases() const { return impl_->HeldLeases(); }
int64_t SessionClient::streams_opened() const { return impl_->streams_opened(); }
const std::string& SessionClient::queue() const { return impl_->queue(); }

}  // namespace shardq
