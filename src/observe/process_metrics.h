// The standard Prometheus `process_*` metrics of this process, read from
// /proc/self (Linux), and the shardq_build_info line.
#ifndef SHARDQ_OBSERVE_PROCESS_METRICS_H_
#define SHARDQ_OBSERVE_PROCESS_METRICS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardq {

struct ProcessMetrics {
  double cpu_seconds = 0;           // user + system time
  double resident_memory_bytes = 0;
  double virtual_memory_bytes = 0;
  double open_fds = 0;
  double max_fds = 0;               // the soft RLIMIT_NOFILE
  double start_time_seconds = 0;    // since the Unix epoch
};

// Reads /proc/self/stat, /proc/self/fd and /proc/stat. Errors name the
// file (NOT_FOUND without /proc). Thread-safe.
absl::StatusOr<ProcessMetrics> ReadProcessMetrics();

// Prometheus text of `m`: process_cpu_seconds_total (counter),
// process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds, process_start_time_seconds (gauges),
// each with HELP and TYPE.
std::string ProcessMetricsText(const ProcessMetrics& m);

// `shardq_build_info{version="<version>"} 1`, a gauge with HELP and TYPE.
std::string BuildInfoText(absl::string_view version);

// The version this binary was built as (CMake's project version).
absl::string_view ShardqVersion();

}  // namespace shardq

#endif  // SHARDQ_OBSERVE_PROCESS_METRICS_H_
