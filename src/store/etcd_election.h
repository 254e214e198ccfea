// Leader election of one job's coordinators in etcd.
//
// Each coordinator holds an etcd lease of `lease_ttl_seconds`, kept alive
// by a thread of its own. The election key "/shardq/<job>/leader" is
// created, attached to the lease, only when absent (one transaction), so
// at most one coordinator holds it; its value is a LeaderInfo (the
// address clients reach the leader at) and its create revision is the
// leader's term, which the leader's EtcdStore compares on in every commit
// (EtcdStoreOptions::guard_create_revision). The key disappears when its
// holder revokes the lease (a clean stop) or stops renewing it (killed,
// paused, cut off from etcd) for the TTL; then a standby's TryLead wins.
//
// A leader whose lease could not be renewed for the TTL, or was reported
// expired, loses it: lease_lost() turns true and stays so; the holder must
// stop serving (its commits fail anyway) and make a new EtcdElection to
// stand again.
//
// Thread-safe.
#ifndef SHARDQ_STORE_ETCD_ELECTION_H_
#define SHARDQ_STORE_ETCD_ELECTION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/store/etcd_client.h"
#include "src/store/etcd_leader.h"  // EtcdLeader, ReadEtcdLeader

namespace shardq {

struct EtcdElectionOptions {
  std::shared_ptr<EtcdClient> client;  // must be set
  std::string job;                     // as EtcdStoreOptions::job
  std::string advertise;               // this coordinator's address for clients
  // Longer rides out longer etcd hiccups; shorter fails over sooner (a
  // killed leader is replaced about one TTL after it stopped renewing).
  int64_t lease_ttl_seconds = 5;
};

class EtcdElection {
 public:
  // Grants the lease and starts keeping it alive. UNAVAILABLE naming etcd
  // when it cannot; INVALID_ARGUMENT for a TTL < 1 or no client.
  static absl::StatusOr<std::unique_ptr<EtcdElection>> Create(const EtcdElectionOptions& options);
  // Revokes the lease (the election key goes with it, so a standby takes
  // over at once), best effort.
  ~EtcdElection();

  // Creates the election key with this coordinator's lease if nobody holds
  // it. Returns true when this coordinator leads (now or already), with
  // term() set; false when another does. FAILED_PRECONDITION once the
  // lease is lost; UNAVAILABLE naming etcd.
  absl::StatusOr<bool> TryLead();

  int64_t term() const { return term_.load(); }
  int64_t lease_id() const { return lease_id_; }
  std::string key() const;
  // See the file comment.
  bool lease_lost() const { return lease_lost_.load(); }

 private:
  EtcdElection(EtcdElectionOptions options, int64_t lease_id);
  void KeepAliveLoop();

  const EtcdElectionOptions options_;
  const int64_t lease_id_;
  std::atomic<int64_t> term_{0};
  std::atomic<bool> lease_lost_{false};
  absl::Mutex mu_;
  absl::CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread keep_alive_;
};

}  // namespace shardq

#endif  // SHARDQ_STORE_ETCD_ELECTION_H_
