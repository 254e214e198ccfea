// The in-process QueueBackend: a WorkQueue without an address talks to a
// CoordinatorImpl in this process. Its own target (shardq_embedded), the
// only part of the client that sees the server's headers.
#ifndef SHARDQ_CLIENT_EMBEDDED_BACKEND_H_
#define SHARDQ_CLIENT_EMBEDDED_BACKEND_H_

#include <memory>

#include "src/client/backend.h"

namespace shardq {

class CoordinatorImpl;

// The in-process backend over a process-wide CoordinatorImpl: every
// WorkQueue of this process without an address shares it, so worker threads
// naming the same queue share one queue.
std::shared_ptr<QueueBackend> EmbeddedBackend();

// A backend over a given coordinator (tests; the coordinator must outlive it).
std::shared_ptr<QueueBackend> BackendForCoordinator(CoordinatorImpl* coordinator);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_EMBEDDED_BACKEND_H_
