#include <atomic>

#include "absl/strings/str_cat.h"
#include "src/client/backend.h"
#include "src/client/discovery.h"
#include "src/client/remote_backend.h"

namespace shardq {

absl::StatusOr<ConnectedBackend> ConnectBackend(const std::string& address,
                                                const std::string& token,
                                                const std::string& tls_ca_file,
                                                const std::string& worker_id,
                                                absl::Duration connect_timeout) {
  const EnvLookup env = ProcessEnv();
  absl::StatusOr<Discovered> found = DiscoverCoordinator(address, env);
  if (!found.ok()) return found.status();
  ConnectedBackend out;
  out.worker_id = worker_id;
  if (out.worker_id.empty() && !found->worker_id.empty()) {
    // The environment names the process; further queues in it get a suffix
    // so that two WorkQueues never share one worker's leases.
    static std::atomic<int64_t> uses{0};
    const int64_t n = uses.fetch_add(1);
    out.worker_id = n == 0 ? found->worker_id : absl::StrCat(found->worker_id, ".", n);
  }
  if (found->address.empty()) {
    absl::StatusOr<std::shared_ptr<QueueBackend>> embedded = InProcessBackend();
    if (!embedded.ok()) return embedded.status();
    out.backend = *std::move(embedded);
    return out;
  }
  RemoteOptions remote;
  remote.address = found->address;
  remote.token = token.empty() ? env("SHARDQ_TOKEN").value_or("") : token;
  remote.tls_ca_file = tls_ca_file.empty() ? env("SHARDQ_TLS_CA").value_or("") : tls_ca_file;
  remote.connect_timeout = connect_timeout;
  absl::StatusOr<std::shared_ptr<QueueBackend>> backend = ConnectRemote(remote);
  if (!backend.ok()) return backend.status();
  out.backend = *std::move(backend);
  out.address = found->address;
  return out;
}

}  // namespace shardq
