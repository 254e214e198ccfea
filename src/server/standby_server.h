// What a standby coordinator of a highly available job serves on its port
// while another leads: every call, whatever its method (unary calls and
// the Session stream alike), is answered at once with UNAVAILABLE
// "not leader: ..." naming the job's leader, and the trailing metadata
// `shardq-leader` carries the leader's advertised address (when one is
// known), so clients given several addresses go straight to it. Clients
// retry UNAVAILABLE, so one pointed at a standby waits for the next
// leader instead of failing.
//
// Thread-safe.
#ifndef SHARDQ_SERVER_STANDBY_SERVER_H_
#define SHARDQ_SERVER_STANDBY_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/server.h"
#include "src/server/grpc_service.h"
#include "src/rpc/protocol_version.h"

namespace shardq {

class StandbyServer {
 public:
  // Binds options.listen (TLS as options say; the port is checked free
  // first, as CoordinatorServer::Start does) and answers as above; a call
  // without options.token (when set) gets UNAUTHENTICATED instead.
  // `job` is named in every answer. Errors as CoordinatorServer::Start's
  // for the address.
  static absl::StatusOr<std::unique_ptr<StandbyServer>> Start(const ServerOptions& options,
                                                              std::string job);
  // Stops answering and frees the port.
  ~StandbyServer();

  int port() const { return port_; }
  // Calls answered (refused) so far.
  int64_t calls() const { return calls_.load(); }
  // What the answers say from now on: the leader's address and term
  // (empty leader: nobody leads yet), or why the leader is not known.
  // `self` is this coordinator's advertised address, named in every answer.
  void SetLeader(const std::string& self, const std::string& leader, int64_t term);
  void SetUnknown(const std::string& self, const std::string& why);

 private:
  class Service;
  StandbyServer(std::string job, std::string token);
  // The status every call is answered with, and the leader to name.
  void Answer(std::string* message, std::string* leader) const;

  const std::string job_;
  const std::string token_;  // ServerOptions::token: callers must carry it
  mutable absl::Mutex mu_;
  std::string message_ ABSL_GUARDED_BY(mu_);
  std::string leader_ ABSL_GUARDED_BY(mu_);
  mutable std::atomic<int64_t> calls_{0};  // counted by the const Service
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace shardq

#endif  // SHARDQ_SERVER_STANDBY_SERVER_H_
