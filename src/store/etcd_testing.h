// A real etcd cluster for unit tests: 1 or 3 members on 127.0.0.1 free
// ports, data under a fresh temporary directory, stopped by PID. Uses the
// `etcd` binary of Debian's etcd-server package ($SHARDQ_ETCD, else PATH);
// tests skip (GTEST_SKIP with EtcdTestCluster::kMissing) only when it is
// missing.
//
// Not thread-safe: one test drives it.
#ifndef SHARDQ_STORE_ETCD_TESTING_H_
#define SHARDQ_STORE_ETCD_TESTING_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace shardq {

class EtcdTestCluster {
 public:
  static constexpr const char* kMissing =
      "etcd is not installed (Debian package etcd-server; see scripts/install-deps)";
  // The etcd binary, or "" when it is missing.
  static std::string FindBinary();

  explicit EtcdTestCluster(int members = 1);
  // Stops every member (SIGTERM, then SIGKILL) and removes the data.
  ~EtcdTestCluster();

  // Starts every member and waits (up to `timeout`) until the cluster
  // answers a linearizable read. FAILED_PRECONDITION with the members'
  // logs when it does not.
  absl::Status Start(absl::Duration timeout = absl::Seconds(60));
  // SIGKILLs member `index`.
  void Kill(int index);
  // SIGSTOPs / SIGCONTs member `index`.
  void Pause(int index);
  void Resume(int index);
  // Starts member `index` again over its data and waits until it answers.
  absl::Status Restart(int index, absl::Duration timeout = absl::Seconds(60));

  // "127.0.0.1:P1,127.0.0.1:P2,..." (every member, running or not).
  std::string endpoints() const;
  std::vector<std::string> endpoint_list() const;
  const std::string& dir() const { return dir_; }

 private:
  struct Member {
    std::string name;
    int client_port = 0;
    int peer_port = 0;
    pid_t pid = -1;
  };
  absl::Status Launch(Member& m, bool existing);
  // Waits until a linearizable read through `endpoints` succeeds.
  absl::Status WaitReady(const std::vector<std::string>& endpoints, absl::Duration timeout);
  std::string Logs() const;

  std::string binary_;
  std::string dir_;
  std::vector<Member> members_;
};

}  // namespace shardq

#endif  // SHARDQ_STORE_ETCD_TESTING_H_
