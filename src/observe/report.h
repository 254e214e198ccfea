// `shardq report`: a self-contained HTML file (the live page with its data
// inside, no network needed to open it) of one queue of a running
// coordinator, fetched from its status server (`serve --http`).
#ifndef SHARDQ_OBSERVE_REPORT_H_
#define SHARDQ_OBSERVE_REPORT_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace shardq {

struct ReportSource {
  std::string address;  // HOST:PORT of the coordinator's --http server
  std::string queue;
  std::string token;    // empty: none sent
  absl::Duration timeout = absl::Seconds(30);
  // Called when something answers at `address` but not HTTP (the
  // coordinator's gRPC port): returns the HOST:PORT of that coordinator's
  // status page, fetched instead. Unset: UNAVAILABLE.
  std::function<absl::StatusOr<std::string>()> page_of_grpc_address;
};

// Fetches /api/server, /api/status and /api/timeline (every event the
// coordinator still keeps) and returns ReportHtml of them. UNAVAILABLE
// naming the address when nothing answers there or it does not answer
// HTTP (and page_of_grpc_address is unset), PERMISSION_DENIED on 401,
// NOT_FOUND for an unknown queue.
absl::StatusOr<std::string> FetchReport(const ReportSource& source);

// The report of `queue` from the endpoints' JSON: INVALID_ARGUMENT when
// `status` has no such queue.
absl::StatusOr<std::string> ReportHtml(nlohmann::json server, const nlohmann::json& status,
                                       nlohmann::json timeline, const std::string& queue);

}  // namespace shardq

#endif  // SHARDQ_OBSERVE_REPORT_H_
