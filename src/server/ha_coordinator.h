// One coordinator of a highly available job (`shardq serve --etcd`):
// several such processes share the job's state in etcd; one leads, the
// others stand by, and any of them can take over.
//
// The life of one process, driven by a thread of its own:
//  - Standing by: it holds an etcd lease (EtcdElection), registers itself
//    under "/shardq/<job>/standby/" with that lease, tries to create the
//    election key every poll (a fifth of the TTL, at most 500 ms), and
//    serves a StandbyServer on its port: every call is answered
//    UNAVAILABLE "not leader" naming the leader.
//  - Leading: once it wins, it frees the port, recovers the job's state
//    from etcd (EtcdStore::Open: snapshots and journal) and serves the
//    coordinator there, every commit guarded by its term (the election
//    key's create revision) and every grant answered only once stored
//    (CoordinatorOptions::grants_wait_for_store), so a deposed leader can
//    neither commit nor hand out an item.
//  - Stepping down: when its lease is lost (it was paused or cut off past
//    the TTL) or its store fails (another leads: "not leader"; etcd lost
//    quorum for longer than the store retries), it stops serving, gives up
//    its lease and stands by again, by itself. When etcd answers again, an
//    election follows as above.
//
// Thread-safe.
#ifndef SHARDQ_SERVER_HA_COORDINATOR_H_
#define SHARDQ_SERVER_HA_COORDINATOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/server/coordinator_impl.h"
#include "src/server/grpc_service.h"
#include "src/server/standby_server.h"
#include "src/store/etcd_client.h"
#include "src/store/etcd_election.h"

namespace shardq {

struct HaOptions {
  // etcd members, "HOST:PORT[,HOST:PORT...]"; the job's name (no '/').
  std::string etcd;
  std::string job;
  // What clients are told to dial for this coordinator; empty: the listen
  // address with the port it bound (the host name for 0.0.0.0 or [::]).
  std::string advertise;
  // Longer rides out longer etcd and network hiccups; shorter fails over
  // sooner (a killed leader is replaced about one TTL later).
  int64_t lease_ttl_seconds = 5;
  // listen, token, TLS, request bound (state_dir must be empty).
  ServerOptions server;
  // Snapshot tuning of the coordinators it leads (see CoordinatorOptions).
  int64_t snapshot_every = 20000;
};

class HaCoordinator {
 public:
  // Checks the options, connects to etcd, binds the port (as a standby)
  // and starts the loop above. INVALID_ARGUMENT for bad options (naming
  // the flag); the port's errors as CoordinatorServer::Start's. An etcd
  // that does not answer is not an error here: it stands by until it does.
  static absl::StatusOr<std::unique_ptr<HaCoordinator>> Start(const HaOptions& options);
  // Stops serving; a leader snapshots its queues and revokes its lease, so
  // a standby takes over at once.
  ~HaCoordinator();

  int port() const { return port_; }
  const std::string& job() const { return options_.job; }
  const std::string& advertise() const { return advertise_; }
  bool leading() const;
  // Who leads as this process knows it (as a leader: itself, its term and,
  // with `standbys`, the registered standbys, read from etcd now).
  Leadership leadership(bool standbys = true) const;
  // Times this process became the leader after standing by for another.
  int64_t failovers() const;
  // OK while the loop runs; the error that ended it otherwise: the port
  // was taken while stepping down, or the job's state in etcd does not
  // recover (DATA_LOSS naming the key).
  absl::Status fatal() const;

  // The led coordinator's queues and store totals (empty / nullopt while
  // standing by); for the status page and /metrics.
  std::vector<QueueStats> AllStats() const;
  std::optional<StoreTotals> journal_totals() const;
  // The led server's Session streams open now and its limit; nullopt while
  // standing by.
  std::optional<std::pair<int64_t, int64_t>> sessions() const;
  // Attached to every coordinator this process leads with (nullptr: none);
  // must outlive this object or be reset first.
  void SetObserver(CoordinatorImpl::Observer* observer);

 private:
  explicit HaCoordinator(const HaOptions& options);
  void Loop();
  // Stands for election until this process leads (true) or stops (false).
  bool StandBy(std::unique_ptr<EtcdElection>* election);
  // Leads until it must step down or stops; says why it stepped down.
  std::string Lead(EtcdElection& election);
  absl::Status StartStandbyServer();
  // Waits up to `d` or until stopping; true when stopping.
  bool WaitOrStop(absl::Duration d);
  std::vector<std::string> Standbys() const;

  HaOptions options_;
  std::string advertise_;
  int port_ = 0;
  std::shared_ptr<EtcdClient> client_;

  mutable absl::Mutex mu_;
  absl::CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  // Set while leading. The page's calls hold mu_ while they read it (in
  // memory, short), so a step-down waits for them before it goes away.
  CoordinatorServer* leading_ ABSL_GUARDED_BY(mu_) = nullptr;
  int64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  std::string known_leader_ ABSL_GUARDED_BY(mu_);
  int64_t known_term_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failovers_ ABSL_GUARDED_BY(mu_) = 0;
  CoordinatorImpl::Observer* observer_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::unique_ptr<StandbyServer> standby_;  // the loop thread's (and Start's)
  std::thread loop_;
};

}  // namespace shardq

#endif  // SHARDQ_SERVER_HA_COORDINATOR_H_
