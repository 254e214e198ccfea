// Who leads a job's coordinators, as etcd says: the job's key layout and
// the reader of the election key. Shared by the coordinators (the
// election and the state store, src/store/etcd_election.h and
// etcd_store.h) and by clients that follow the leader (etcd://...), which
// link this and the etcd client only, none of the state store.
//
// Thread-safe (pure functions; ReadEtcdLeader is a call of the client).
#ifndef SHARDQ_STORE_ETCD_LEADER_H_
#define SHARDQ_STORE_ETCD_LEADER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "src/store/etcd_client.h"

namespace shardq {

// Whether `job` can name a job in etcd: 1-200 printable ASCII characters,
// no '/' and no spaces (it is a part of every key of the job).
bool ValidEtcdJobName(absl::string_view job);

// "/shardq/<job>/": every key of the job starts with it.
std::string EtcdJobPrefix(absl::string_view job);

// "/shardq/<job>/leader": the election key. Its value is a LeaderInfo
// (proto/etcd/etcd_store.proto); its create revision is the leader's term.
std::string EtcdLeaderKey(absl::string_view job);

// Who leads a job, as the election key says.
struct EtcdLeader {
  std::string advertise;  // the address clients reach the leader at
  std::string host;
  int64_t pid = 0;
  int64_t term = 0;      // the election key's create revision
  int64_t lease_id = 0;
};

// The leader of `job` now. NOT_FOUND "job 'J' has no leader" (naming etcd)
// when nobody leads; UNAVAILABLE naming etcd when it cannot be read;
// DATA_LOSS when the key does not parse.
absl::StatusOr<EtcdLeader> ReadEtcdLeader(EtcdClient& client, const std::string& job);

}  // namespace shardq

#endif  // SHARDQ_STORE_ETCD_LEADER_H_
