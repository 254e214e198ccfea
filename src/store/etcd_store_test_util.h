// For the tests of EtcdStore (etcd_store_test.cc, etcd_store_pipeline_test.cc):
// the fixture (a fresh one-member etcd and a client, EtcdTest, with the keys
// of the job "job1" every test uses) and the helpers they share.
#ifndef SHARDQ_STORE_ETCD_STORE_TEST_UTIL_H_
#define SHARDQ_STORE_ETCD_STORE_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "src/store/etcd_client.h"
#include "src/store/etcd_store.h"
#include "src/store/etcd_test_fixture.h"

namespace shardq {

inline journal::Update FailUpdate(uint64_t lease, const std::string& reason) {
  journal::Update u;
  u.mutable_fail()->set_lease_id(lease);
  u.mutable_fail()->set_reason(reason);
  return u;
}

// The options of the store of job "job1" (every test's job) over `client`.
inline EtcdStoreOptions JobOptions(std::shared_ptr<EtcdClient> client) {
  EtcdStoreOptions options;
  options.client = std::move(client);
  options.job = "job1";
  return options;
}

// The store opened with `options` (null, and a test failure, if it does
// not open).
inline std::unique_ptr<EtcdStore> OpenWith(const EtcdStoreOptions& options,
                                           RecoveredState* out) {
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(options, out);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

inline int64_t CountKeys(EtcdClient& client, const std::string& prefix) {
  etcdserverpb::RangeRequest range;
  range.set_key(prefix);
  range.set_range_end(EtcdPrefixEnd(prefix));
  range.set_count_only(true);
  return client.Range(range)->count();
}

// A fresh one-member etcd (the test is skipped when etcd is not installed)
// and client_ of it (EtcdTest), and the job's keys.
class EtcdStoreTest : public EtcdTest {
 protected:
  // The job's store over client_, guarded by `guard_key` at `guard_rev`
  // when given (null, and a test failure, if it does not open).
  std::unique_ptr<EtcdStore> OpenStore(RecoveredState* out, const std::string& guard_key = "",
                                       int64_t guard_rev = 0) {
    EtcdStoreOptions options = JobOptions(client_);
    options.guard_key = guard_key;
    options.guard_create_revision = guard_rev;
    return OpenWith(options, out);
  }

  // How many keys the job has under `under` (e.g. "c/": its chunks).
  int64_t Keys(const std::string& under) { return CountKeys(*client_, prefix_ + under); }
  // The job's journal keys of `queue`, for Keys().
  static std::string JournalOf(const std::string& queue) {
    return "j/" + absl::BytesToHexString(queue) + "/";
  }

  // Makes the job's leader key ("me"); *term is its create revision, the
  // term a store guarded by the key writes in.
  void BecomeLeader(int64_t* term) {
    etcdserverpb::PutRequest put;
    put.set_key(leader_key_);
    put.set_value("me");
    ASSERT_TRUE(client_->Put(put).ok());
    *term = client_->Get(leader_key_)->create_revision();
  }
  // Another coordinator wins: the leader key is re-created (a new term).
  void AnotherLeaderWins() {
    etcdserverpb::DeleteRangeRequest del;
    del.set_key(leader_key_);
    ASSERT_TRUE(client_->DeleteRange(del).ok());
    etcdserverpb::PutRequest put;
    put.set_key(leader_key_);
    put.set_value("other");
    ASSERT_TRUE(client_->Put(put).ok());
  }

  const std::string prefix_ = EtcdStore::JobPrefix("job1");
  const std::string leader_key_ = prefix_ + "leader";
};

}  // namespace shardq

#endif  // SHARDQ_STORE_ETCD_STORE_TEST_UTIL_H_
