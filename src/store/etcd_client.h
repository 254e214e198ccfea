// A small synchronous client of etcd's v3 API (KV and Lease) over gRPC,
// for the etcd state store, leader election and clients that look up a
// job's leader.
//
// It knows several endpoints (the members of one etcd cluster) and fails
// over between them: a call goes to the member that answered last; when
// that member is unreachable or cannot reach a quorum (UNAVAILABLE, or no
// answer within the call's timeout) the call is tried on the next member,
// each member at most once per call. Every call has a deadline
// (EtcdClientOptions::call_timeout per member tried).
//
// Errors name etcd, the endpoint(s) and the operation:
//   UNAVAILABLE        no member answered (unreachable, no quorum, timed
//                      out), each member's error listed;
//   NOT_FOUND          a lease that expired or never existed;
//   OUT_OF_RANGE       a compaction below the compacted revision (etcd's
//                      answer; a caller compacting periodically ignores it);
//   the code etcd answered otherwise (INVALID_ARGUMENT for a request over
//   etcd's size limit, ...).
// Retrying on another member can apply a write twice when the first
// member applied it but its answer was lost: callers write idempotently
// (the same keys with the same values) or compare first (Txn).
//
// Thread-safe (calls may run concurrently).
#ifndef SHARDQ_STORE_ETCD_CLIENT_H_
#define SHARDQ_STORE_ETCD_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/etcd/etcd_rpc.grpc.pb.h"

namespace shardq {

struct EtcdClientOptions {
  // host:port of each member; at least one.
  std::vector<std::string> endpoints;
  // The deadline of one attempt on one member. Shorter notices a dead
  // member sooner; longer rides out a slow disk on the etcd side. A call
  // that fails over may take up to endpoints.size() times this.
  absl::Duration call_timeout = absl::Seconds(2);
};

// Parses "HOST:PORT[,HOST:PORT...]" (spaces around commas ignored).
// INVALID_ARGUMENT naming the entry when one is empty or has no port.
absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(absl::string_view list);

// The smallest key greater than every key starting with `prefix` (etcd's
// range_end for "every key with this prefix").
std::string EtcdPrefixEnd(absl::string_view prefix);

class EtcdClient {
 public:
  // Makes channels to every endpoint; connects lazily (no I/O here).
  // INVALID_ARGUMENT when no endpoint is given.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(const EtcdClientOptions& options);

  absl::StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& request);
  absl::StatusOr<etcdserverpb::PutResponse> Put(const etcdserverpb::PutRequest& request);
  absl::StatusOr<etcdserverpb::DeleteRangeResponse> DeleteRange(
      const etcdserverpb::DeleteRangeRequest& request);
  // The answer says whether the compares held (`succeeded`).
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);
  absl::Status Compact(int64_t revision);

  // A new lease of `ttl_seconds`; returns its id.
  absl::StatusOr<int64_t> LeaseGrant(int64_t ttl_seconds);
  // Ends the lease and deletes the keys attached to it. OK when it had
  // expired already.
  absl::Status LeaseRevoke(int64_t lease_id);
  // Renews the lease once; returns its TTL in seconds. NOT_FOUND when it
  // has expired.
  absl::StatusOr<int64_t> LeaseKeepAlive(int64_t lease_id);

  // One key's value, or nullopt-like NOT_FOUND when absent (a convenience
  // over Range).
  absl::StatusOr<etcdserverpb::KeyValue> Get(absl::string_view key);

  // "etcd at H:P,H:P" for messages.
  std::string Describe() const;
  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  struct Member {
    std::string endpoint;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };
  EtcdClient(std::vector<std::string> endpoints, absl::Duration call_timeout,
             std::vector<Member> members);

  // Runs `attempt(member, context)` on the preferred member, failing over
  // as the file comment says; `what` names the operation in errors.
  template <typename Attempt>
  absl::Status Call(absl::string_view what, Attempt attempt);

  const std::vector<std::string> endpoints_;
  const absl::Duration call_timeout_;
  std::vector<Member> members_;
  std::atomic<size_t> preferred_{0};  // the member that answered last
};

}  // namespace shardq

#endif  // SHARDQ_STORE_ETCD_CLIENT_H_
