// `shardq report`: a self-contained HTML file (the live page with its data
// inside, no network needed to open it) of one queue of a running
// coordinator, fetched from its status server (`serve --http`).
#ifndef SHARDQ_OBSERVE_REPORT_H_
#define SHARDQ_OBSERVE_REPORT_H_

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
};

// Fetches /api/server, /api/status and /api/timeline (every event the
// coordinator still keeps) and returns ReportHtml of them. UNAVAILABLE
// naming the address when it does not answer HTTP (a gRPC --listen port
// does not), PERMISSION_DENIED on 401, NOT_FOUND for an unknown queue.
absl::StatusOr<std::string> FetchReport(const ReportSource& source);

// The report of `queue` from the endpoints' JSON: INVALID_ARGUMENT when
// `status` has no such queue.
absl::StatusOr<std::string> ReportHtml(nlohmann::json server, const nlohmann::json& status,
                                       nlohmann::json timeline, const std::string& queue);

}  // namespace shardq

#endif  // SHARDQ_OBSERVE_REPORT_H_
