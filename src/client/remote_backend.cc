#include "src/client/remote_backend.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/client/coordinator_address.h"
#include "src/client/coordinator_channels.h"
#include "src/client/session_client.h"
#include "src/core/process.h"
#include "src/log/log.h"
#include "src/rpc/convert.h"
#include "src/rpc/grpc_fork.h"

namespace shardq {
namespace {

// Deadline of a unary call that does not wait for items.
constexpr absl::Duration kCallTimeout = absl::Seconds(30);
// A Take waits server-side at most this long before the client re-issues it
// (so a dead connection is noticed).
constexpr absl::Duration kLongPoll = absl::Seconds(10);
// Deadline of calls made while closing (best-effort releases).
constexpr absl::Duration kShutdownCallTimeout = absl::Seconds(2);
// Before the first answer: when the first "waiting" note is printed, how
// often notes repeat, the pause after a connected call got no answer, and
// the deadline of the call that fetches the connection error.
constexpr absl::Duration kFirstWaitingNote = absl::Seconds(1);
constexpr absl::Duration kNoteInterval = absl::Seconds(10);
constexpr absl::Duration kNoAnswerPause = absl::Milliseconds(200);
constexpr absl::Duration kProbeTimeout = absl::Seconds(1);

using Stub = v1::Coordinator::Stub;

class RemoteBackend final : public QueueBackend {
 public:
  RemoteBackend(RemoteOptions options, std::shared_ptr<CoordinatorChannels> channels)
      : options_(std::move(options)),
        channels_(std::move(channels)),
        spec_(channels_->address().spec) {}

  absl::StatusOr<QueueInfo> CreateQueue(const QueueConfig& config) override {
    v1::CreateQueueRequest req;
    ToProto(config, req.mutable_config());
    v1::QueueInfo resp;
    absl::Status s = Unary("CreateQueue", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.CreateQueue(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  absl::StatusOr<QueueInfo> GetQueue(absl::string_view queue) override {
    v1::GetQueueRequest req;
    req.set_queue(std::string(queue));
    v1::QueueInfo resp;
    absl::Status s = Unary("GetQueue", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.GetQueue(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  absl::StatusOr<std::vector<WorkItem>> Take(absl::string_view queue,
                                             absl::string_view worker,
                                             int64_t max_items,
                                             absl::Time deadline) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->Take(max_items, deadline);
    }
    v1::TakeRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_max_items(max_items);
    const absl::Duration wait =
        std::clamp(deadline - absl::Now(), absl::ZeroDuration(), kLongPoll);
    req.set_wait_ms(absl::ToInt64Milliseconds(wait));
    v1::TakeResponse resp;
    absl::Status s = Unary(
        "Take",
        [&](Stub& stub, grpc::ClientContext* ctx) { return stub.Take(ctx, req, &resp); },
        wait + kCallTimeout);
    if (!s.ok()) return s;
    if (resp.end_of_input()) {
      return absl::OutOfRangeError(absl::StrCat("queue '", queue, "': end of input"));
    }
    std::vector<WorkItem> items;
    for (const v1::WorkItem& item : resp.items()) items.push_back(FromProto(item));
    return items;
  }

  absl::StatusOr<CompleteOutcome> Complete(absl::string_view queue,
                                           absl::string_view worker,
                                           uint64_t lease_id, int64_t records) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->Complete(lease_id, records);
    }
    v1::CompleteRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_lease_id(lease_id);
    req.set_records(records);
    v1::CompleteResponse resp;
    absl::Status s = Unary("Complete", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Complete(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return resp.duplicate() ? CompleteOutcome::kDuplicate : CompleteOutcome::kCompleted;
  }

  absl::Status Release(absl::string_view queue, absl::string_view worker,
                       uint64_t lease_id) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->Release(lease_id);
    }
    v1::ReleaseRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_lease_id(lease_id);
    v1::ReleaseResponse resp;
    return Unary("Release", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Release(ctx, req, &resp);
    });
  }

  absl::StatusOr<bool> Fail(absl::string_view queue, absl::string_view worker,
                            uint64_t lease_id, absl::string_view reason) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->Fail(lease_id, reason);
    }
    v1::ReleaseRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_lease_id(lease_id);
    req.set_failed(true);
    req.set_reason(std::string(reason));
    v1::ReleaseResponse resp;
    absl::Status s = Unary("Release", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Release(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return resp.item_failed();
  }

  absl::StatusOr<HeartbeatReply> Heartbeat(
      absl::string_view queue, absl::string_view worker,
      const std::vector<uint64_t>& lease_ids,
      const std::vector<std::pair<uint64_t, int64_t>>& progress,
      absl::Duration wait) override {
    v1::HeartbeatRequest req;
    wait = std::clamp(wait, absl::ZeroDuration(), kLongPoll);
    req.set_wait_ms(absl::ToInt64Milliseconds(wait));
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.mutable_lease_ids()->Add(lease_ids.begin(), lease_ids.end());
    for (const auto& [lease, offset] : progress) {
      v1::LeaseProgress* p = req.add_progress();
      p->set_lease_id(lease);
      p->set_offset(offset);
    }
    v1::HeartbeatResponse resp;
    absl::Status s = Unary(
        "Heartbeat",
        [&](Stub& stub, grpc::ClientContext* ctx) { return stub.Heartbeat(ctx, req, &resp); },
        wait + kCallTimeout);
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  absl::StatusOr<bool> AcceptSplit(absl::string_view queue, absl::string_view worker,
                                   uint64_t lease_id, int64_t split_point) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->AcceptSplit(lease_id, split_point);
    }
    v1::AcceptSplitRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_lease_id(lease_id);
    req.set_split_point(split_point);
    v1::AcceptSplitResponse resp;
    absl::Status s = Unary("AcceptSplit", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.AcceptSplit(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return resp.accepted();
  }

  absl::StatusOr<QueueStats> Stats(absl::string_view queue) override {
    v1::StatusRequest req;
    req.set_queue(std::string(queue));
    v1::StatusResponse resp;
    absl::Status s = Unary("Status", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Status(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    NoteLeadership(resp);
    if (resp.queues_size() != 1) {
      return absl::InternalError(absl::StrCat("status of queue '", queue, "' returned ",
                                              resp.queues_size(), " queues"));
    }
    return FromProto(resp.queues(0));
  }

  absl::Status ReportProgress(
      absl::string_view queue, absl::string_view worker,
      const std::vector<std::pair<uint64_t, int64_t>>& progress) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->ReportProgress(progress);
    }
    v1::ReportProgressRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    for (const auto& [lease, offset] : progress) {
      v1::LeaseProgress* p = req.add_progress();
      p->set_lease_id(lease);
      p->set_offset(offset);
    }
    v1::ReportProgressResponse resp;
    return Unary("ReportProgress", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.ReportProgress(ctx, req, &resp);
    });
  }

  // Retried like every call: a report carries the participant's whole
  // state, so repeating one changes nothing.
  absl::StatusOr<StepTally> AgreeSteps(absl::string_view queue,
                                       const StepReport& report) override {
    v1::AgreeStepsRequest req;
    ToProto(report, &req);
    req.set_queue(std::string(queue));
    v1::AgreeStepsResponse resp;
    absl::Status s = Unary("AgreeSteps", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.AgreeSteps(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  absl::StatusOr<journal::Checkpoint> ExportCheckpoint(absl::string_view queue) override {
    v1::ExportCheckpointRequest req;
    req.set_queue(std::string(queue));
    v1::ExportCheckpointResponse resp;
    absl::Status s = Unary("ExportCheckpoint", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.ExportCheckpoint(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    journal::Checkpoint checkpoint;
    if (!checkpoint.ParseFromString(resp.checkpoint())) {
      return absl::DataLossError("the coordinator sent an unreadable checkpoint");
    }
    return checkpoint;
  }

  absl::StatusOr<QueueInfo> RestoreCheckpoint(const journal::Checkpoint& checkpoint,
                                              const std::string& name) override {
    v1::RestoreCheckpointRequest req;
    checkpoint.SerializeToString(req.mutable_checkpoint());
    req.set_name(name);
    v1::QueueInfo resp;
    absl::Status s = Unary("RestoreCheckpoint", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.RestoreCheckpoint(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  CompleteAndTakeReply CompleteAndTake(absl::string_view queue, absl::string_view worker,
                                       uint64_t lease_id, int64_t records, int64_t max_items,
                                       absl::Time deadline) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->CompleteAndTake(lease_id, records, max_items, deadline);
    }
    return QueueBackend::CompleteAndTake(queue, worker, lease_id, records, max_items,
                                         deadline);
  }

  absl::StatusOr<bool> BeginSession(absl::string_view queue, absl::string_view worker,
                                    SessionListener* listener) override {
    if (!options_.use_sessions || no_sessions_.load() || !owner_.current()) return false;
    if (!contacted_.load()) {
      // The first contact waits for the coordinator as every unary call
      // does (notes on stderr, the connect timeout, Ctrl-C).
      if (absl::Status s = GetQueue(queue).status(); !s.ok()) return s;
    }
    SessionOptions session_options;
    session_options.queue = std::string(queue);
    session_options.worker = std::string(worker);
    session_options.token = options_.token;
    session_options.address = spec_;
    session_options.open_timeout = options_.connect_timeout;
    session_options.retry = options_.retry;
    absl::StatusOr<std::unique_ptr<SessionClient>> session =
        SessionClient::Open(channels_, std::move(session_options), listener);
    if (absl::IsUnimplemented(session.status())) {
      no_sessions_.store(true);
      // Once per process: every worker of it would say the same.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        SHARDQ_LOG_WARN(
            "the coordinator at {} has no worker sessions (an older shardq serve?); using "
            "unary calls and heartbeats",
            spec_);
      }
      return false;
    }
    if (!session.ok()) return session.status();
    contacted_.store(true);
    if (shutting_down_.load()) (*session)->BeginShutdown();
    absl::MutexLock lock(&sessions_mu_);
    sessions_[SessionKey(queue, worker)] = std::shared_ptr<SessionClient>(*std::move(session));
    session_count_.store(static_cast<int64_t>(sessions_.size()));
    return true;
  }

  void EndSession(absl::string_view queue, absl::string_view worker) override {
    std::shared_ptr<SessionClient> session;
    {
      absl::MutexLock lock(&sessions_mu_);
      auto it = sessions_.find(SessionKey(queue, worker));
      if (it == sessions_.end()) return;
      session = std::move(it->second);
      sessions_.erase(it);
      session_count_.store(static_cast<int64_t>(sessions_.size()));
    }
    // Closed here (or by the last call still using it), outside the lock.
  }

  void BeginShutdown() override {
    shutting_down_.store(true);
    absl::MutexLock lock(&sessions_mu_);
    for (auto& [key, session] : sessions_) session->BeginShutdown();
  }

  absl::StatusOr<std::vector<QueueStats>> AllStats() override {
    v1::StatusRequest req;
    v1::StatusResponse resp;
    absl::Status s = Unary("Status", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Status(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    NoteLeadership(resp);
    std::vector<QueueStats> out;
    for (const v1::QueueStatus& q : resp.queues()) out.push_back(FromProto(q));
    return out;
  }

  std::optional<Leadership> LastLeadership() const override {
    absl::MutexLock lock(&leadership_mu_);
    return leadership_;
  }

  std::string LastStatusPage() const override {
    absl::MutexLock lock(&leadership_mu_);
    return status_page_;
  }

 private:
  void NoteLeadership(const v1::StatusResponse& resp) {
    absl::MutexLock lock(&leadership_mu_);
    status_page_ = resp.status_page();
    if (resp.has_leadership()) leadership_ = FromProto(resp.leadership());
  }

  static std::string SessionKey(absl::string_view queue, absl::string_view worker) {
    return absl::StrCat(queue.size(), ":", queue, worker);
  }

  // The open session of (queue, worker), or null: use the unary calls.
  // (None in a fork child: the unary path refuses the call there.)
  std::shared_ptr<SessionClient> SessionOf(absl::string_view queue, absl::string_view worker) {
    if (session_count_.load(std::memory_order_relaxed) == 0 || !owner_.current()) return nullptr;
    absl::MutexLock lock(&sessions_mu_);
    auto it = sessions_.find(SessionKey(queue, worker));
    return it == sessions_.end() ? nullptr : it->second;
  }

  // Runs one RPC with a fresh context (deadline, token) per attempt. Before
  // the coordinator has answered once, waits for it at most
  // connect_timeout (FirstContact); after that, retries UNAVAILABLE/ABORTED
  // through the one retry helper (a restarting coordinator).
  template <typename Rpc>
  absl::Status Unary(absl::string_view method, Rpc rpc,
                     absl::Duration timeout = kCallTimeout) {
    if (!owner_.current()) {
      return InheritedGrpcError(
          absl::StrCat(method, ": the connection to coordinator ", options_.address),
          owner_.pid());
    }
    RetryPolicy policy = options_.retry;
    if (shutting_down_.load()) {
      policy.total_budget = absl::ZeroDuration();
      timeout = std::min(timeout, kShutdownCallTimeout);
    } else if (!contacted_.load()) {
      absl::Status s = FirstContact(method, rpc, timeout);
      if (!absl::IsUnavailable(s) || !contacted_.load()) return s;
      // Another call made contact meanwhile: this one retries as usual.
    }
    return CallWithRetry(policy, absl::StrCat(method, " on coordinator ", spec_),
                         [&]() -> absl::Status {
                           absl::Status s = Attempt(rpc, timeout);
                           if (absl::IsUnavailable(s) && !shutting_down_.load()) {
                             Note("lost the coordinator at ", ReasonOf(s),
                                  absl::StrCat("retrying for up to ",
                                               absl::FormatDuration(policy.total_budget)));
                           }
                           return s;
                         });
  }

  // One attempt, on the coordinator channels_ names now. No answer
  // (refused, timed out, not connected) or a standby's "not leader" becomes
  // UNAVAILABLE naming the coordinator, and the next attempt goes to the
  // one channels_ names then (the same one for a single address); any
  // other answer marks the coordinator as contacted.
  template <typename Rpc>
  absl::Status Attempt(Rpc& rpc, absl::Duration timeout) {
    absl::StatusOr<CoordinatorChannels::Target> target = channels_->Current();
    if (!target.ok()) {
      // etcd names no leader now (UNAVAILABLE: retried) or an unusable one.
      return absl::Status(target.status().code(),
                          absl::StrCat("coordinator ", spec_, " unavailable: ",
                                       target.status().message()));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    if (!options_.token.empty()) {
      ctx.AddMetadata("authorization", "Bearer " + options_.token);
    }
    absl::Status s = FromGrpcStatus(rpc(*target->stub, &ctx));
    if (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s)) {
      // A timed-out call is retried like a refused one: the coordinator may
      // be restarting.
      channels_->Failed(target->address, LeaderHint(ctx));
      return absl::UnavailableError(
          absl::StrCat("coordinator ", target->address, " unavailable: ", s.message()));
    }
    contacted_.store(true);
    return s;
  }

  // The call before the coordinator's first answer: waits for a connection,
  // tries, and repeats until an answer or connect_timeout.
  template <typename Rpc>
  absl::Status FirstContact(absl::string_view method, Rpc& rpc, absl::Duration timeout) {
    const absl::Time started = absl::Now();
    const absl::Time give_up = started + options_.connect_timeout;
    std::string reason;
    while (!contacted_.load()) {
      if (absl::Status ready = AwaitReady(method, started, give_up, reason); !ready.ok()) {
        return ready;
      }
      if (contacted_.load()) break;
      absl::Status s = Attempt(rpc, timeout);
      if (!absl::IsUnavailable(s)) return s;
      // Connected, yet no answer: not a coordinator, one going away, or a
      // standby of a highly available job ("not leader", naming the
      // leader). The connect timeout bounds this wait too (the channel
      // stays ready, so AwaitReady does not).
      reason = ReasonOf(s);
      if (absl::Now() >= give_up) {
        return absl::UnavailableError(absl::StrCat(
            method, ": no answer from the coordinator at ", options_.address, " within ",
            absl::FormatDuration(options_.connect_timeout), " (the connect timeout): ", reason));
      }
      if (!SleepUnlessInterrupted(std::min(kNoAnswerPause, give_up - absl::Now()))) {
        return Interrupted(method);
      }
    }
    return absl::UnavailableError("contact made by another call");  // caller retries
  }

  // Waits until the channel is connected (OK), the user interrupts
  // (CANCELLED) or `give_up` (UNAVAILABLE with the last connection error).
  // `reason` keeps the last error seen.
  //
  // With several coordinators, it waits for the one channels_ names; one
  // that fails to connect (LastConnectError's probe) makes channels_ name
  // the next, which the next round waits for.
  absl::Status AwaitReady(absl::string_view method, absl::Time started, absl::Time give_up,
                          std::string& reason) {
    while (true) {
      if (InterruptRequested()) return Interrupted(method);
      absl::StatusOr<CoordinatorChannels::Target> target = channels_->Current();
      grpc_connectivity_state state = GRPC_CHANNEL_TRANSIENT_FAILURE;
      if (!target.ok()) {
        if (!IsRetryable(target.status())) {
          return absl::Status(target.status().code(),
                              absl::StrCat(method, ": ", target.status().message()));
        }
        reason = std::string(target.status().message());  // etcd names no leader yet
      } else {
        state = target->channel->GetState(/*try_to_connect=*/true);
        if (state == GRPC_CHANNEL_READY) return absl::OkStatus();
        if (state == GRPC_CHANNEL_TRANSIENT_FAILURE) {
          reason = LastConnectError();
          if (contacted_.load()) return absl::OkStatus();
        }
      }
      const absl::Time now = absl::Now();
      const std::string why = reason.empty() ? "no connection yet" : reason;
      // The note comes before the give-up check, so a wait that lasted past
      // kFirstWaitingNote has shown it even if this thread woke late.
      if (now - started >= kFirstWaitingNote) {
        Note("waiting for the coordinator at ", why, "retrying");
      }
      if (now >= give_up) {
        return absl::UnavailableError(absl::StrCat(
            method, ": no answer from ", Whom(), " within ",
            absl::FormatDuration(options_.connect_timeout), " (the connect timeout): ", why,
            TlsHint(why)));
      }
      const absl::Time wake = std::min(now + kInterruptPoll, give_up);
      if (target.ok()) {
        target->channel->WaitForStateChange(state, absl::ToChronoTime(wake));
      } else if (!SleepUnlessInterrupted(wake - now)) {
        return Interrupted(method);
      }
    }
  }

  // What the client waits for, in errors: "the coordinator at H:P" as
  // before issue 18, else the list or the etcd endpoints and job.
  std::string Whom() const {
    if (channels_->single()) return absl::StrCat("the coordinator at ", spec_);
    return channels_->address().Describe();
  }

  // gRPC's error for the channel's failed connection attempt: a call on a
  // channel in TRANSIENT_FAILURE fails at once with it. Should the channel
  // have connected meanwhile, the probe (GetQueue of no name, which changes
  // nothing) reaches the coordinator and counts as contact.
  std::string LastConnectError() {
    v1::GetQueueRequest req;
    v1::QueueInfo resp;
    auto probe = [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.GetQueue(ctx, req, &resp);
    };
    absl::Status s = Attempt(probe, kProbeTimeout);
    return absl::IsUnavailable(s) ? ReasonOf(s) : "";
  }

  // An Attempt's UNAVAILABLE message without its "coordinator ADDR
  // unavailable: " for a single coordinator (the notes and errors name the
  // address themselves); with several, which one failed stays in it.
  std::string ReasonOf(const absl::Status& s) const {
    return std::string(absl::StripPrefix(
        s.message(), absl::StrCat("coordinator ", spec_, " unavailable: ")));
  }

  // What a TLS mismatch looks like from here, and what to check.
  std::string TlsHint(absl::string_view reason) const {
    const std::string lower = absl::AsciiStrToLower(reason);
    const bool handshake = absl::StrContains(lower, "handshake") ||
                           absl::StrContains(lower, "ssl") || absl::StrContains(lower, "tls");
    if (!options_.tls_ca_file.empty() && handshake) {
      return absl::StrCat("; this client uses TLS (--tls-ca ", options_.tls_ca_file,
                          "): is the coordinator serving TLS with a certificate that CA signed?");
    }
    // A TLS server drops a plaintext client's connection after accepting it.
    const bool dropped = absl::StrContains(lower, "closed") || absl::StrContains(lower, "reset");
    if (options_.tls_ca_file.empty() && dropped) {
      return "; if the coordinator serves TLS, pass --tls-ca (or SHARDQ_TLS_CA)";
    }
    return "";
  }

  // Logs "WHAT ADDR (REASON), THEN" as a warning, at most once per
  // kNoteInterval for this backend (many threads may be waiting).
  void Note(absl::string_view what, absl::string_view reason, absl::string_view then) {
    const absl::Time now = absl::Now();
    {
      absl::MutexLock lock(&note_mu_);
      if (now < next_note_) return;
      next_note_ = now + kNoteInterval;
    }
    SHARDQ_LOG_WARN("{}{} ({}), {}", std::string(what), spec_, std::string(reason),
                    std::string(then));
  }

  absl::Status Interrupted(absl::string_view method) const {
    return absl::CancelledError(absl::StrCat(
        method, ": interrupted while waiting for the coordinator at ", spec_));
  }

  const RemoteOptions options_;
  // A fork child that inherited this backend refuses every call: the
  // channels run on its parent's gRPC threads (src/rpc/grpc_fork.h).
  const OwnerProcess owner_;
  const std::shared_ptr<CoordinatorChannels> channels_;
  const std::string spec_;  // the address as given, for messages
  std::atomic<bool> shutting_down_{false};
  // Set by the first answer of the coordinator; never cleared.
  std::atomic<bool> contacted_{false};
  // Set when the coordinator answered a session with UNIMPLEMENTED.
  std::atomic<bool> no_sessions_{false};
  absl::Mutex sessions_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<SessionClient>> sessions_
      ABSL_GUARDED_BY(sessions_mu_);
  std::atomic<int64_t> session_count_{0};
  absl::Mutex note_mu_;
  absl::Time next_note_ ABSL_GUARDED_BY(note_mu_) = absl::InfinitePast();
  mutable absl::Mutex leadership_mu_;
  std::optional<Leadership> leadership_ ABSL_GUARDED_BY(leadership_mu_);
  std::string status_page_ ABSL_GUARDED_BY(leadership_mu_);
};

}  // namespace

absl::StatusOr<std::shared_ptr<QueueBackend>> ConnectRemote(const RemoteOptions& options) {
  absl::StatusOr<CoordinatorAddress> address = ParseCoordinatorAddress(options.address);
  if (!address.ok()) return address.status();
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "connect timeout must be > 0, got ", absl::FormatDuration(options.connect_timeout)));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (!options.tls_ca_file.empty()) {
    std::ifstream in(options.tls_ca_file, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read TLS CA file '", options.tls_ca_file, "'"));
    }
    std::ostringstream pem;
    pem << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.str();
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  absl::StatusOr<std::unique_ptr<LeaderResolver>> resolver =
      LeaderResolver::Create(*std::move(address));
  if (!resolver.ok()) return resolver.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly after a coordinator restart.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // Each channel counts as live gRPC state while it lives, and none is made
  // in a fork child that cannot use gRPC (src/rpc/grpc_fork.h).
  if (absl::Status usable = CheckGrpcUsable(); !usable.ok()) return usable;
  auto channels = std::make_shared<CoordinatorChannels>(
      *std::move(resolver), [credentials, args](const std::string& target) {
        return CreateForkAwareChannel(target, credentials, args);
      });
  return std::shared_ptr<QueueBackend>(
      std::make_shared<RemoteBackend>(options, std::move(channels)));
}

}  // namespace shardq
