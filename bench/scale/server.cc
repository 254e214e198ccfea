#include "bench/scale/server.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace shardq::scale {

absl::StatusOr<ProcSample> ReadProc(pid_t pid) {
  const std::string dir = pid == 0 ? "/proc/self" : absl::StrCat("/proc/", pid);
  ProcSample sample;
  {
    std::ifstream in(dir + "/stat");
    std::string line;
    if (!std::getline(in, line)) return absl::NotFoundError(absl::StrCat(dir, "/stat: unreadable"));
    // The command name (field 2) may hold spaces: fields count from the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) return absl::DataLossError(absl::StrCat(dir, "/stat: no ')'"));
    std::vector<std::string> fields =
        absl::StrSplit(line.substr(close + 2), ' ', absl::SkipEmpty());
    // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    int64_t utime = 0, stime = 0;
    if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
        !absl::SimpleAtoi(fields[12], &stime)) {
      return absl::DataLossError(absl::StrCat(dir, "/stat: no utime/stime"));
    }
    sample.cpu_seconds = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  std::ifstream in(dir + "/status");
  std::string line;
  while (std::getline(in, line)) {
    int64_t* target = nullptr;
    absl::string_view rest = line;
    if (absl::ConsumePrefix(&rest, "VmRSS:")) target = &sample.rss_bytes;
    else if (absl::ConsumePrefix(&rest, "VmHWM:")) target = &sample.peak_rss_bytes;
    if (target == nullptr) continue;
    rest = absl::StripAsciiWhitespace(rest);
    absl::ConsumeSuffix(&rest, " kB");
    int64_t kb = 0;
    if (absl::SimpleAtoi(rest, &kb)) *target = kb * 1024;
  }
  return sample;
}

absl::StatusOr<ServeProcess> ServeProcess::Start(const std::string& shardq_bin,
                                                 const std::string& work_dir,
                                                 const std::string& state_dir,
                                                 const std::string& log_path) {
  static int started = 0;
  const std::string port_file = absl::StrCat(work_dir, "/serve-", getpid(), "-", ++started, ".port");
  unlink(port_file.c_str());
  std::vector<std::string> args = {shardq_bin, "serve", "--listen", "127.0.0.1:0",
                                   "--port-file", port_file};
  if (!state_dir.empty()) {
    args.push_back("--state-dir");
    args.push_back(state_dir);
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork for shardq serve: errno ", errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ServeProcess process(pid, "");
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(port_file);
    std::string port;
    if (in >> port && !port.empty()) {
      process.address_ = absl::StrCat("127.0.0.1:", port);
      return process;
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process.pid_ = 0;
      return absl::UnavailableError(absl::StrCat("shardq serve (", shardq_bin,
                                                 ") exited before listening; see ", log_path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("shardq serve wrote no port file in 10 s; see ", log_path));
}

ServeProcess::ServeProcess(ServeProcess&& other) noexcept
    : pid_(other.pid_), address_(std::move(other.address_)) {
  other.pid_ = 0;
}

ServeProcess::~ServeProcess() { Stop(); }

int ServeProcess::Stop() {
  if (pid_ <= 0) return 0;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace shardq::scale
