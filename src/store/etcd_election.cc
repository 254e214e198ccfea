#include "src/store/etcd_election.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/etcd/etcd_store.pb.h"
#include "src/core/process.h"
#include "src/log/log.h"

namespace shardq {

absl::StatusOr<std::unique_ptr<EtcdElection>> EtcdElection::Create(
    const EtcdElectionOptions& options) {
  if (options.client == nullptr) return absl::InvalidArgumentError("etcd election: no client");
  if (options.lease_ttl_seconds < 1) {
    return absl::InvalidArgumentError(absl::StrCat("etcd lease TTL must be >= 1 second, not ",
                                                   options.lease_ttl_seconds));
  }
  absl::StatusOr<int64_t> lease = options.client->LeaseGrant(options.lease_ttl_seconds);
  if (!lease.ok()) return lease.status();
  return std::unique_ptr<EtcdElection>(new EtcdElection(options, *lease));
}

EtcdElection::EtcdElection(EtcdElectionOptions options, int64_t lease_id)
    : options_(std::move(options)), lease_id_(lease_id) {
  keep_alive_ = std::thread([this] {
    NameThisThread("etcd-lease");
    KeepAliveLoop();
  });
}

EtcdElection::~EtcdElection() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_cv_.SignalAll();
  }
  keep_alive_.join();
  absl::Status s = options_.client->LeaseRevoke(lease_id_);
  if (!s.ok()) SHARDQ_LOG_WARN("could not revoke etcd lease {}: {}", lease_id_, s.ToString());
}

std::string EtcdElection::key() const { return EtcdLeaderKey(options_.job); }

void EtcdElection::KeepAliveLoop() {
  const absl::Duration ttl = absl::Seconds(options_.lease_ttl_seconds);
  absl::Time renewed = absl::Now();
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    stop_cv_.WaitWithTimeout(&mu_, ttl / 3);
    if (stopping_) return;
    mu_.Unlock();
    absl::StatusOr<int64_t> left = options_.client->LeaseKeepAlive(lease_id_);
    mu_.Lock();
    if (left.ok()) {
      renewed = absl::Now();
      continue;
    }
    // Expired, or not renewed for a TTL (etcd may have let it expire).
    if (left.status().code() == absl::StatusCode::kNotFound || absl::Now() - renewed >= ttl) {
      SHARDQ_LOG_ERROR("etcd lease {} of job '{}' is lost: {}", lease_id_, options_.job,
                       left.status().ToString());
      lease_lost_.store(true);
      return;
    }
  }
}

absl::StatusOr<bool> EtcdElection::TryLead() {
  if (lease_lost_.load()) {
    return absl::FailedPreconditionError(absl::StrCat(
        options_.client->Describe(), ": the lease of this coordinator for job '", options_.job,
        "' was lost; it cannot lead on it"));
  }
  etcdstore::LeaderInfo info;
  info.set_advertise(options_.advertise);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  info.set_host(host);
  info.set_pid(getpid());
  const std::string key = EtcdLeaderKey(options_.job);
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_key(key);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(info.SerializeAsString());
  put->set_lease(lease_id_);
  txn.add_failure()->mutable_request_range()->set_key(key);
  absl::StatusOr<etcdserverpb::TxnResponse> r = options_.client->Txn(txn);
  if (!r.ok()) return r.status();
  if (r->succeeded()) {
    // The key's create revision is the transaction's revision.
    term_.store(r->header().revision());
    return true;
  }
  const etcdserverpb::RangeResponse& current = r->responses(0).response_range();
  if (current.kvs_size() > 0 && current.kvs(0).lease() == lease_id_) {
    term_.store(current.kvs(0).create_revision());
    return true;  // ours already
  }
  return false;
}

}  // namespace shardq
