#include "src/store/etcd_election.h"

#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/etcd_test_fixture.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

class EtcdElectionTest : public EtcdTest {
 protected:
  std::unique_ptr<EtcdElection> Candidate(const std::string& address, int64_t ttl = 5) {
    EtcdElectionOptions options;
    options.client = client_;
    options.job = "train";
    options.advertise = address;
    options.lease_ttl_seconds = ttl;
    absl::StatusOr<std::unique_ptr<EtcdElection>> e = EtcdElection::Create(options);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }
};

TEST_F(EtcdElectionTest, OneLeadsTheOtherSeesWhoAndTakesOverOnARevoke) {
  EXPECT_EQ(ReadEtcdLeader(*client_, "train").status().code(), absl::StatusCode::kNotFound);
  std::unique_ptr<EtcdElection> a = Candidate("10.0.0.1:7000");
  std::unique_ptr<EtcdElection> b = Candidate("10.0.0.2:7000");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  absl::StatusOr<bool> won = a->TryLead();
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_TRUE(*won);
  EXPECT_TRUE(*a->TryLead());  // again: still ours
  EXPECT_FALSE(*b->TryLead());
  absl::StatusOr<EtcdLeader> leader = ReadEtcdLeader(*client_, "train");
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->advertise, "10.0.0.1:7000");
  EXPECT_EQ(leader->term, a->term());
  EXPECT_EQ(leader->lease_id, a->lease_id());

  const int64_t first_term = a->term();
  a.reset();  // a clean stop revokes the lease: the key goes at once
  EXPECT_TRUE(*b->TryLead());
  EXPECT_GT(b->term(), first_term);
  EXPECT_EQ(ReadEtcdLeader(*client_, "train")->advertise, "10.0.0.2:7000");
}

TEST_F(EtcdElectionTest, ALeaderWhoseLeaseIsGoneLosesTheKeyAndCannotLeadOnIt) {
  std::unique_ptr<EtcdElection> a = Candidate("a:1", /*ttl=*/2);
  std::unique_ptr<EtcdElection> b = Candidate("b:1", /*ttl=*/2);
  ASSERT_TRUE(*a->TryLead());
  // a's lease ends behind its back, as an expiry after a pause would.
  ASSERT_TRUE(client_->LeaseRevoke(a->lease_id()).ok());
  EXPECT_TRUE(*b->TryLead());
  // a's keep-alive notices the lease is gone (within a third of the TTL
  // plus a call), and a refuses to lead on it.
  for (int i = 0; i < 200 && !a->lease_lost(); ++i) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(a->lease_lost());
  absl::Status s = a->TryLead().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("lost"));
}

TEST_F(EtcdElectionTest, RefusesATtlBelowOneSecond) {
  EtcdElectionOptions options;
  options.client = client_;
  options.job = "train";
  options.lease_ttl_seconds = 0;
  EXPECT_EQ(EtcdElection::Create(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardq
