#include "shardq/pipeline/coordinator.h"

#include <pthread.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline {
namespace {

using ::shardq::pipeline::testutil::kGenerous;
using ::shardq::pipeline::testutil::kShort;
using ::testing::HasSubstr;

// A body that runs until a stop is requested.
absl::Status RunUntilStopped(ThreadCoordinator& coordinator) {
  coordinator.WaitForStop();
  return absl::OkStatus();
}

TEST(ThreadCoordinator, RequestStopMakesShouldStopTrueAndReleasesWaiters) {
  ThreadCoordinator coordinator;
  EXPECT_FALSE(coordinator.ShouldStop());
  bool released = false;
  std::thread waiter([&] { released = coordinator.WaitForStop(kGenerous); });
  coordinator.RequestStop();
  waiter.join();
  EXPECT_TRUE(released);
  EXPECT_TRUE(coordinator.ShouldStop());
  EXPECT_TRUE(coordinator.error().ok());
}

TEST(ThreadCoordinator, WaitForStopTimesOutWithoutAStop) {
  ThreadCoordinator coordinator;
  EXPECT_FALSE(coordinator.WaitForStop(kShort));
  EXPECT_FALSE(coordinator.ShouldStop());
}

TEST(ThreadCoordinator, FirstErrorIsKeptAndLaterOnesAreDropped) {
  ThreadCoordinator coordinator;
  coordinator.RequestStop(absl::DataLossError("bad CRC at offset 12"));
  coordinator.RequestStop(absl::NotFoundError("later"));
  EXPECT_EQ(coordinator.error(), absl::DataLossError("bad CRC at offset 12"));
  EXPECT_EQ(coordinator.Join(), absl::DataLossError("bad CRC at offset 12"));
}

TEST(ThreadCoordinator, ErrorAfterACleanStopIsStillReported) {
  ThreadCoordinator coordinator;
  coordinator.RequestStop();
  coordinator.RequestStop(absl::NotFoundError("data/part-3 is missing"));
  EXPECT_EQ(coordinator.error().code(), absl::StatusCode::kNotFound);
}

TEST(ThreadCoordinator, OutOfRangeIsACleanStop) {
  ThreadCoordinator coordinator;
  coordinator.RequestStop(absl::OutOfRangeError("end of input"));
  EXPECT_TRUE(coordinator.ShouldStop());
  EXPECT_TRUE(coordinator.error().ok());
}

TEST(ThreadCoordinator, CancelledAfterAStopIsNotAnError) {
  ThreadCoordinator coordinator;
  coordinator.RequestStop();
  coordinator.RequestStop(absl::CancelledError("queue closed by the stop"));
  EXPECT_TRUE(coordinator.error().ok());
}

TEST(ThreadCoordinator, FailingThreadStopsTheOthersAndJoinReturnsItsError) {
  ThreadCoordinator coordinator;
  for (int i = 0; i < 3; ++i) {
    coordinator.Launch("looper", [&] { return RunUntilStopped(coordinator); });
  }
  coordinator.Launch("reader", [] {
    return absl::NotFoundError("data/part-3.txt: no such file");
  });
  absl::Status status = coordinator.Join();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("data/part-3.txt"));
  EXPECT_TRUE(coordinator.ShouldStop());
}

TEST(ThreadCoordinator, JoinReturnsOkWhenAllThreadsFinishCleanly) {
  ThreadCoordinator coordinator;
  std::atomic<int> ran{0};
  for (int i = 0; i < 4; ++i) {
    coordinator.Launch("worker", [&] {
      ran.fetch_add(1);
      return absl::OkStatus();
    });
  }
  EXPECT_TRUE(coordinator.Join().ok());
  EXPECT_EQ(ran.load(), 4);
  EXPECT_FALSE(coordinator.ShouldStop());
}

// What `top -H` and perf show: "sq:" and the stage, cut to Linux's 15 bytes.
TEST(ThreadCoordinator, ThreadsCarryTheirStageName) {
  ThreadCoordinator coordinator;
  std::string short_name, long_name;
  auto name_of_this_thread = [](std::string* out) {
    char buf[64] = {};
    if (pthread_getname_np(pthread_self(), buf, sizeof buf) != 0) {
      return absl::InternalError("pthread_getname_np");
    }
    *out = buf;
    return absl::OkStatus();
  };
  coordinator.Launch("prefetch", [&] { return name_of_this_thread(&short_name); });
  coordinator.Launch("parse_example-with-a-long-name",
                     [&] { return name_of_this_thread(&long_name); });
  ASSERT_TRUE(coordinator.Join().ok());
  EXPECT_EQ(short_name, "sq:prefetch");
  EXPECT_EQ(long_name, "sq:parse_exampl");
}

TEST(ThreadCoordinator, JoinTimesOutNamingThreadsStillRunning) {
  ThreadCoordinator coordinator;
  absl::Notification release;
  coordinator.Launch("stuck reader", [&] {
    release.WaitForNotification();
    return absl::OkStatus();
  });
  absl::Status status = coordinator.Join(kShort);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(status.message(), HasSubstr("stuck reader"));

  release.Notify();
  EXPECT_TRUE(coordinator.Join().ok());
}

TEST(ThreadCoordinator, StopCallbacksRunOnceOnTheFirstStop) {
  ThreadCoordinator coordinator;
  int runs = 0;
  coordinator.AddStopCallback([&] { ++runs; });
  EXPECT_EQ(runs, 0);
  coordinator.RequestStop();
  coordinator.RequestStop(absl::InternalError("again"));
  EXPECT_EQ(runs, 1);
}

TEST(ThreadCoordinator, StopCallbackAddedAfterAStopRunsRightAway) {
  ThreadCoordinator coordinator;
  coordinator.RequestStop();
  int runs = 0;
  ThreadCoordinator::StopCallbackId id =
      coordinator.AddStopCallback([&] { ++runs; });
  EXPECT_EQ(runs, 1);
  coordinator.RemoveStopCallback(id);  // a no-op now
}

TEST(ThreadCoordinator, RemovedStopCallbackNeverRuns) {
  ThreadCoordinator coordinator;
  int runs = 0;
  ThreadCoordinator::StopCallbackId id =
      coordinator.AddStopCallback([&] { ++runs; });
  coordinator.RemoveStopCallback(id);
  coordinator.RequestStop();
  EXPECT_EQ(runs, 0);
}

TEST(ThreadCoordinator, RemoveStopCallbackWaitsForARunningCallback) {
  ThreadCoordinator coordinator;
  absl::Notification started, release;
  std::atomic<bool> finished{false};
  ThreadCoordinator::StopCallbackId id = coordinator.AddStopCallback([&] {
    started.Notify();
    release.WaitForNotification();
    finished.store(true);
  });
  std::thread stopper([&] { coordinator.RequestStop(); });
  started.WaitForNotification();
  bool finished_when_removed = false;
  std::thread remover([&] {
    coordinator.RemoveStopCallback(id);
    finished_when_removed = finished.load();
  });
  release.Notify();
  remover.join();
  stopper.join();
  EXPECT_TRUE(finished_when_removed);
}

TEST(ThreadCoordinator, DestructorStopsAndJoinsThreads) {
  std::atomic<bool> exited{false};
  {
    ThreadCoordinator coordinator;
    coordinator.Launch("looper", [&] {
      coordinator.WaitForStop();
      exited.store(true);
      return absl::OkStatus();
    });
  }
  EXPECT_TRUE(exited.load());
}

}  // namespace
}  // namespace shardq::pipeline
