#include "src/client/coordinator_address.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

CoordinatorAddress Parsed(absl::string_view spec) {
  absl::StatusOr<CoordinatorAddress> a = ParseCoordinatorAddress(spec);
  EXPECT_TRUE(a.ok()) << spec << ": " << a.status();
  return a.ok() ? *a : CoordinatorAddress{};
}

// The message of the INVALID_ARGUMENT that `spec` must get.
std::string Refusal(absl::string_view spec) {
  absl::StatusOr<CoordinatorAddress> a = ParseCoordinatorAddress(spec);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << spec;
  return std::string(a.status().message());
}

TEST(ParseCoordinatorAddress, OneAddressIsTakenVerbatimAsBefore) {
  for (const char* spec : {"127.0.0.1:7077", "coord:1", "[::1]:7077", "unix:/tmp/s.sock",
                           "unix:/tmp/a,b.sock", "dns:///coord:7077", "ipv4:1.2.3.4:5,1.2.3.5:6",
                           "localhost"}) {
    CoordinatorAddress a = Parsed(spec);
    EXPECT_TRUE(a.single()) << spec;
    EXPECT_FALSE(a.from_etcd()) << spec;
    EXPECT_THAT(a.coordinators, ElementsAre(spec));
    EXPECT_EQ(a.spec, spec);
  }
  EXPECT_THAT(Parsed("  coord:1 \n").coordinators, ElementsAre("coord:1"));
  EXPECT_EQ(Parsed("coord:1").Describe(), "coordinator coord:1");
}

TEST(ParseCoordinatorAddress, CommaListIsTheJobsCoordinators) {
  CoordinatorAddress a = Parsed("h1:7001, h2:7002 ,[::1]:7003,unix:/s");
  EXPECT_FALSE(a.single());
  EXPECT_FALSE(a.from_etcd());
  EXPECT_THAT(a.coordinators, ElementsAre("h1:7001", "h2:7002", "[::1]:7003", "unix:/s"));
  EXPECT_THAT(a.Describe(), HasSubstr("h1:7001,h2:7002"));
}

TEST(ParseCoordinatorAddress, EtcdAddressNamesEndpointsAndJob) {
  CoordinatorAddress a = Parsed("etcd://10.0.0.1:2379, 10.0.0.2:2379/train-7");
  EXPECT_TRUE(a.from_etcd());
  EXPECT_FALSE(a.single());
  EXPECT_TRUE(a.coordinators.empty());
  EXPECT_THAT(a.etcd_endpoints, ElementsAre("10.0.0.1:2379", "10.0.0.2:2379"));
  EXPECT_EQ(a.etcd_job, "train-7");
  EXPECT_THAT(a.Describe(), HasSubstr("job 'train-7'"));
  EXPECT_THAT(a.Describe(), HasSubstr("10.0.0.1:2379,10.0.0.2:2379"));
  EXPECT_EQ(Parsed("ETCD://e:1/j").etcd_job, "j");  // the scheme's case does not matter
}

TEST(ParseCoordinatorAddress, HostileEtcdAddressesAreRefusedNamingTheBadPart) {
  EXPECT_THAT(Refusal("etcd://e:2379/"), HasSubstr("empty job"));
  EXPECT_THAT(Refusal("etcd://e:2379"), HasSubstr("names no job"));
  EXPECT_THAT(Refusal("etcd:///train"), HasSubstr("no etcd endpoint"));
  EXPECT_THAT(Refusal("etcd://  /train"), HasSubstr("no etcd endpoint"));
  EXPECT_THAT(Refusal("etcd://"), HasSubstr("names no job"));
  EXPECT_THAT(Refusal("etcd://e:2379/a/b"), HasSubstr("job 'a/b' contains a '/'"));
  EXPECT_THAT(Refusal("etcd://e:2379/train/"), HasSubstr("contains a '/'"));
  EXPECT_THAT(Refusal("etcd://e:2379/my job"), HasSubstr("job 'my job'"));
  EXPECT_THAT(Refusal(absl::StrCat("etcd://e:2379/", std::string(201, 'j'))),
              HasSubstr("1-200 printable"));
  EXPECT_THAT(Refusal("etcd://e:port/train"), HasSubstr("'e:port'"));
  EXPECT_THAT(Refusal("etcd://e:70000/train"), HasSubstr("'e:70000'"));
  EXPECT_THAT(Refusal("etcd://e:0/train"), HasSubstr("'e:0'"));
  EXPECT_THAT(Refusal("etcd://e/train"), HasSubstr("'e'"));
  EXPECT_THAT(Refusal("etcd://e:1,,f:2/train"), HasSubstr("etcd endpoint ''"));
  EXPECT_THAT(Refusal("etcd:e:1/train"), HasSubstr("etcd://HOST:PORT"));
  // Every refusal names the spec it refused.
  EXPECT_THAT(Refusal("etcd://e:2379/"), HasSubstr("'etcd://e:2379/'"));
}

TEST(ParseCoordinatorAddress, HostileListsAreRefusedNamingTheEntry) {
  EXPECT_THAT(Refusal(""), HasSubstr("empty"));
  EXPECT_THAT(Refusal("   "), HasSubstr("empty"));
  EXPECT_THAT(Refusal("a:1,,b:2"), HasSubstr("entry is empty"));
  EXPECT_THAT(Refusal("a:1,"), HasSubstr("entry is empty"));
  EXPECT_THAT(Refusal(",a:1"), HasSubstr("entry is empty"));
  EXPECT_THAT(Refusal("a:1,b"), HasSubstr("entry 'b' is not HOST:PORT"));
  EXPECT_THAT(Refusal("a:1,:2"), HasSubstr("entry ':2'"));
  EXPECT_THAT(Refusal("a:1,b:"), HasSubstr("entry 'b:' has no port"));
  EXPECT_THAT(Refusal("a:1,b:x"), HasSubstr("entry 'b:x' has no port"));
  EXPECT_THAT(Refusal("a:1,b:-1"), HasSubstr("entry 'b:-1' has no port"));
  EXPECT_THAT(Refusal("a:1,b:0"), HasSubstr("port 0, outside 1..65535"));
  EXPECT_THAT(Refusal("a:1,b:65536"), HasSubstr("port 65536"));
  EXPECT_THAT(Refusal("a:1,b:99999999999999999999"), HasSubstr("outside 1..65535"));
  EXPECT_THAT(Refusal("a:1,::1:7077"), HasSubstr("IPv6 host goes in brackets"));
  EXPECT_THAT(Refusal("a:1,b c:2"), HasSubstr("'b c:2'"));
  EXPECT_THAT(Refusal("a:1,h/x:2"), HasSubstr("'h/x:2'"));
  EXPECT_THAT(Refusal("a:1,unix:"), HasSubstr("no socket path"));
  EXPECT_THAT(Refusal("a:1,b:2,a:1"), HasSubstr("'a:1' twice"));
  EXPECT_THAT(Refusal("a:1,b"), HasSubstr("'a:1,b'"));
}

TEST(LeaderResolver, SingleCoordinatorNeverMoves) {
  LeaderResolver r(Parsed("only:1"), nullptr);
  EXPECT_EQ(*r.Current(), "only:1");
  r.Failed("only:1", "other:2");
  EXPECT_EQ(*r.Current(), "only:1");
}

TEST(LeaderResolver, ListGoesRoundRobinWithoutAHint) {
  LeaderResolver r(Parsed("a:1,b:1,c:1"), nullptr);
  EXPECT_EQ(*r.Current(), "a:1");
  r.Failed("a:1", "");
  EXPECT_EQ(*r.Current(), "b:1");
  r.Failed("b:1", "");
  EXPECT_EQ(*r.Current(), "c:1");
  r.Failed("c:1", "");
  EXPECT_EQ(*r.Current(), "a:1");
}

TEST(LeaderResolver, ListFollowsTheHintWhenItIsOneOfTheList) {
  LeaderResolver r(Parsed("a:1,b:1,c:1"), nullptr);
  r.Failed("a:1", "c:1");
  EXPECT_EQ(*r.Current(), "c:1");
  // A hint outside the list (or naming the failed one) is no better than
  // the next entry.
  r.Failed("c:1", "elsewhere:9");
  EXPECT_EQ(*r.Current(), "a:1");
  r.Failed("a:1", "a:1");
  EXPECT_EQ(*r.Current(), "b:1");
}

TEST(LeaderResolver, AFailureOfAnAddressNoLongerCurrentChangesNothing) {
  // Two calls failed on a:1; the second report must not skip b:1.
  LeaderResolver r(Parsed("a:1,b:1,c:1"), nullptr);
  r.Failed("a:1", "");
  r.Failed("a:1", "");
  EXPECT_EQ(*r.Current(), "b:1");
}

TEST(LeaderResolver, EtcdIsReadOnceThenAgainAfterAFailure) {
  std::vector<absl::StatusOr<std::string>> answers = {std::string("l1:1"), std::string("l2:1")};
  int reads = 0;
  LeaderResolver r(Parsed("etcd://e:1/train"), [&]() { return answers[reads++]; });
  EXPECT_EQ(*r.Current(), "l1:1");
  EXPECT_EQ(*r.Current(), "l1:1");
  EXPECT_EQ(reads, 1);
  r.Failed("other:1", "");  // not the leader it read: nothing to re-read
  EXPECT_EQ(*r.Current(), "l1:1");
  EXPECT_EQ(reads, 1);
  r.Failed("l1:1", "hint-ignored:1");
  EXPECT_EQ(*r.Current(), "l2:1");
  EXPECT_EQ(reads, 2);
}

TEST(LeaderResolver, EtcdWithoutALeaderIsUnavailableNamingTheJob) {
  int reads = 0;
  LeaderResolver r(Parsed("etcd://e:1/train"), [&]() -> absl::StatusOr<std::string> {
    ++reads;
    if (reads == 1) return absl::NotFoundError("etcd at e:1: job 'train' has no leader");
    if (reads == 2) return absl::UnavailableError("etcd at e:1: no member answered");
    if (reads == 3) return absl::DataLossError("etcd at e:1: not a leader record");
    return std::string("l:1");
  });
  absl::StatusOr<std::string> s = r.Current();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.status().message(), HasSubstr("nobody leads job 'train' yet"));
  s = r.Current();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.status().message(), HasSubstr("etcd at e:1"));
  EXPECT_EQ(r.Current().status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(*r.Current(), "l:1");
}

TEST(LeaderResolver, AnyOtherEtcdFailureIsEtcdBeingAwayAndRetried) {
  // A member without quorum holds a read to its deadline and answers
  // UNKNOWN: a worker must wait, not end (seen with 2 of 3 members down).
  LeaderResolver r(Parsed("etcd://e:1/train"), []() -> absl::StatusOr<std::string> {
    return absl::UnknownError("etcd at e:1: range '/shardq/train/leader': context deadline "
                              "exceeded");
  });
  absl::StatusOr<std::string> s = r.Current();
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.status().message(), HasSubstr("context deadline exceeded"));
}

TEST(LeaderResolver, CreateRefusesAnEtcdAddressWithoutJob) {
  CoordinatorAddress a;
  a.spec = "etcd://e:1/";
  a.etcd_endpoints = {"e:1"};
  EXPECT_EQ(LeaderResolver::Create(a).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(LeaderResolver::Create(CoordinatorAddress{}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardq
