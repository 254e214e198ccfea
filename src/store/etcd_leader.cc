#include "src/store/etcd_leader.h"

#include "absl/strings/str_cat.h"
#include "proto/etcd/etcd_store.pb.h"

namespace shardq {

bool ValidEtcdJobName(absl::string_view job) {
  if (job.empty() || job.size() > 200) return false;
  for (char c : job) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
      return false;
    }
  }
  return true;
}

std::string EtcdJobPrefix(absl::string_view job) { return absl::StrCat("/shardq/", job, "/"); }

std::string EtcdLeaderKey(absl::string_view job) { return EtcdJobPrefix(job) + "leader"; }

absl::StatusOr<EtcdLeader> ReadEtcdLeader(EtcdClient& client, const std::string& job) {
  absl::StatusOr<etcdserverpb::KeyValue> kv = client.Get(EtcdLeaderKey(job));
  if (!kv.ok()) {
    if (kv.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(
          absl::StrCat(client.Describe(), ": job '", job, "' has no leader"));
    }
    return kv.status();
  }
  etcdstore::LeaderInfo info;
  if (!info.ParseFromString(kv->value())) {
    return absl::DataLossError(absl::StrCat(client.Describe(), ": key '", kv->key(),
                                            "' is not a shardq leader record"));
  }
  EtcdLeader leader;
  leader.advertise = info.advertise();
  leader.host = info.host();
  leader.pid = info.pid();
  leader.term = kv->create_revision();
  leader.lease_id = kv->lease();
  return leader;
}

}  // namespace shardq
