// CoordinatorImpl's worker sessions without gRPC: one step per request,
// waiting takes answered by the wait hub, liveness while open and the lease
// timeout after the close, pushed split proposals, take-ahead items given
// back whole, shutdown, durability. Time moves by a FakeClock; waits are
// for the sink's events, never timed.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

class FakeSink final : public SessionSink {
 public:
  void StepDone(uint64_t cookie) override {
    absl::MutexLock lock(&mu_);
    done_.push_back(cookie);
    changed_.SignalAll();
  }
  void PushSplit(const SplitProposal& proposal) override {
    absl::MutexLock lock(&mu_);
    pushed_.push_back(proposal);
  }
  void CoordinatorShuttingDown() override {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
  }
  // Waits (bounded generously, so that a bug fails instead of hanging)
  // until the step of `cookie` is done.
  bool AwaitDone(uint64_t cookie) {
    // A CondVar, which ThreadSanitizer follows (an Await predicate runs in
    // the unlocking thread, unseen: src/pipeline/tsan_absl_mutex_shim.cc).
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    absl::MutexLock lock(&mu_);
    while (std::find(done_.begin(), done_.end(), cookie) == done_.end()) {
      if (absl::Now() >= give_up) return false;
      changed_.WaitWithDeadline(&mu_, give_up);
    }
    return true;
  }
  bool IsDone(uint64_t cookie) {
    absl::MutexLock lock(&mu_);
    return std::find(done_.begin(), done_.end(), cookie) != done_.end();
  }
  std::vector<SplitProposal> pushed() {
    absl::MutexLock lock(&mu_);
    return pushed_;
  }
  bool shut_down() {
    absl::MutexLock lock(&mu_);
    return shut_down_;
  }

 private:
  absl::Mutex mu_;
  absl::CondVar changed_;  // a step is done
  std::vector<uint64_t> done_ ABSL_GUARDED_BY(mu_);
  std::vector<SplitProposal> pushed_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

// Items "f<i>.txt?start=0&end=1000", in plan order.
QueueConfig Config(int items, int num_clients = 1) {
  QueueConfig c;
  c.name = "q";
  for (int i = 0; i < items; ++i) c.items.push_back(absl::StrCat("f", i, ".txt?start=0&end=1000"));
  c.shuffle = false;
  c.seed = 1;
  c.num_clients = num_clients;
  c.lease_timeout = kTimeout;
  c.split_min_residual = 10;
  return c;
}

struct Worker {
  std::shared_ptr<FakeSink> sink = std::make_shared<FakeSink>();
  std::shared_ptr<CoordinatorImpl::Session> session;
  SessionOpening opening;
};

Worker Open(CoordinatorImpl& c, const std::string& worker,
            const std::vector<uint64_t>& lease_ids = {}) {
  Worker w;
  absl::StatusOr<std::shared_ptr<CoordinatorImpl::Session>> session =
      c.OpenSession("q", worker, lease_ids, w.sink, &w.opening);
  EXPECT_TRUE(session.ok()) << session.status();
  w.session = *session;
  return w;
}

SessionOps TakeOps(int64_t n, absl::Duration wait = absl::ZeroDuration(),
                   std::vector<uint64_t> complete = {}) {
  SessionOps ops;
  ops.completions = std::move(complete);
  ops.take = n;
  ops.take_wait = wait;
  return ops;
}

TEST(CoordinatorSessions, ACompletionAndTheNextTakeAreOneStepAnsweredAtOnce) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(2)).ok());
  Worker w = Open(c, "w");
  EXPECT_EQ(w.opening.queue.num_items, 2);
  SessionResult first;
  ASSERT_TRUE(c.SessionStep(*w.session, TakeOps(1), &first, 1));
  ASSERT_EQ(first.items.size(), 1u);
  SessionResult second;
  ASSERT_TRUE(c.SessionStep(*w.session, TakeOps(1, absl::ZeroDuration(), {first.items[0].lease_id}),
                            &second, 2));
  ASSERT_EQ(second.completions.size(), 1u);
  EXPECT_TRUE(second.completions[0].status.ok());
  ASSERT_EQ(second.items.size(), 1u);
  EXPECT_EQ(second.items[0].index, 1);
  SessionResult last;
  ASSERT_TRUE(c.SessionStep(*w.session, TakeOps(1, absl::Seconds(60), {second.items[0].lease_id}),
                            &last, 3));
  EXPECT_TRUE(last.end_of_input);
  c.CloseSession(*w.session);
}

TEST(CoordinatorSessions, RecordsGoWithTheirCompletionAndABadCountFailsOnlyItsCompletion) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(3, /*num_clients=*/3)).ok());
  Worker w = Open(c, "w");
  SessionResult taken;
  ASSERT_TRUE(c.SessionStep(*w.session, TakeOps(3), &taken, 1));
  ASSERT_EQ(taken.items.size(), 3u);
  SessionOps ops;
  ops.completions = {taken.items[0].lease_id, taken.items[1].lease_id, taken.items[2].lease_id};
  ops.completion_records = {7, -5};  // the third: not counted
  SessionResult done;
  ASSERT_TRUE(c.SessionStep(*w.session, ops, &done, 2));
  ASSERT_EQ(done.completions.size(), 3u);
  EXPECT_TRUE(done.completions[0].status.ok());
  EXPECT_EQ(done.completions[1].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(done.completions[2].status.ok());
  absl::StatusOr<QueueStats> stats = c.Stats("q");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->completed, 2);
  EXPECT_EQ(stats->records, 7);
  EXPECT_EQ(stats->workers.at("w").records, 7);
  c.CloseSession(*w.session);
}

TEST(CoordinatorSessions, AWaitingTakeIsAnsweredByTheHubWhenAnItemIsReleased) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(1)).ok());
  Worker holder = Open(c, "holder");
  Worker waiter = Open(c, "waiter");
  SessionResult held;
  ASSERT_TRUE(c.SessionStep(*holder.session, TakeOps(1), &held, 1));
  SessionResult waited;
  ASSERT_FALSE(c.SessionStep(*waiter.session, TakeOps(1, absl::Seconds(60)), &waited, 7));
  EXPECT_FALSE(waiter.sink->IsDone(7));
  SessionOps release;
  release.releases.push_back({held.items[0].lease_id, false, ""});
  SessionResult released;
  ASSERT_TRUE(c.SessionStep(*holder.session, release, &released, 2));
  ASSERT_TRUE(waiter.sink->AwaitDone(7));
  ASSERT_EQ(waited.items.size(), 1u);
  EXPECT_EQ(waited.items[0].index, 0);
  c.CloseSession(*holder.session);
  c.CloseSession(*waiter.session);
}

TEST(CoordinatorSessions, AWaitingTakeEndsWithNoItemsAtTheEndOfItsWait) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(1)).ok());
  Worker holder = Open(c, "holder");
  Worker waiter = Open(c, "waiter");
  SessionResult held;
  ASSERT_TRUE(c.SessionStep(*holder.session, TakeOps(1), &held, 1));
  SessionResult waited;
  ASSERT_FALSE(c.SessionStep(*waiter.session, TakeOps(1, absl::Milliseconds(20)), &waited, 7));
  ASSERT_TRUE(waiter.sink->AwaitDone(7));
  EXPECT_TRUE(waited.take.ok());
  EXPECT_TRUE(waited.items.empty());
  EXPECT_FALSE(waited.end_of_input);
  c.CloseSession(*waiter.session);
  c.CloseSession(*holder.session);
}

TEST(CoordinatorSessions, WaitingTakesGetEndOfInputWhenTheLastItemIsCompleted) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(1)).ok());
  Worker holder = Open(c, "holder");
  std::vector<Worker> waiters;
  std::vector<SessionResult> results(3);
  SessionResult held;
  ASSERT_TRUE(c.SessionStep(*holder.session, TakeOps(1), &held, 1));
  for (int i = 0; i < 3; ++i) {
    waiters.push_back(Open(c, absl::StrCat("waiter", i)));
    ASSERT_FALSE(c.SessionStep(*waiters[i].session, TakeOps(1, absl::Seconds(60)), &results[i],
                               10 + i));
  }
  SessionResult done;
  SessionOps complete;
  complete.completions.push_back(held.items[0].lease_id);
  ASSERT_TRUE(c.SessionStep(*holder.session, complete, &done, 2));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(waiters[i].sink->AwaitDone(10 + i));
    EXPECT_TRUE(results[i].end_of_input);
    c.CloseSession(*waiters[i].session);
  }
  c.CloseSession(*holder.session);
}

TEST(CoordinatorSessions, LeasesLiveWhileOpenAndExpireOneTimeoutAfterTheClose) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(1)).ok());
  Worker w = Open(c, "w");
  SessionResult held;
  ASSERT_TRUE(c.SessionStep(*w.session, TakeOps(1), &held, 1));
  clock.Advance(100 * kTimeout);
  EXPECT_TRUE(c.Take("q", "other", 1, absl::InfinitePast())->empty());
  // Closing a session answers its waiting take at once, with no items.
  SessionResult waited;
  Worker second = Open(c, "x");
  ASSERT_FALSE(c.SessionStep(*second.session, TakeOps(1, absl::Seconds(60)), &waited, 5));
  c.CloseSession(*second.session);
  EXPECT_TRUE(second.sink->IsDone(5));
  EXPECT_TRUE(waited.items.empty());
  // Two streams of one worker: its leases live while either is open.
  Worker w2 = Open(c, "w");
  EXPECT_EQ(c.SessionsOpen("q", "w"), 2);
  c.CloseSession(*w2.session);
  clock.Advance(10 * kTimeout);
  EXPECT_TRUE(c.Take("q", "other", 1, absl::InfinitePast())->empty());
  c.CloseSession(*w.session);
  c.CloseSession(*w.session);  // idempotent
  EXPECT_EQ(c.SessionsOpen("q", "w"), 0);
  clock.Advance(kTimeout - absl::Seconds(1));
  EXPECT_TRUE(c.Take("q", "other", 1, absl::InfinitePast())->empty());
  clock.Advance(absl::Seconds(1));
  absl::StatusOr<std::vector<WorkItem>> taken = c.Take("q", "other", 1, absl::InfinitePast());
  ASSERT_TRUE(taken.ok());
  ASSERT_EQ(taken->size(), 1u);
  EXPECT_EQ(c.Stats("q")->expired, 1);
  // A re-open now learns that its lease is gone.
  Worker back = Open(c, "w", {held.items[0].lease_id});
  EXPECT_EQ(back.opening.lost_lease_ids, std::vector<uint64_t>{held.items[0].lease_id});
  c.CloseSession(*back.session);
}

TEST(CoordinatorSessions, AProposalMadeByAUnaryTakeIsPushedToTheHoldersSession) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(1)).ok());
  Worker holder = Open(c, "holder");
  SessionResult held;
  ASSERT_TRUE(c.SessionStep(*holder.session, TakeOps(1), &held, 1));
  const uint64_t lease = held.items[0].lease_id;
  clock.Advance(absl::Seconds(10));
  SessionOps progress;
  progress.progress.emplace_back(lease, 100);
  SessionResult reported;
  ASSERT_TRUE(c.SessionStep(*holder.session, progress, &reported, 2));
  EXPECT_TRUE(reported.progress.ok());
  EXPECT_TRUE(c.Take("q", "unary", 1, absl::InfinitePast())->empty());
  std::vector<SplitProposal> pushed = holder.sink->pushed();
  ASSERT_EQ(pushed.size(), 1u);
  EXPECT_EQ(pushed[0].lease_id, lease);
  // Resent with every answer until answered.
  SessionResult again;
  ASSERT_TRUE(c.SessionStep(*holder.session, progress, &again, 3));
  ASSERT_EQ(again.proposals.size(), 1u);
  SessionOps answer;
  answer.split_answers.push_back({lease, pushed[0].split_point});
  SessionResult answered;
  ASSERT_TRUE(c.SessionStep(*holder.session, answer, &answered, 4));
  ASSERT_EQ(answered.splits.size(), 1u);
  EXPECT_TRUE(answered.splits[0].accepted);
  EXPECT_TRUE(answered.proposals.empty());
  c.CloseSession(*holder.session);
}

TEST(CoordinatorSessions, AnUnstartedItemTakenAheadGoesBackWholeToTheAsker) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(2, /*num_clients=*/2)).ok());
  Worker busy = Open(c, "busy");
  Worker idle = Open(c, "idle");
  SessionResult held;
  ASSERT_TRUE(c.SessionStep(*busy.session, TakeOps(2), &held, 1));
  ASSERT_EQ(held.items.size(), 2u);
  clock.Advance(absl::Seconds(5));
  SessionOps progress;
  progress.progress.emplace_back(held.items[0].lease_id, 300);  // reading the first
  SessionResult reported;
  ASSERT_TRUE(c.SessionStep(*busy.session, progress, &reported, 2));
  SessionResult waited;
  ASSERT_FALSE(c.SessionStep(*idle.session, TakeOps(1, absl::Seconds(60)), &waited, 9));
  std::vector<SplitProposal> pushed = busy.sink->pushed();
  ASSERT_EQ(pushed.size(), 1u);
  EXPECT_EQ(pushed[0].lease_id, held.items[1].lease_id);
  EXPECT_EQ(pushed[0].split_point, 0);
  SessionOps give_back;
  give_back.split_answers.push_back({held.items[1].lease_id, 0});
  SessionResult answered;
  ASSERT_TRUE(c.SessionStep(*busy.session, give_back, &answered, 3));
  EXPECT_TRUE(answered.splits[0].accepted);
  ASSERT_TRUE(idle.sink->AwaitDone(9));
  ASSERT_EQ(waited.items.size(), 1u);
  EXPECT_EQ(waited.items[0].item, held.items[1].item);
  QueueStats stats = *c.Stats("q");
  EXPECT_EQ(stats.released, 0);
  EXPECT_EQ(stats.given_back, 1);
  EXPECT_EQ(stats.failed, 0);
  EXPECT_EQ(stats.splits, 0);
  c.CloseSession(*busy.session);
  c.CloseSession(*idle.session);
}

TEST(CoordinatorSessions, ShutdownAnswersWaitingTakesAndEndsSessions) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(1)).ok());
  Worker holder = Open(c, "holder");
  Worker waiter = Open(c, "waiter");
  SessionResult held;
  ASSERT_TRUE(c.SessionStep(*holder.session, TakeOps(1), &held, 1));
  SessionResult waited;
  ASSERT_FALSE(c.SessionStep(*waiter.session, TakeOps(1, absl::Seconds(60)), &waited, 4));
  c.Shutdown();
  EXPECT_TRUE(waiter.sink->IsDone(4));
  EXPECT_TRUE(waiter.sink->shut_down());
  EXPECT_TRUE(holder.sink->shut_down());
  SessionOpening opening;
  EXPECT_EQ(c.OpenSession("q", "late", {}, std::make_shared<FakeSink>(), &opening).status().code(),
            absl::StatusCode::kUnavailable);
  c.CloseSession(*holder.session);
  c.CloseSession(*waiter.session);
}

TEST(CoordinatorSessions, DurableCompletionIsAnsweredOnceStored) {
  const std::string dir =
      absl::StrCat(testing::TempDir(), "/coordinator-sessions-", ::getpid());
  std::filesystem::remove_all(dir);
  {
    CoordinatorOptions options;
    options.state_dir = dir;
    absl::StatusOr<std::unique_ptr<CoordinatorImpl>> c = CoordinatorImpl::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*c)->CreateQueue(Config(2)).ok());
    Worker w = Open(**c, "w");
    SessionResult held;
    ASSERT_TRUE((*c)->SessionStep(*w.session, TakeOps(1), &held, 1));  // grants: behind
    SessionResult done;
    if (!(*c)->SessionStep(*w.session, TakeOps(1, absl::ZeroDuration(), {held.items[0].lease_id}),
                           &done, 2)) {
      ASSERT_TRUE(w.sink->AwaitDone(2));
    }
    EXPECT_TRUE(done.completions[0].status.ok());
    EXPECT_EQ(done.items.size(), 1u);
    (*c)->CloseSession(*w.session);
  }
  CoordinatorOptions options;
  options.state_dir = dir;
  absl::StatusOr<std::unique_ptr<CoordinatorImpl>> c = CoordinatorImpl::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->Stats("q")->completed, 1);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardq

namespace shardq {
namespace {

// A grant whose answer was lost with a broken stream: the worker re-opens
// without that lease id. On a re-open the coordinator releases it (else it
// would stay held while the worker's sessions are open, and count against
// num_clients); a first open keeps whatever the worker holds.
TEST(CoordinatorSessions, AReopenReleasesLeasesTheWorkerDidNotName) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  ASSERT_TRUE(c.CreateQueue(Config(3, 2)).ok());
  Worker first = Open(c, "w");
  SessionResult got;
  ASSERT_TRUE(c.SessionStep(*first.session, TakeOps(2), &got, 1));
  ASSERT_EQ(got.items.size(), 2u);
  c.CloseSession(*first.session);  // the stream broke; one answer was "lost"

  Worker again;
  absl::StatusOr<std::shared_ptr<CoordinatorImpl::Session>> session =
      c.OpenSession("q", "w", {got.items[0].lease_id}, again.sink, &again.opening,
                    /*reopen=*/true);
  ASSERT_TRUE(session.ok()) << session.status();
  QueueStats stats = *c.Stats("q");
  EXPECT_EQ(stats.leased, 1);
  EXPECT_EQ(stats.released, 1);
  EXPECT_EQ(stats.pending, 2);
  EXPECT_TRUE(again.opening.lost_lease_ids.empty());
  c.CloseSession(**session);

  // A first open (reopen false) keeps the lease it does not name.
  Worker plain = Open(c, "w");
  EXPECT_EQ(c.Stats("q")->leased, 1);
  c.CloseSession(*plain.session);
}

}  // namespace
}  // namespace shardq
