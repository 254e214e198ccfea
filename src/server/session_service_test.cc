// The Session stream against a real CoordinatorServer on 127.0.0.1, driven
// by a raw gRPC ClientReaderWriter: the wire contract of coordinator.proto
// ("Sessions"), version checks, hostile openings, and a broken stream
// re-opened (liveness, splits, waits, durability and unary clients:
// session_service_recovery_test.cc). Nothing here is timed: time moves by a
// FakeClock behind the server, and waits are for messages or conditions.
#include "src/server/session_service.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/rpc/protocol_version.h"
#include "src/server/session_test_util.h"

namespace shardq {
namespace {

using session_test::AwaitCondition;
using session_test::CreateQueue;
using session_test::kTimeout;
using session_test::RawSession;
using session_test::Server;
using session_test::StartServer;
using session_test::Stats;
using session_test::UnaryTake;

TEST(Session, OpensAndAnswersACompletionAndTheNextTakeInOneMessage) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 3);
  RawSession session(s);
  v1::SessionResponse opened = session.Open("q", "w");
  ASSERT_TRUE(opened.has_opened());
  EXPECT_EQ(opened.request_id(), 1u);
  EXPECT_EQ(opened.opened().version().major(), kProtocolMajor);
  EXPECT_EQ(opened.opened().version().minor(), kProtocolMinor);
  EXPECT_EQ(opened.opened().queue().name(), "q");
  EXPECT_EQ(opened.opened().queue().num_items(), 3);
  EXPECT_EQ(s.coordinator()->SessionsOpen("q", "w"), 1);

  v1::SessionResponse first = session.Take(2);
  ASSERT_EQ(first.items_size(), 1);
  EXPECT_EQ(first.items(0).item(), "f0.txt?start=0&end=1000");
  for (int i = 1; i <= 2; ++i) {
    const uint64_t done = first.items(0).lease_id();
    v1::SessionResponse next = session.Take(2 + i, 0, {done});
    ASSERT_EQ(next.complete_results_size(), 1);
    EXPECT_EQ(next.complete_results(0).lease_id(), done);
    EXPECT_EQ(next.complete_results(0).status().code(), 0);
    EXPECT_FALSE(next.complete_results(0).duplicate());
    ASSERT_EQ(next.items_size(), 1);
    EXPECT_EQ(next.items(0).index(), i);
    first = next;
  }
  v1::SessionResponse last = session.Take(5, 0, {first.items(0).lease_id()});
  EXPECT_EQ(last.complete_results(0).status().code(), 0);
  EXPECT_TRUE(last.end_of_input());
  EXPECT_EQ(last.items_size(), 0);
  EXPECT_EQ(Stats(s, "q").completed, 3);
  EXPECT_TRUE(session.Finish().ok());
  EXPECT_EQ(s.coordinator()->SessionsOpen("q", "w"), 0);
}

TEST(Session, AFailedOperationIsAnsweredAndTheStreamGoesOn) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 2);
  RawSession session(s);
  session.Open("q", "w");
  v1::SessionRequest req;
  req.set_request_id(2);
  req.add_complete_lease_ids(123456789);  // never handed out
  v1::SessionRelease* release = req.add_releases();
  release->set_lease_id(987654321);
  v1::LeaseProgress* progress = req.add_progress();
  progress->set_lease_id(555);
  progress->set_offset(10);
  req.set_take(1);
  ASSERT_TRUE(session.Write(req));
  v1::SessionResponse resp = session.ReadAnswer(2);
  ASSERT_EQ(resp.complete_results_size(), 1);
  EXPECT_EQ(resp.complete_results(0).status().code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_NE(resp.complete_results(0).status().message().find("123456789"), std::string::npos);
  ASSERT_EQ(resp.release_results_size(), 1);
  EXPECT_EQ(resp.release_results(0).status().code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(resp.progress_status().code(), static_cast<int>(absl::StatusCode::kNotFound));
  ASSERT_EQ(resp.items_size(), 1);  // the take after them still ran
  // num_clients is 1: a second take fails, and the stream still goes on.
  v1::SessionResponse refused = session.Take(3);
  EXPECT_EQ(refused.take_status().code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  v1::SessionResponse next = session.Take(4, 0, {resp.items(0).lease_id()});
  EXPECT_EQ(next.items_size(), 1);
  EXPECT_TRUE(session.Finish().ok());
  EXPECT_EQ(Stats(s, "q").refused_completions, 1);
}

TEST(Session, AnotherMajorVersionIsRefusedNamingBothVersions) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  RawSession session(s);
  session.Open("q", "w", {}, kProtocolMajor + 1, 3);
  EXPECT_TRUE(session.ended());
  grpc::Status status = session.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find(absl::StrCat(kProtocolMajor + 1, ".3")),
            std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find(absl::StrCat(kProtocolMajor, ".", kProtocolMinor)),
            std::string::npos)
      << status.error_message();
  EXPECT_EQ(s.coordinator()->SessionsOpen("q", "w"), 0);
}

TEST(Session, AnotherMinorVersionIsServed) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  RawSession session(s);
  v1::SessionResponse opened = session.Open("q", "w", {}, kProtocolMajor, kProtocolMinor + 5);
  ASSERT_TRUE(opened.has_opened());
  EXPECT_EQ(opened.opened().version().minor(), kProtocolMinor);
  EXPECT_EQ(session.Take(2).items_size(), 1);
  EXPECT_TRUE(session.Finish().ok());
}

TEST(Session, HostileOpeningsEndTheStreamWithTheirError) {
  FakeClock clock;
  Server s = StartServer(&clock, "", "secret");
  {
    RawSession no_token(s);
    no_token.Open("q", "w");
    EXPECT_EQ(no_token.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    RawSession unknown_queue(s, "secret");
    unknown_queue.Open("nope", "w");
    grpc::Status status = unknown_queue.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(status.error_message().find("nope"), std::string::npos);
  }
  {
    RawSession no_open(s, "secret");
    v1::SessionRequest req;
    req.set_request_id(1);
    req.set_take(1);
    ASSERT_TRUE(no_open.Write(req));
    no_open.Read();
    EXPECT_TRUE(no_open.ended());
    EXPECT_EQ(no_open.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST(Session, StreamsBeyondTheLimitAreRefusedNamingItUntilOneEnds) {
  FakeClock clock;
  Server s = StartServer(&clock, "", "", /*max_sessions=*/2);
  CreateQueue(s, "q", 4);
  RawSession opened(s);
  EXPECT_TRUE(opened.Open("q", "w1").has_opened());
  // A stream that never sends its `open` holds a place too.
  RawSession silent(s);
  AwaitCondition([&] { return s.server->live_sessions() == 2; });

  RawSession third(s);
  third.Open("q", "w3");
  EXPECT_TRUE(third.ended());
  grpc::Status refused = third.Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("2 Session streams"), std::string::npos)
      << refused.error_message();
  EXPECT_NE(refused.error_message().find("--max-sessions"), std::string::npos)
      << refused.error_message();
  EXPECT_EQ(s.server->live_sessions(), 2);
  // The open session kept working.
  EXPECT_EQ(opened.Take(2).items_size(), 1);

  silent.Break();
  AwaitCondition([&] { return s.server->live_sessions() == 1; });
  RawSession fourth(s);
  EXPECT_TRUE(fourth.Open("q", "w4").has_opened());
  EXPECT_EQ(fourth.Take(2).items_size(), 1);
  EXPECT_TRUE(fourth.Finish().ok());
  EXPECT_TRUE(opened.Finish().ok());
  AwaitCondition([&] { return s.server->live_sessions() == 0; });
}

TEST(Session, AStreamBrokenMidItemIsReopenedAndKeepsItsLease) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  uint64_t lease;
  {
    RawSession first(s);
    first.Open("q", "w");
    v1::SessionResponse taken = first.Take(2);
    ASSERT_EQ(taken.items_size(), 1);
    lease = taken.items(0).lease_id();
    first.Break();
  }
  AwaitCondition([&] { return s.coordinator()->SessionsOpen("q", "w") == 0; });
  clock.Advance(kTimeout / 2);  // gone, but for less than the lease timeout
  RawSession again(s);
  v1::SessionResponse opened = again.Open("q", "w", {lease, 42});
  ASSERT_TRUE(opened.has_opened());
  ASSERT_EQ(opened.opened().lost_lease_ids_size(), 1);
  EXPECT_EQ(opened.opened().lost_lease_ids(0), 42u);  // never held
  // Open, its lease never expires, whatever the time.
  clock.Advance(10 * kTimeout);
  EXPECT_EQ(UnaryTake(s, "q", "other").items_size(), 0);
  v1::SessionResponse done = again.Take(3, 0, {lease});
  EXPECT_EQ(done.complete_results(0).status().code(), 0);
  EXPECT_TRUE(done.end_of_input());
  EXPECT_EQ(Stats(s, "q").expired, 0);
  EXPECT_TRUE(again.Finish().ok());
}

}  // namespace
}  // namespace shardq
