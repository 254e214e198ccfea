#include "src/store/etcd_testing.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "src/store/etcd_client.h"

namespace shardq {
namespace {

// `count` distinct free loopback ports (bound together, then released).
std::vector<int> FreePorts(int count) {
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      if (fd >= 0) close(fd);
      continue;
    }
    fds.push_back(fd);
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) close(fd);
  return ports;
}

// True when something accepts a TCP connection at one of `endpoints`
// (127.0.0.1:PORT).
bool AnyListens(const std::vector<std::string>& endpoints) {
  for (const std::string& endpoint : endpoints) {
    const int port = std::atoi(endpoint.substr(endpoint.rfind(':') + 1).c_str());
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) continue;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (ok) return true;
  }
  return false;
}

void StopPid(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGCONT);  // a paused member must see the SIGTERM
  kill(pid, SIGTERM);
  for (int i = 0; i < 300; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    usleep(20 * 1000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace

std::string EtcdTestCluster::FindBinary() {
  if (const char* env = getenv("SHARDQ_ETCD"); env != nullptr && *env != '\0') {
    return access(env, X_OK) == 0 ? env : "";
  }
  const char* path = getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':', absl::SkipEmpty())) {
    std::string candidate = absl::StrCat(dir, "/etcd");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

EtcdTestCluster::EtcdTestCluster(int members) : binary_(FindBinary()) {
  const char* tmp = getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                     "/shardq-etcd-XXXXXX");
  if (mkdtemp(pattern.data()) != nullptr) dir_ = pattern;
  const std::vector<int> ports = FreePorts(2 * members);
  for (int i = 0; i < members && 2 * i + 1 < static_cast<int>(ports.size()); ++i) {
    Member m;
    m.name = absl::StrCat("m", i);
    m.client_port = ports[2 * i];
    m.peer_port = ports[2 * i + 1];
    members_.push_back(m);
  }
}

EtcdTestCluster::~EtcdTestCluster() {
  for (Member& m : members_) StopPid(m.pid);
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::vector<std::string> EtcdTestCluster::endpoint_list() const {
  std::vector<std::string> out;
  for (const Member& m : members_) out.push_back(absl::StrCat("127.0.0.1:", m.client_port));
  return out;
}

std::string EtcdTestCluster::endpoints() const { return absl::StrJoin(endpoint_list(), ","); }

absl::Status EtcdTestCluster::Launch(Member& m, bool existing) {
  std::vector<std::string> initial;
  for (const Member& other : members_) {
    initial.push_back(absl::StrCat(other.name, "=http://127.0.0.1:", other.peer_port));
  }
  const std::string client = absl::StrCat("http://127.0.0.1:", m.client_port);
  const std::string peer = absl::StrCat("http://127.0.0.1:", m.peer_port);
  std::vector<std::string> args = {
      binary_, "--name", m.name, "--data-dir", absl::StrCat(dir_, "/", m.name, ".data"),
      "--listen-client-urls", client, "--advertise-client-urls", client,
      "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
      "--initial-cluster", absl::StrJoin(initial, ","),
      "--initial-cluster-state", existing ? "existing" : "new",
      "--initial-cluster-token", absl::StrCat("shardq-test-", getpid(), "-", dir_),
      "--heartbeat-interval", "50", "--election-timeout", "500",
      "--logger", "zap", "--log-outputs", "stderr"};
  const std::string log = absl::StrCat(dir_, "/", m.name, ".log");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary_.c_str(), argv.data());
    _exit(127);
  }
  m.pid = pid;
  return absl::OkStatus();
}

absl::Status EtcdTestCluster::Start(absl::Duration timeout) {
  if (binary_.empty()) return absl::FailedPreconditionError(kMissing);
  if (dir_.empty() || members_.empty()) {
    return absl::FailedPreconditionError("etcd test cluster: no temp dir or free ports");
  }
  for (Member& m : members_) {
    if (absl::Status s = Launch(m, false); !s.ok()) return s;
  }
  return WaitReady(endpoint_list(), timeout);
}

absl::Status EtcdTestCluster::WaitReady(const std::vector<std::string>& endpoints,
                                        absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // Connect only once a member listens: a gRPC channel refused at first
  // backs off for seconds before it tries again.
  while (absl::Now() < deadline && !AnyListens(endpoints)) absl::SleepFor(absl::Milliseconds(20));
  EtcdClientOptions options;
  options.endpoints = endpoints;
  options.call_timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(options);
  if (!client.ok()) return client.status();
  absl::Status last;
  while (absl::Now() < deadline) {
    for (Member& m : members_) {
      if (m.pid > 0 && waitpid(m.pid, nullptr, WNOHANG) == m.pid) {
        m.pid = -1;
        return absl::FailedPreconditionError(
            absl::StrCat("etcd member ", m.name, " exited; logs:\n", Logs()));
      }
    }
    // A linearizable read needs a quorum.
    last = (*client)->Get("/shardq-test-ready").status();
    if (last.ok() || last.code() == absl::StatusCode::kNotFound) return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::FailedPreconditionError(absl::StrCat("etcd test cluster not ready within ",
                                                    absl::FormatDuration(timeout), ": ",
                                                    last.message(), "; logs:\n", Logs()));
}

void EtcdTestCluster::Kill(int index) {
  Member& m = members_[index];
  if (m.pid <= 0) return;
  kill(m.pid, SIGKILL);
  waitpid(m.pid, nullptr, 0);
  m.pid = -1;
}

void EtcdTestCluster::Pause(int index) {
  if (members_[index].pid > 0) kill(members_[index].pid, SIGSTOP);
}

void EtcdTestCluster::Resume(int index) {
  if (members_[index].pid > 0) kill(members_[index].pid, SIGCONT);
}

absl::Status EtcdTestCluster::Restart(int index, absl::Duration timeout) {
  Member& m = members_[index];
  if (m.pid > 0) return absl::FailedPreconditionError(absl::StrCat(m.name, " is running"));
  if (absl::Status s = Launch(m, true); !s.ok()) return s;
  return WaitReady({absl::StrCat("127.0.0.1:", m.client_port)}, timeout);
}

std::string EtcdTestCluster::Logs() const {
  std::string out;
  for (const Member& m : members_) {
    std::ifstream in(absl::StrCat(dir_, "/", m.name, ".log"));
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    if (s.size() > 3000) s = s.substr(s.size() - 3000);
    absl::StrAppend(&out, "--- ", m.name, " ---\n", s, "\n");
  }
  return out;
}

}  // namespace shardq
