// How the remote backend's unary calls reach the coordinator (its verbs
// are in remote_backend.cc, its worker sessions in session_client.h): one
// attempt per fresh context (deadline, token); before the coordinator's
// first answer, a wait for it bounded by the connect timeout, with notes on
// stderr and errors that name the address, the last connection error and a
// TLS hint; after it, retries of UNAVAILABLE/ABORTED through the one retry
// helper; while closing, one short attempt. With several coordinators (a
// list, etcd), each attempt goes to the one CoordinatorChannels names then.
//
// Thread-safe.
#ifndef SHARDQ_CLIENT_COORDINATOR_CALLS_H_
#define SHARDQ_CLIENT_COORDINATOR_CALLS_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/client/coordinator_channels.h"
#include "src/client/remote_backend.h"
#include "src/core/process.h"

namespace shardq {

class CoordinatorCalls {
 public:
  using Stub = v1::Coordinator::Stub;
  // One RPC on `stub` with `ctx` (deadline and token already set).
  using Rpc = absl::FunctionRef<grpc::Status(Stub& stub, grpc::ClientContext* ctx)>;

  // Deadline of a unary call that does not wait for items.
  static constexpr absl::Duration kCallTimeout = absl::Seconds(30);

  CoordinatorCalls(RemoteOptions options, std::shared_ptr<CoordinatorChannels> channels);

  // Runs `rpc` with a fresh context per attempt, each attempt's deadline
  // `timeout` from its start. Before the coordinator has answered once,
  // waits for it at most connect_timeout (notes "waiting for the
  // coordinator at ADDR"; CANCELLED when InterruptRequested(); UNAVAILABLE
  // naming the address and the last connection error at the end); after
  // that, retries UNAVAILABLE/ABORTED under options.retry (noting "lost the
  // coordinator"). After BeginShutdown(), one attempt of at most 2 s. In a
  // fork child that inherited this object: the InheritedGrpcError, without
  // calling. Otherwise the RPC's status, converted (src/rpc/convert.h).
  absl::Status Unary(absl::string_view method, Rpc rpc, absl::Duration timeout = kCallTimeout);

  // From now on calls try once, briefly (best-effort releases while closing).
  void BeginShutdown() { shutting_down_.store(true); }
  bool shutting_down() const { return shutting_down_.load(); }

  // Whether the coordinator has answered once; never cleared.
  bool contacted() const { return contacted_.load(); }
  // An answer that did not come through Unary (a session opened).
  void MarkContacted() { contacted_.store(true); }

  // False in a fork child that inherited this object: the channels run on
  // its parent's gRPC threads (src/rpc/grpc_fork.h).
  bool in_owner_process() const { return owner_.current(); }

 private:
  // One attempt, on the coordinator channels_ names now. No answer
  // (refused, timed out, not connected) or a standby's "not leader" becomes
  // UNAVAILABLE naming the coordinator, and the next attempt goes to the
  // one channels_ names then (the same one for a single address); any
  // other answer marks the coordinator as contacted.
  // *leader_hint (when not null) gets the leader a standby's "not leader"
  // answer names ("" for any other answer).
  absl::Status Attempt(Rpc rpc, absl::Duration timeout, std::string* leader_hint = nullptr);

  // The call before the coordinator's first answer: waits for a connection,
  // tries, and repeats until an answer or connect_timeout.
  absl::Status FirstContact(absl::string_view method, Rpc rpc, absl::Duration timeout);

  // Waits until the channel is connected (OK), the user interrupts
  // (CANCELLED) or `give_up` (UNAVAILABLE with the last connection error).
  // `reason` keeps the last error seen.
  //
  // With several coordinators, it waits for the one channels_ names; one
  // that fails to connect (LastConnectError's probe) makes channels_ name
  // the next, which the next round waits for.
  absl::Status AwaitReady(absl::string_view method, absl::Time started, absl::Time give_up,
                          std::string& reason);

  // What the client waits for, in errors: "the coordinator at H:P" as
  // before issue 18, else the list or the etcd endpoints and job.
  std::string Whom() const;

  // gRPC's error for the channel's failed connection attempt: a call on a
  // channel in TRANSIENT_FAILURE fails at once with it. Should the channel
  // have connected meanwhile, the probe (GetQueue of no name, which changes
  // nothing) reaches the coordinator and counts as contact.
  std::string LastConnectError();

  // An Attempt's UNAVAILABLE message without its "coordinator ADDR
  // unavailable: " for a single coordinator (the notes and errors name the
  // address themselves); with several, which one failed stays in it.
  std::string ReasonOf(const absl::Status& s) const;

  // What a TLS mismatch looks like from here, and what to check.
  std::string TlsHint(absl::string_view reason) const;

  // Logs "WHAT ADDR (REASON), THEN" as a warning, at most once per
  // kNoteInterval for this backend (many threads may be waiting).
  void Note(absl::string_view what, absl::string_view reason, absl::string_view then);

  absl::Status Interrupted(absl::string_view method) const;

  const RemoteOptions options_;
  const OwnerProcess owner_;
  const std::shared_ptr<CoordinatorChannels> channels_;
  const std::string spec_;  // the address as given, for messages
  std::atomic<bool> shutting_down_{false};
  // Set by the first answer of the coordinator; never cleared.
  std::atomic<bool> contacted_{false};
  absl::Mutex note_mu_;
  absl::Time next_note_ ABSL_GUARDED_BY(note_mu_) = absl::InfinitePast();
};

}  // namespace shardq

#endif  // SHARDQ_CLIENT_COORDINATOR_CALLS_H_
