// The QueueBackend of a coordinator reached over gRPC (`shardq serve`).
#ifndef SHARDQ_CLIENT_REMOTE_BACKEND_H_
#define SHARDQ_CLIENT_REMOTE_BACKEND_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "src/client/backend.h"
#include "src/client/retry.h"

namespace shardq {

struct RemoteOptions {
  // The coordinator: HOST:PORT (or unix:PATH, any gRPC target); a list
  // H1:P1,H2:P2 of one job's coordinators; or etcd://E1:P1[,E2:P2]/JOB,
  // the leader etcd names (src/client/coordinator_address.h). With a list
  // or etcd, a call that gets no answer or a standby's "not leader" goes
  // to the leader found then, within the waits below, and worker sessions
  // re-open there keeping their leases.
  std::string address;
  // Sent as "authorization: Bearer <token>" when non-empty.
  std::string token;
  // PEM file of the CA that signed the coordinator's certificate; non-empty
  // means TLS.
  std::string tls_ca_file;
  // Until the coordinator has answered once, a call waits at most this long
  // for it (from the call's start): it prints "waiting for the coordinator
  // at ADDR (REASON), retrying" to stderr after a second, and again every
  // 10 s, then fails with UNAVAILABLE naming the address and the last
  // connection error. A wrong address or a TLS mismatch thus ends in an
  // error, not a silent wait.
  absl::Duration connect_timeout = kDefaultConnectTimeout;
  // Once the coordinator has answered, calls ride through its outages (a
  // restart) under this policy, noting "lost the coordinator" on stderr.
  RetryPolicy retry;
  // Workers' calls for a queue travel over one session stream per worker
  // (src/client/session_client.h): the completion and the next take in one
  // message, no heartbeats, split proposals pushed. Off: unary calls and
  // heartbeats. A coordinator without sessions (an older `shardq serve`)
  // gets unary calls either way, after one warning.
  bool use_sessions = true;
};

// Does not connect yet (the first call does, as above). Every wait polls
// InterruptRequested() (retry.h) and then ends with CANCELLED.
// INVALID_ARGUMENT for an empty or malformed address (naming the bad
// part: ParseCoordinatorAddress), an unreadable CA file or a
// connect_timeout <= 0.
absl::StatusOr<std::shared_ptr<QueueBackend>> ConnectRemote(const RemoteOptions& options);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_REMOTE_BACKEND_H_
