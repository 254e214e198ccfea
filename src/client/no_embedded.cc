// InProcessBackend for shardq::remote_client: a program that links no
// coordinator has no in-process queue, so a WorkQueue needs an address.
#include "absl/status/status.h"
#include "src/client/backend.h"

namespace shardq {

absl::StatusOr<std::shared_ptr<QueueBackend>> InProcessBackend() {
  return absl::FailedPreconditionError(
      "no coordinator address: this program links shardq::remote_client, which has no "
      "embedded coordinator; set WorkQueueOptions::address (or SHARDQ_ADDRESS), or link "
      "shardq::client for a queue inside the process");
}

}  // namespace shardq
