// The remote backend's unary calls: waiting for the coordinator's first
// answer, retrying after it, and the notes and errors of both
// (coordinator_calls.h).
#include "src/client/coordinator_calls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "src/client/retry.h"
#include "src/log/log.h"
#include "src/rpc/convert.h"
#include "src/rpc/grpc_fork.h"

namespace shardq {
namespace {

// Deadline of calls made while closing (best-effort releases).
constexpr absl::Duration kShutdownCallTimeout = absl::Seconds(2);
// Before the first answer: when the first "waiting" note is printed, how
// often notes repeat, the pause after a connected call got no answer, and
// the deadline of the call that fetches the connection error.
constexpr absl::Duration kFirstWaitingNote = absl::Seconds(1);
constexpr absl::Duration kNoteInterval = absl::Seconds(10);
constexpr absl::Duration kNoAnswerPause = absl::Milliseconds(200);
constexpr absl::Duration kProbeTimeout = absl::Seconds(1);

}  // namespace

CoordinatorCalls::CoordinatorCalls(RemoteOptions options,
                                   std::shared_ptr<CoordinatorChannels> channels)
    : options_(std::move(options)),
      channels_(std::move(channels)),
      spec_(channels_->address().spec) {}

absl::Status CoordinatorCalls::Unary(absl::string_view method, Rpc rpc,
                                     absl::Duration timeout) {
  if (!owner_.current()) {
    return InheritedGrpcError(
        absl::StrCat(method, ": the connection to coordinator ", options_.address),
        owner_.pid());
  }
  RetryPolicy policy = options_.retry;
  policy.stop = &shutting_down_;  // a call retrying at BeginShutdown stops
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

absl::Status CoordinatorCalls::Attempt(Rpc rpc, absl::Duration timeout,
                                       std::string* leader_hint) {
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
    const std::string hint = LeaderHint(ctx);
    if (leader_hint != nullptr) *leader_hint = hint;
    channels_->Failed(target->address, hint);
    return absl::UnavailableError(
        absl::StrCat("coordinator ", target->address, " unavailable: ", s.message()));
  }
  contacted_.store(true);
  return s;
}

absl::Status CoordinatorCalls::FirstContact(absl::string_view method, Rpc rpc,
                                            absl::Duration timeout) {
  const absl::Time started = absl::Now();
  const absl::Time give_up = started + options_.connect_timeout;
  std::string reason;
  while (!contacted_.load()) {
    if (absl::Status ready = AwaitReady(method, started, give_up, reason); !ready.ok()) {
      return ready;
    }
    if (contacted_.load()) break;
    std::string leader_hint;
    absl::Status s = Attempt(rpc, timeout, &leader_hint);
    if (!absl::IsUnavailable(s)) return s;
    reason = ReasonOf(s);
    if (channels_->single() && !leader_hint.empty()) {
      // A standby of a highly available job, named alone: it serves
      // nothing, and waiting does not change who leads. Said at once.
      return absl::UnavailableError(absl::StrCat(
          method, ": the coordinator at ", options_.address, " is a standby (", reason,
          "): give the leader's address ", leader_hint,
          ", the job's coordinators as a list H1:P1,H2:P2, or etcd://ENDPOINTS/JOB"));
    }
    // Connected, yet no answer: not a coordinator, or one going away. The
    // connect timeout bounds this wait too (the channel stays ready, so
    // AwaitReady does not).
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

absl::Status CoordinatorCalls::AwaitReady(absl::string_view method, absl::Time started,
                                          absl::Time give_up, std::string& reason) {
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

std::string CoordinatorCalls::Whom() const {
  if (channels_->single()) return absl::StrCat("the coordinator at ", spec_);
  return channels_->address().Describe();
}

std::string CoordinatorCalls::LastConnectError() {
  v1::GetQueueRequest req;
  v1::QueueInfo resp;
  auto probe = [&](Stub& stub, grpc::ClientContext* ctx) {
    return stub.GetQueue(ctx, req, &resp);
  };
  absl::Status s = Attempt(probe, kProbeTimeout);
  return absl::IsUnavailable(s) ? ReasonOf(s) : "";
}

std::string CoordinatorCalls::ReasonOf(const absl::Status& s) const {
  return std::string(absl::StripPrefix(
      s.message(), absl::StrCat("coordinator ", spec_, " unavailable: ")));
}

std::string CoordinatorCalls::TlsHint(absl::string_view reason) const {
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

void CoordinatorCalls::Note(absl::string_view what, absl::string_view reason,
                            absl::string_view then) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&note_mu_);
    if (now < next_note_) return;
    next_note_ = now + kNoteInterval;
  }
  SHARDQ_LOG_WARN("{}{} ({}), {}", std::string(what), spec_, std::string(reason),
                  std::string(then));
}

absl::Status CoordinatorCalls::Interrupted(absl::string_view method) const {
  return absl::CancelledError(absl::StrCat(
      method, ": interrupted while waiting for the coordinator at ", spec_));
}

}  // namespace shardq
