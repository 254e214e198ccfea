// Take-ahead (WorkQueueOptions::take_ahead) over an in-process coordinator:
// items kept ready are held beyond num_clients (which bounds the items
// read), go back at close, and one not started goes to an idle worker when
// the tail is rebalanced.
#include <atomic>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "shardq/text_line_reader.h"
#include "shardq/work_queue.h"
#include "src/client/embedded_backend.h"
#include "src/client/work_queue_backend.h"
#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

std::vector<std::string> Files(const std::string& tag, int files, int lines) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string path = absl::StrCat(testing::TempDir(), "/ahead-", tag, "-", f, ".txt");
    std::ofstream out(path);
    for (int l = 0; l < lines; ++l) out << absl::StrFormat("%s %d %04d\n", tag, f, l);
    paths.push_back(path);
  }
  return paths;
}

struct Fixture {
  Fixture() {
    auto created = CoordinatorImpl::Create(CoordinatorOptions());
    EXPECT_TRUE(created.ok());
    coordinator = *std::move(created);
    backend = BackendForCoordinator(coordinator.get());
  }
  std::unique_ptr<WorkQueue> Worker(WorkQueueOptions o, const std::string& id) {
    o.worker_id = id;
    auto q = WorkQueueFactory::Create(o, backend);
    EXPECT_TRUE(q.ok()) << q.status();
    return q.ok() ? *std::move(q) : nullptr;
  }
  std::unique_ptr<CoordinatorImpl> coordinator;
  std::shared_ptr<QueueBackend> backend;
};

WorkQueueOptions Options(const std::string& name, std::vector<std::string> works) {
  WorkQueueOptions o;
  o.name = name;
  o.works = std::move(works);
  o.seed = 5;
  return o;
}

// PeekNextItem names the item the next Take hands out (the oldest kept
// ready), without taking it; nothing when none is ready.
TEST(TakeAhead, PeekNextItemIsTheItemTheNextTakeHandsOut) {
  Fixture f;
  WorkQueueOptions o = Options("p", Files("p", 6, 2));
  o.num_clients = 3;
  o.take_ahead = 2;
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  EXPECT_FALSE(q->PeekNextItem().has_value());  // nothing taken yet
  ASSERT_TRUE(q->Take().ok());
  for (int i = 0; i < 2; ++i) {
    std::optional<WorkItem> next = q->PeekNextItem();
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(q->ready(), 2 - i);  // a peek takes nothing
    absl::StatusOr<WorkItem> taken = q->Take();
    ASSERT_TRUE(taken.ok());
    EXPECT_EQ(taken->item, next->item);
    EXPECT_EQ(taken->lease_id, next->lease_id);
  }
  EXPECT_FALSE(q->PeekNextItem().has_value());
}

TEST(TakeAhead, KeepsTakeAheadItemsReadyBeyondTheOnesItReads) {
  Fixture f;
  WorkQueueOptions o = Options("k", Files("k", 8, 4));
  o.num_clients = 3;
  o.take_ahead = 2;
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  absl::StatusOr<WorkItem> first = q->Take();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(q->ready(), 2);
  EXPECT_EQ(q->held(), 3);
  EXPECT_EQ(f.coordinator->Stats("k")->leased, 3);
  // The next two come without the coordinator: nothing more is leased.
  ASSERT_TRUE(q->Take().ok());
  ASSERT_TRUE(q->Take().ok());
  EXPECT_EQ(q->ready(), 0);
  EXPECT_EQ(f.coordinator->Stats("k")->leased, 3);
  // Reading num_clients items: no more.
  absl::Status refused = q->Take().status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("the limit (num_clients=3)"), std::string::npos) << refused;
  // A completion refills the items kept ready, beyond num_clients, for
  // the take that follows it.
  ASSERT_TRUE(q->Complete(*first).ok());
  EXPECT_EQ(q->ready(), 3);
  EXPECT_EQ(q->held(), 5);
  EXPECT_EQ(f.coordinator->Stats("k")->leased, 5);
  ASSERT_TRUE(q->Take().ok());
  EXPECT_EQ(q->ready(), 2);
}

TEST(TakeAhead, TheDefaultsKeepOneReadyBesideTheOneRead) {
  Fixture f;
  WorkQueueOptions o = Options("d", Files("d", 8, 4));
  ASSERT_EQ(o.num_clients, 1);
  ASSERT_EQ(o.take_ahead, 1);
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  absl::StatusOr<WorkItem> item = q->Take();
  ASSERT_TRUE(item.ok());
  EXPECT_EQ(q->held(), 2);
  EXPECT_EQ(q->ready(), 1);
  EXPECT_EQ(f.coordinator->Stats("d")->leased, 2);
  // One item read at a time (num_clients=1), whatever is kept ready.
  EXPECT_EQ(q->Take().status().code(), absl::StatusCode::kFailedPrecondition);
  // The completion and the refill travel together: the next item is ready.
  ASSERT_TRUE(q->Complete(*item).ok());
  EXPECT_EQ(q->ready(), 2);
  EXPECT_EQ(f.coordinator->Stats("d")->leased, 2);
  ASSERT_TRUE(q->Take().ok());
  EXPECT_EQ(q->ready(), 1);
  EXPECT_EQ(f.coordinator->Stats("d")->leased, 2);
}

TEST(TakeAhead, AWorkerWithoutTakeAheadHoldsNumClientsAtMost) {
  // The coordinator's own limit, for a take that keeps nothing ready (an
  // older client's too).
  Fixture f;
  WorkQueueOptions o = Options("n", Files("n", 8, 4));
  o.num_clients = 2;
  o.take_ahead = 0;
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  ASSERT_TRUE(q->Take().ok());
  ASSERT_TRUE(q->Take().ok());
  EXPECT_EQ(q->held(), 2);
  absl::StatusOr<std::vector<WorkItem>> more = f.backend->Take("n", "w", 1, absl::Now());
  EXPECT_EQ(more.status().code(), absl::StatusCode::kFailedPrecondition) << more.status();
  // Asking with an allowance gets one more lease per item kept ready.
  more = f.backend->Take("n", "w", 5, absl::Now(), /*ahead=*/1);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(more->size(), 1u);
}

TEST(TakeAhead, ALoneReadyItemOfAnIdleHolderGoesToAWorkerThatAsks) {
  // a keeps one item ready and reads nothing (its reader is done or slow
  // to ask); with nothing pending, b's take gets that item whole.
  Fixture f;
  WorkQueueOptions o = Options("lone", Files("lone", 2, 4));
  o.num_slices = 2;
  o.heartbeat_interval = absl::Milliseconds(20);
  std::unique_ptr<WorkQueue> a = f.Worker(o, "a");
  std::unique_ptr<WorkQueue> b = f.Worker(o, "b");
  absl::StatusOr<WorkItem> first = a->Take();
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(a->ready(), 1);
  ASSERT_TRUE(a->Complete(*first).ok());
  ASSERT_EQ(a->held(), 1);  // the ready one, alone
  // Generous bound; it comes as soon as a answers the proposal.
  absl::StatusOr<WorkItem> got = b->Take(absl::Seconds(60));
  ASSERT_TRUE(got.ok()) << got.status();
  // a forgets the lease once its release is answered (b may be woken by
  // that release first): wait for it, under a generous bound.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (a->held() != 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(a->held(), 0);
  ASSERT_TRUE(b->Complete(*got).ok());
  EXPECT_TRUE(f.coordinator->Stats("lone")->finished);
}

TEST(TakeAhead, ZeroTakesEachItemWhenAskedFor) {
  Fixture f;
  WorkQueueOptions o = Options("zero", Files("zero", 4, 4));
  o.num_clients = 4;
  o.take_ahead = 0;
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  absl::StatusOr<WorkItem> item = q->Take();
  ASSERT_TRUE(item.ok());
  ASSERT_TRUE(q->Complete(*item).ok());
  EXPECT_EQ(q->held(), 0);
  EXPECT_EQ(f.coordinator->Stats("zero")->leased, 0);
}

TEST(TakeAhead, ReadyItemsAreReleasedWhenTheQueueCloses) {
  Fixture f;
  WorkQueueOptions o = Options("close", Files("close", 6, 4));
  o.num_clients = 4;
  o.take_ahead = 3;
  {
    std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
    absl::StatusOr<WorkItem> item = q->Take();
    ASSERT_TRUE(item.ok());
    ASSERT_TRUE(q->Complete(*item).ok());
    // Three kept ready, plus the one for the take that usually follows a
    // completion.
    EXPECT_EQ(q->ready(), 4);
  }
  absl::StatusOr<QueueStats> stats = f.coordinator->Stats("close");
  EXPECT_EQ(stats->leased, 0);
  EXPECT_EQ(stats->completed, 1);
  EXPECT_EQ(stats->pending, 5);
}

TEST(TakeAhead, WorkersWithTakeAheadReadEveryLineOnce) {
  Fixture f;
  WorkQueueOptions o = Options("once", Files("once", 6, 50));
  o.num_slices = 30;
  o.num_clients = 3;
  o.take_ahead = 2;
  o.num_epochs = 2;
  std::mutex mu;
  std::map<std::string, int> lines;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<WorkQueue> q = f.Worker(o, absl::StrCat("w", t));
      ASSERT_NE(q, nullptr);
      TextLineReader reader;
      while (true) {
        absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(*q, 7);
        if (absl::IsOutOfRange(batch.status())) break;
        ASSERT_TRUE(batch.ok()) << batch.status();
        std::lock_guard<std::mutex> lock(mu);
        for (const Record& r : *batch) ++lines[r.value];
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(lines.size(), 300u);
  for (const auto& [line, n] : lines) EXPECT_EQ(n, 2) << line;
  EXPECT_EQ(f.coordinator->Stats("once")->duplicates, 0);
}

TEST(TakeAhead, UnstartedReadyItemGoesToAnIdleWorker) {
  Fixture f;
  WorkQueueOptions o = Options("idle", Files("idle", 1, 400));
  o.num_slices = 2;
  o.shuffle = false;
  o.num_clients = 2;
  o.take_ahead = 1;
  o.heartbeat_interval = absl::Milliseconds(20);
  std::unique_ptr<WorkQueue> a = f.Worker(o, "a");
  std::unique_ptr<WorkQueue> b = f.Worker(o, "b");
  absl::StatusOr<WorkItem> reading = a->Take();
  ASSERT_TRUE(reading.ok());
  ASSERT_EQ(a->ready(), 1);
  // Nothing is pending: b's take gets a's ready item back (generous bound;
  // it comes as soon as a answers the proposal).
  absl::StatusOr<WorkItem> got = b->Take(absl::Seconds(60));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(a->ready(), 0);
  ASSERT_TRUE(got->spec.has_value() && reading->spec.has_value());
  EXPECT_NE(got->spec->start, reading->spec->start);
  // Both finish; nothing is left over.
  ASSERT_TRUE(b->Complete(*got).ok());
  ASSERT_TRUE(a->Complete(*reading).ok());
  EXPECT_TRUE(f.coordinator->Stats("idle")->finished);
}


// EndTakesIf (a DataLoader worker ending its pass): decided with no take
// on its way and nothing held, so nothing is ever given back.
TEST(EndTakes, NotWhileALeaseIsHeldOrTakenAhead) {
  Fixture f;
  WorkQueueOptions o = Options("held", Files("held", 4, 3));
  o.num_clients = 2;
  o.take_ahead = 1;
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  absl::StatusOr<WorkItem> item = q->Take();
  ASSERT_TRUE(item.ok());
  ASSERT_EQ(q->ready(), 1);
  int asked = 0;
  auto over = [&]() -> absl::StatusOr<bool> {
    ++asked;
    return true;
  };
  EXPECT_FALSE(*q->EndTakesIf(over));
  EXPECT_EQ(asked, 0);
  // The item taken ahead alone is enough to go on.
  q->ReleaseReady();
  ASSERT_EQ(q->held(), 1);
  EXPECT_FALSE(*q->EndTakesIf(over));
  EXPECT_EQ(asked, 0);
  ASSERT_TRUE(q->Release(*item).ok());
  ASSERT_EQ(q->held(), 0);
  EXPECT_TRUE(*q->EndTakesIf(over));
  EXPECT_EQ(asked, 1);
  // Ended for good: every take says so, and over() is not asked again.
  absl::StatusOr<WorkItem> after = q->Take();
  EXPECT_EQ(after.status().code(), absl::StatusCode::kOutOfRange) << after.status();
  EXPECT_TRUE(*q->EndTakesIf(over));
  EXPECT_EQ(asked, 1);
  QueueStats stats = *f.coordinator->Stats("held");
  EXPECT_EQ(stats.leased, 0);
  EXPECT_EQ(stats.pending, stats.num_items);
}

TEST(EndTakes, TakesGoOnWhenNotOverOrWhenOverFails) {
  Fixture f;
  std::unique_ptr<WorkQueue> q = f.Worker(Options("goon", Files("goon", 3, 2)), "w");
  EXPECT_FALSE(*q->EndTakesIf([]() -> absl::StatusOr<bool> { return false; }));
  absl::StatusOr<bool> failed =
      q->EndTakesIf([]() -> absl::StatusOr<bool> { return absl::UnavailableError("no stats"); });
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<WorkItem> item = q->Take();
    ASSERT_TRUE(item.ok()) << item.status();
    ASSERT_TRUE(q->Complete(*item).ok());
  }
  EXPECT_TRUE(f.coordinator->Stats("goon")->finished);
}

TEST(EndTakes, OverIsAskedOnlyWithNoTakeOnItsWay) {
  // A reader thread takes and completes while the main thread keeps
  // asking to end: whenever over() runs, the coordinator shows this
  // worker holding nothing (no take can be granted behind its back).
  Fixture f;
  WorkQueueOptions o = Options("race", Files("race", 40, 2));
  o.split = false;
  o.take_ahead = 0;  // else a refill keeps one ready until the last item
  std::unique_ptr<WorkQueue> q = f.Worker(o, "w");
  q->SetTakePoll(absl::Milliseconds(5));
  std::atomic<int> read{0};
  absl::Status reader_end;
  std::thread reader([&] {
    while (true) {
      absl::StatusOr<WorkItem> item = q->Take();
      if (!item.ok()) {
        reader_end = item.status();
        return;
      }
      if (absl::Status s = q->Complete(*item); !s.ok()) {
        reader_end = s;
        return;
      }
      ++read;
    }
  });
  int checks = 0;
  int violations = 0;
  bool ended = false;
  while (!ended) {
    absl::StatusOr<bool> r = q->EndTakesIf([&]() -> absl::StatusOr<bool> {
      ++checks;
      absl::StatusOr<QueueStats> stats = f.coordinator->Stats("race");
      if (!stats.ok()) return stats.status();
      auto w = stats->workers.find("w");
      if (w != stats->workers.end() && w->second.held > 0) ++violations;
      return read.load() >= 20;  // end half way through
    });
    ASSERT_TRUE(r.ok()) << r.status();
    ended = *r;
  }
  reader.join();
  EXPECT_EQ(reader_end.code(), absl::StatusCode::kOutOfRange) << reader_end;
  EXPECT_GT(checks, 0);
  EXPECT_EQ(violations, 0);
  QueueStats stats = *f.coordinator->Stats("race");
  EXPECT_EQ(stats.leased, 0);
  EXPECT_EQ(stats.released, 0);
  EXPECT_EQ(stats.given_back, 0);
  EXPECT_EQ(stats.completed + stats.pending, stats.num_items);
  EXPECT_EQ(stats.completed, read.load());
}

}  // namespace
}  // namespace shardq
