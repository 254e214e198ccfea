// CoordinatorImpl::Observer: what the status page's timeline and latency
// histograms are fed from.
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

QueueConfig Config(const std::string& name, int64_t items) {
  QueueConfig c;
  c.name = name;
  for (int64_t i = 0; i < items; ++i) c.items.push_back("item-" + std::to_string(i));
  c.lease_timeout = absl::Seconds(30);
  return c;
}

class Recorder final : public CoordinatorImpl::Observer {
 public:
  void OnUpdate(absl::string_view queue, const journal::Update& update) override {
    std::lock_guard<std::mutex> lock(mu);
    updates.emplace_back(std::string(queue), update);
  }
  void OnCallDone(Call call, absl::Duration took) override {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_GE(took, absl::ZeroDuration());
    (call == Call::kTake ? takes : completes)++;
  }
  std::mutex mu;
  std::vector<std::pair<std::string, journal::Update>> updates;
  int takes = 0;
  int completes = 0;
};

TEST(CoordinatorObserver, InMemorySeesLeasesEndsAndCallsOfQueuesMadeBeforeAndAfter) {
  CoordinatorImpl c;
  ASSERT_TRUE(c.CreateQueue(Config("before", 2)).ok());
  Recorder recorder;
  c.SetObserver(&recorder);
  ASSERT_TRUE(c.CreateQueue(Config("after", 1)).ok());

  absl::StatusOr<std::vector<WorkItem>> a = c.Take("before", "w1", 1, absl::Now());
  ASSERT_TRUE(a.ok() && a->size() == 1u) << a.status();
  ASSERT_TRUE(c.Complete("before", "w1", (*a)[0].lease_id).ok());
  a = c.Take("before", "w1", 1, absl::Now());
  ASSERT_TRUE(a.ok() && a->size() == 1u) << a.status();
  ASSERT_TRUE(c.Release("before", "w1", (*a)[0].lease_id).ok());
  absl::StatusOr<std::vector<WorkItem>> b = c.Take("after", "w2", 1, absl::Now());
  ASSERT_TRUE(b.ok() && b->size() == 1u) << b.status();
  absl::Notification done;
  c.CompleteAsync("after", "w2", (*b)[0].lease_id,
                  [&done](absl::StatusOr<CompleteOutcome> outcome) {
                    EXPECT_TRUE(outcome.ok()) << outcome.status();
                    done.Notify();
                  });
  done.WaitForNotification();

  std::lock_guard<std::mutex> lock(recorder.mu);
  std::vector<std::string> seen;
  for (const auto& [queue, u] : recorder.updates) {
    const char* kind = u.has_lease() ? "lease" : u.has_complete() ? "complete"
                       : u.has_release() ? "release" : "other";
    seen.push_back(queue + ":" + kind);
    EXPECT_GT(u.time_us(), 0);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"before:lease", "before:complete", "before:lease",
                                            "before:release", "after:lease", "after:complete"}));
  EXPECT_EQ(recorder.updates[0].second.lease().worker(), "w1");
  EXPECT_EQ(recorder.takes, 3);
  EXPECT_GE(recorder.completes, 1);  // the async one reports once its answer is gone
}

TEST(CoordinatorObserver, WithoutAnObserverNothingIsReportedAfterItIsRemoved) {
  CoordinatorImpl c;
  Recorder recorder;
  c.SetObserver(&recorder);
  ASSERT_TRUE(c.CreateQueue(Config("q", 2)).ok());
  c.SetObserver(nullptr);
  absl::StatusOr<std::vector<WorkItem>> a = c.Take("q", "w", 1, absl::Now());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(c.Complete("q", "w", (*a)[0].lease_id).ok());
  std::lock_guard<std::mutex> lock(recorder.mu);
  EXPECT_TRUE(recorder.updates.empty());
  EXPECT_EQ(recorder.takes, 0);
}

// A session's transport that only notes which steps are done.
class DoneSink final : public SessionSink {
 public:
  void StepDone(uint64_t cookie) override {
    absl::MutexLock lock(&mu_);
    done_.push_back(cookie);
  }
  void PushSplit(const SplitProposal&) override {}
  void CoordinatorShuttingDown() override {}
  bool AwaitDone(uint64_t cookie) {
    absl::MutexLock lock(&mu_);
    auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::find(done_.begin(), done_.end(), cookie) != done_.end();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60));
  }

 private:
  absl::Mutex mu_;
  std::vector<uint64_t> done_ ABSL_GUARDED_BY(mu_);
};

std::pair<int, int> TakesAndCompletes(Recorder& recorder) {
  std::lock_guard<std::mutex> lock(recorder.mu);
  return {recorder.takes, recorder.completes};
}

TEST(CoordinatorObserver, SessionStepsAreTimedAsTakesAndCompletionsOnceTheirAnswerIsFinal) {
  CoordinatorImpl c;
  QueueConfig config = Config("q", 2);
  config.lease_timeout = absl::Hours(1);
  ASSERT_TRUE(c.CreateQueue(config).ok());
  Recorder recorder;
  c.SetObserver(&recorder);
  auto sink = std::make_shared<DoneSink>();
  auto other_sink = std::make_shared<DoneSink>();
  SessionOpening opening;
  absl::StatusOr<std::shared_ptr<CoordinatorImpl::Session>> w =
      c.OpenSession("q", "w", {}, sink, &opening);
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<std::shared_ptr<CoordinatorImpl::Session>> other =
      c.OpenSession("q", "other", {}, other_sink, &opening);
  ASSERT_TRUE(other.ok()) << other.status();

  SessionOps ops;
  ops.take = 1;
  SessionResult first;
  ASSERT_TRUE(c.SessionStep(**w, ops, &first, 1));
  ASSERT_EQ(first.items.size(), 1u);
  EXPECT_EQ(TakesAndCompletes(recorder), std::make_pair(1, 0));

  // A completion and the next take in one step: one of each.
  ops.completions = {first.items[0].lease_id};
  SessionResult second;
  ASSERT_TRUE(c.SessionStep(**w, ops, &second, 2));
  ASSERT_EQ(second.items.size(), 1u);
  EXPECT_EQ(TakesAndCompletes(recorder), std::make_pair(2, 1));

  // A take that waits is timed when it is answered, not when it is asked.
  SessionOps wait;
  wait.take = 1;
  wait.take_wait = absl::Seconds(60);
  SessionResult waited;
  ASSERT_FALSE(c.SessionStep(**other, wait, &waited, 3));
  EXPECT_EQ(TakesAndCompletes(recorder), std::make_pair(2, 1));
  SessionOps complete;
  complete.completions = {second.items[0].lease_id};
  SessionResult completed;
  ASSERT_TRUE(c.SessionStep(**w, complete, &completed, 4));
  ASSERT_TRUE(other_sink->AwaitDone(3));
  EXPECT_TRUE(waited.end_of_input);
  EXPECT_EQ(TakesAndCompletes(recorder), std::make_pair(3, 2));

  // Steps with neither (progress only) are not timed.
  SessionResult nothing;
  ASSERT_TRUE(c.SessionStep(**w, SessionOps(), &nothing, 5));
  EXPECT_EQ(TakesAndCompletes(recorder), std::make_pair(3, 2));
  c.CloseSession(**w);
  c.CloseSession(**other);
}

}  // namespace
}  // namespace shardq
