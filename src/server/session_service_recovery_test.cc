// The Session stream against a real CoordinatorServer on 127.0.0.1, continued
// from session_service_test.cc: liveness without heartbeats, pushed split
// proposals, take-ahead, waiting takes, unary clients on the same queue, and
// durability. Nothing here is timed: time moves by a FakeClock behind the
// server, and waits are for messages or conditions.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/server/grpc_service.h"
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

TEST(Session, ASessionGonePastTheLeaseTimeoutLosesItsItemsToOthersCountedOnce) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 2);
  RawSession first(s);
  first.Open("q", "w1");
  v1::SessionResponse taken = first.Take(2);
  ASSERT_EQ(taken.items_size(), 1);
  const uint64_t lease = taken.items(0).lease_id();
  first.Break();
  AwaitCondition([&] { return s.coordinator()->SessionsOpen("q", "w1") == 0; });

  // Another worker takes the other item and then waits: w1's item is held.
  RawSession second(s);
  second.Open("q", "w2");
  v1::SessionResponse other = second.Take(2);
  ASSERT_EQ(other.items_size(), 1);
  clock.Advance(kTimeout - absl::Seconds(1));
  v1::SessionResponse nothing = second.Take(3, 0, {other.items(0).lease_id()});
  EXPECT_EQ(nothing.items_size(), 0);
  EXPECT_FALSE(nothing.end_of_input());
  // Past the timeout, w1's item goes to w2, which waits for it.
  v1::SessionRequest wait;
  wait.set_request_id(4);
  wait.set_take(1);
  wait.set_take_wait_ms(50'000);
  ASSERT_TRUE(second.Write(wait));
  clock.Advance(absl::Seconds(2));
  v1::SessionResponse released = second.ReadAnswer(4);  // the wait hub noticed the expiry
  ASSERT_EQ(released.items_size(), 1);
  EXPECT_EQ(released.items(0).index(), taken.items(0).index());

  // w1 comes back: its lease is reported lost, and its late completion is
  // the first, so it counts; w2's is then the duplicate.
  RawSession back(s);
  v1::SessionResponse opened = back.Open("q", "w1", {lease});
  ASSERT_EQ(opened.opened().lost_lease_ids_size(), 1);
  EXPECT_EQ(opened.opened().lost_lease_ids(0), lease);
  v1::SessionRequest late;
  late.set_request_id(2);
  late.add_complete_lease_ids(lease);
  ASSERT_TRUE(back.Write(late));
  v1::SessionResponse late_answer = back.ReadAnswer(2);
  EXPECT_EQ(late_answer.complete_results(0).status().code(), 0);
  EXPECT_FALSE(late_answer.complete_results(0).duplicate());
  v1::SessionResponse end = second.Take(5, 0, {released.items(0).lease_id()});
  EXPECT_TRUE(end.complete_results(0).duplicate());
  EXPECT_TRUE(end.end_of_input());
  QueueStats stats = Stats(s, "q");
  EXPECT_EQ(stats.completed, 2);
  EXPECT_EQ(stats.duplicates, 1);
  EXPECT_EQ(stats.expired, 1);
  EXPECT_TRUE(stats.finished);
  EXPECT_TRUE(back.Finish().ok());
  EXPECT_TRUE(second.Finish().ok());
}

TEST(Session, ASplitProposalIsPushedToTheSessionHoldingTheStragglersItem) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  RawSession holder(s);
  holder.Open("q", "slow");
  v1::SessionResponse taken = holder.Take(2);
  ASSERT_EQ(taken.items_size(), 1);
  const uint64_t lease = taken.items(0).lease_id();
  clock.Advance(absl::Seconds(10));
  v1::SessionRequest progress;
  progress.set_request_id(3);
  v1::LeaseProgress* p = progress.add_progress();
  p->set_lease_id(lease);
  p->set_offset(100);
  ASSERT_TRUE(holder.Write(progress));
  EXPECT_EQ(holder.ReadAnswer(3).progress_status().code(), 0);

  // An idle worker asks (a waiting session take): the proposal is pushed
  // to the holder's stream at once.
  RawSession idle(s);
  idle.Open("q", "idle");
  v1::SessionRequest wait;
  wait.set_request_id(2);
  wait.set_take(1);
  wait.set_take_wait_ms(50'000);
  ASSERT_TRUE(idle.Write(wait));
  v1::SessionResponse pushed = holder.Read();
  EXPECT_EQ(pushed.request_id(), 0u);
  ASSERT_EQ(pushed.splits_size(), 1);
  EXPECT_EQ(pushed.splits(0).lease_id(), lease);
  const int64_t point = pushed.splits(0).split_point();
  EXPECT_GT(point, 100);
  EXPECT_LT(point, 1000);
  // Sent again with any answer until answered.
  ASSERT_TRUE(holder.Write(progress));
  v1::SessionResponse again = holder.ReadAnswer(3);
  ASSERT_EQ(again.splits_size(), 1);
  EXPECT_EQ(again.splits(0).split_point(), point);
  // The answer: the idle worker's waiting take gets the rest at once.
  v1::SessionRequest answer;
  answer.set_request_id(4);
  v1::SplitAnswer* a = answer.add_split_answers();
  a->set_lease_id(lease);
  a->set_split_point(point);
  ASSERT_TRUE(holder.Write(answer));
  v1::SessionResponse answered = holder.ReadAnswer(4);
  ASSERT_EQ(answered.split_results_size(), 1);
  EXPECT_TRUE(answered.split_results(0).accepted());
  EXPECT_EQ(answered.splits_size(), 0);
  v1::SessionResponse rest = idle.ReadAnswer(2);
  ASSERT_EQ(rest.items_size(), 1);
  EXPECT_EQ(rest.items(0).item(), absl::StrCat("f0.txt?start=", point, "&end=1000"));
  EXPECT_EQ(holder.Take(5, 0, {lease}).complete_results(0).status().code(), 0);
  EXPECT_TRUE(idle.Take(3, 0, {rest.items(0).lease_id()}).end_of_input());
  EXPECT_TRUE(Stats(s, "q").finished);
  EXPECT_TRUE(holder.Finish().ok());
  EXPECT_TRUE(idle.Finish().ok());
}

TEST(Session, AnItemTakenAheadIsGivenBackWholeToAnIdleWorker) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 2, /*num_clients=*/2);
  RawSession busy(s);
  busy.Open("q", "busy");
  v1::SessionRequest two;
  two.set_request_id(2);
  two.set_take(2);
  ASSERT_TRUE(busy.Write(two));
  v1::SessionResponse taken = busy.ReadAnswer(2);
  ASSERT_EQ(taken.items_size(), 2);
  const v1::WorkItem ahead = taken.items(1);
  RawSession idle(s);
  idle.Open("q", "idle");
  v1::SessionRequest wait;
  wait.set_request_id(2);
  wait.set_take(1);
  wait.set_take_wait_ms(50'000);
  ASSERT_TRUE(idle.Write(wait));
  v1::SessionResponse pushed = busy.Read();
  ASSERT_EQ(pushed.splits_size(), 1);
  EXPECT_EQ(pushed.splits(0).lease_id(), ahead.lease_id());
  EXPECT_EQ(pushed.splits(0).split_point(), 0);  // its start: the whole item
  v1::SessionRequest give_back;
  give_back.set_request_id(3);
  v1::SplitAnswer* a = give_back.add_split_answers();
  a->set_lease_id(ahead.lease_id());
  a->set_split_point(0);
  ASSERT_TRUE(busy.Write(give_back));
  EXPECT_TRUE(busy.ReadAnswer(3).split_results(0).accepted());
  v1::SessionResponse got = idle.ReadAnswer(2);
  ASSERT_EQ(got.items_size(), 1);
  EXPECT_EQ(got.items(0).item(), ahead.item());
  QueueStats stats = Stats(s, "q");
  EXPECT_EQ(stats.released, 0);  // given back unstarted: not a release
  EXPECT_EQ(stats.given_back, 1);
  EXPECT_EQ(stats.splits, 0);
  EXPECT_TRUE(busy.Finish().ok());
  EXPECT_TRUE(idle.Finish().ok());
}

TEST(Session, AWaitingTakeIsAnsweredByAReleaseAndAHalfCloseAnswersTheRest) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  RawSession holder(s);
  holder.Open("q", "a");
  const uint64_t lease = holder.Take(2).items(0).lease_id();
  RawSession waiter(s);
  waiter.Open("q", "b");
  v1::SessionRequest wait;
  wait.set_request_id(2);
  wait.set_take(1);
  wait.set_take_wait_ms(50'000);
  ASSERT_TRUE(waiter.Write(wait));
  v1::SessionRequest release;
  release.set_request_id(3);
  release.add_releases()->set_lease_id(lease);
  ASSERT_TRUE(holder.Write(release));
  EXPECT_EQ(holder.ReadAnswer(3).release_results(0).status().code(), 0);
  v1::SessionResponse got = waiter.ReadAnswer(2);
  ASSERT_EQ(got.items_size(), 1);
  // The holder now waits in turn; its half-close answers that take with
  // no items, and the stream ends OK.
  wait.set_request_id(4);
  ASSERT_TRUE(holder.Write(wait));
  EXPECT_TRUE(holder.Finish().ok());
  EXPECT_TRUE(waiter.Finish().ok());
  EXPECT_EQ(Stats(s, "q").released, 1);
}

TEST(Session, UnaryAndSessionWorkersShareAQueueExactlyOnce) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 6);
  RawSession session(s);
  session.Open("q", "session");
  uint64_t request = 2;
  uint64_t held = 0;
  int by_session = 0;
  int by_unary = 0;
  bool session_done = false;
  bool unary_done = false;
  while (!session_done || !unary_done) {
    if (!session_done) {
      v1::SessionResponse r =
          session.Take(request++, 0, held != 0 ? std::vector<uint64_t>{held} : std::vector<uint64_t>{});
      held = r.items_size() == 1 ? r.items(0).lease_id() : 0;
      by_session += r.items_size();
      session_done = r.end_of_input();
    }
    if (!unary_done) {
      v1::TakeResponse r = UnaryTake(s, "q", "unary");
      unary_done = r.end_of_input();
      if (r.items_size() == 1) {
        ++by_unary;
        v1::CompleteRequest complete;
        complete.set_queue("q");
        complete.set_worker("unary");
        complete.set_lease_id(r.items(0).lease_id());
        grpc::ClientContext ctx;
        v1::CompleteResponse resp;
        ASSERT_TRUE(s.stub->Complete(&ctx, complete, &resp).ok());
      }
    }
  }
  EXPECT_EQ(by_session + by_unary, 6);
  EXPECT_GT(by_session, 0);
  EXPECT_GT(by_unary, 0);
  QueueStats stats = Stats(s, "q");
  EXPECT_EQ(stats.completed, 6);
  EXPECT_EQ(stats.duplicates, 0);
  EXPECT_TRUE(stats.finished);
  EXPECT_TRUE(session.Finish().ok());
}

std::string FreshStateDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/session-state-", name, "-", ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(Session, DurableCompletionsAreAnsweredOnceStoredAndSurviveARestart) {
  const std::string dir = FreshStateDir("durable");
  uint64_t held;
  {
    Server s = StartServer(nullptr, dir);
    CreateQueue(s, "q", 3);
    RawSession session(s);
    session.Open("q", "w");
    uint64_t first = session.Take(2).items(0).lease_id();
    v1::SessionResponse next = session.Take(3, 0, {first});
    EXPECT_EQ(next.complete_results(0).status().code(), 0);
    ASSERT_EQ(next.items_size(), 1);
    held = next.items(0).lease_id();
    // Answered, so on disk: the journal's totals cover it.
    std::optional<Journal::Totals> totals = s.coordinator()->journal_totals();
    ASSERT_TRUE(totals.has_value());
    EXPECT_GE(totals->entries, 3);  // create, lease, complete (and the next lease)
    session.Break();
  }
  Server s = StartServer(nullptr, dir);
  QueueStats stats = Stats(s, "q");
  EXPECT_EQ(stats.completed, 1);
  RawSession session(s);
  v1::SessionResponse opened = session.Open("q", "w", {held});
  EXPECT_EQ(opened.opened().lost_lease_ids_size(), 0);  // the grant was stored
  v1::SessionResponse next = session.Take(2, 0, {held});
  EXPECT_EQ(next.complete_results(0).status().code(), 0);
  ASSERT_EQ(next.items_size(), 1);
  EXPECT_TRUE(session.Take(3, 0, {next.items(0).lease_id()}).end_of_input());
  EXPECT_EQ(Stats(s, "q").completed, 3);
  EXPECT_TRUE(session.Finish().ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardq
