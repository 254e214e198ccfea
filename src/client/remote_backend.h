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
  std::string address;  // host:port
  // Sent as "authorization: Bearer <token>" when non-empty.
  std::string token;
  // PEM file of the CA that signed the coordinator's certificate; non-empty
  // means TLS.
  std::string tls_ca_file;
  RetryPolicy retry;
};

// Does not connect yet (the first call does, with retries).
// INVALID_ARGUMENT for an empty address or an unreadable CA file.
absl::StatusOr<std::shared_ptr<QueueBackend>> ConnectRemote(const RemoteOptions& options);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_REMOTE_BACKEND_H_
