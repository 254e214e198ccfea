#include "src/observe/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/observe/summary_writer.h"

#ifndef SHARDQ_VERSION
#error "SHARDQ_VERSION is set by src/observe/CMakeLists.txt from the project version"
#endif

namespace shardq {
namespace {

absl::StatusOr<std::string> ReadProcFile(const char* path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

absl::string_view ShardqVersion() { return SHARDQ_VERSION; }

absl::StatusOr<ProcessMetrics> ReadProcessMetrics() {
  absl::StatusOr<std::string> stat = ReadProcFile("/proc/self/stat");
  if (!stat.ok()) return stat.status();
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
  // the fields start after the last ')'. Field 3 (state) is rest[0].
  const size_t paren = stat->rfind(')');
  if (paren == std::string::npos) {
    return absl::DataLossError(absl::StrCat("/proc/self/stat: no ')' in '", *stat, "'"));
  }
  const std::vector<std::string> rest =
      absl::StrSplit(stat->substr(paren + 1), ' ', absl::SkipEmpty());
  // man 5 proc: utime 14, stime 15, starttime 22, vsize 23, rss 24.
  auto field = [&](int number, double* out) {
    const size_t index = static_cast<size_t>(number - 3);
    return index < rest.size() && absl::SimpleAtod(rest[index], out);
  };
  double utime, stime, start_ticks, vsize, rss_pages;
  if (!field(14, &utime) || !field(15, &stime) || !field(22, &start_ticks) ||
      !field(23, &vsize) || !field(24, &rss_pages)) {
    return absl::DataLossError(absl::StrCat("/proc/self/stat: cannot parse '", *stat, "'"));
  }
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  ProcessMetrics m;
  m.cpu_seconds = (utime + stime) / ticks;
  m.virtual_memory_bytes = vsize;
  m.resident_memory_bytes = rss_pages * static_cast<double>(::sysconf(_SC_PAGESIZE));

  absl::StatusOr<std::string> system = ReadProcFile("/proc/stat");
  if (!system.ok()) return system.status();
  double boot_time = -1;
  for (absl::string_view line : absl::StrSplit(*system, '\n')) {
    if (absl::ConsumePrefix(&line, "btime ") && absl::SimpleAtod(line, &boot_time)) break;
  }
  if (boot_time < 0) return absl::DataLossError("/proc/stat: no 'btime' line");
  m.start_time_seconds = boot_time + start_ticks / ticks;

  DIR* fds = ::opendir("/proc/self/fd");
  if (fds == nullptr) return absl::NotFoundError("cannot read /proc/self/fd");
  int count = 0;
  while (const dirent* entry = ::readdir(fds)) {
    if (entry->d_name[0] != '.') ++count;
  }
  ::closedir(fds);
  m.open_fds = count - 1;  // not the descriptor opendir held
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0) m.max_fds = static_cast<double>(limit.rlim_cur);
  return m;
}

std::string ProcessMetricsText(const ProcessMetrics& m) {
  const struct {
    const char* name;
    const char* type;
    const char* help;
    double value;
  } metrics[] = {
      {"process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
       m.cpu_seconds},
      {"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
       m.resident_memory_bytes},
      {"process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
       m.virtual_memory_bytes},
      {"process_open_fds", "gauge", "Number of open file descriptors.", m.open_fds},
      {"process_max_fds", "gauge", "Maximum number of open file descriptors.", m.max_fds},
      {"process_start_time_seconds", "gauge",
       "Start time of the process since unix epoch in seconds.", m.start_time_seconds},
  };
  std::string out;
  for (const auto& metric : metrics) {
    absl::StrAppend(&out, "# HELP ", metric.name, " ", metric.help, "\n# TYPE ", metric.name, " ",
                    metric.type, "\n", metric.name, " ",
                    absl::StrFormat("%.17g", metric.value), "\n");
  }
  return out;
}

std::string BuildInfoText(absl::string_view version) {
  return absl::StrCat(
      "# HELP shardq_build_info The shardq version serving; always 1.\n"
      "# TYPE shardq_build_info gauge\n"
      "shardq_build_info{version=\"", PrometheusLabelValue(version), "\"} 1\n");
}

}  // namespace shardq
