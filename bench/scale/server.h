// bench/scale: one `shardq serve` child on 127.0.0.1 (a free port), and
// what /proc says about a process.
#ifndef SHARDQ_BENCH_SCALE_SERVER_H_
#define SHARDQ_BENCH_SCALE_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shardq::scale {

// CPU time and memory of one process, from /proc/<pid>/stat and status.
struct ProcSample {
  double cpu_seconds = 0;  // user + system
  int64_t rss_bytes = 0;   // VmRSS
  int64_t peak_rss_bytes = 0;  // VmHWM: the high-water mark since it started
};

// pid 0 reads this process (/proc/self). Fails when the process is gone.
absl::StatusOr<ProcSample> ReadProc(pid_t pid);

// A running `shardq serve --listen 127.0.0.1:0`, stopped (SIGTERM, waited
// for) by Stop or the destructor. It also dies with this process
// (PR_SET_PDEATHSIG), so a killed generator leaves no server behind.
class ServeProcess {
 public:
  // `state_dir` empty: in memory. Its stderr goes to `log_path`. Waits up
  // to 10 s for the port file.
  static absl::StatusOr<ServeProcess> Start(const std::string& shardq_bin,
                                            const std::string& work_dir,
                                            const std::string& state_dir,
                                            const std::string& log_path);
  ServeProcess(ServeProcess&& other) noexcept;
  ServeProcess& operator=(ServeProcess&&) = delete;
  ~ServeProcess();

  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  // SIGTERM and wait; the exit status (0 for a clean stop).
  int Stop();

 private:
  ServeProcess(pid_t pid, std::string address) : pid_(pid), address_(std::move(address)) {}
  pid_t pid_ = 0;
  std::string address_;
};

}  // namespace shardq::scale

#endif  // SHARDQ_BENCH_SCALE_SERVER_H_
