#include "shardq/work_queue.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/input_producer.h"
#include "shardq/splittable_range.h"
#include "shardq/text_line_reader.h"
#include "src/client/embedded_backend.h"
#include "src/client/work_queue_backend.h"
#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

std::vector<std::string> MakeFiles(const std::string& tag, int files, int lines) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string path = absl::StrCat(testing::TempDir(), "/", tag, "-", f, ".txt");
    std::ofstream out(path);
    for (int l = 0; l < lines; ++l) out << tag << " " << f << " " << l << "\n";
    paths.push_back(path);
  }
  return paths;
}

WorkQueueOptions Options(const std::string& name, std::vector<std::string> works) {
  WorkQueueOptions o;
  o.name = name;
  o.works = std::move(works);
  o.seed = 11;
  return o;
}

TEST(WorkQueue, BadOptionsAreNamed) {
  WorkQueueOptions o = Options("bad", {});
  absl::Status s = WorkQueue::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("works"), std::string::npos);
  o = Options("bad", MakeFiles("bad", 1, 3));
  o.num_epochs = 0;
  s = WorkQueue::Create(o).status();
  EXPECT_NE(s.message().find("num_epochs"), std::string::npos);
  o.num_epochs = 1;
  o.num_slices = 0;
  s = WorkQueue::Create(o).status();
  EXPECT_NE(s.message().find("num_slices"), std::string::npos);
  o.num_slices.reset();
  o.works.push_back("/missing/shardq/x.txt");
  s = WorkQueue::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/missing/shardq/x.txt"), std::string::npos);
}

TEST(WorkQueue, WorkersNamingTheSameQueueShareIt) {
  std::vector<std::string> files = MakeFiles("share", 4, 10);
  auto a = WorkQueue::Create(Options("share", files));
  auto b = WorkQueue::Create(Options("share", files));
  ASSERT_TRUE(a.ok() && b.ok());
  std::set<int64_t> seen;
  for (int i = 0; i < 2; ++i) {
    for (auto* q : {a->get(), b->get()}) {
      absl::StatusOr<WorkItem> item = q->Take();
      ASSERT_TRUE(item.ok());
      EXPECT_TRUE(seen.insert(item->index).second);
      ASSERT_TRUE(q->Complete(*item).ok());
    }
  }
  EXPECT_TRUE(absl::IsOutOfRange((*a)->Take().status()));
  EXPECT_EQ((*a)->Stats()->workers.size(), 2u);
}

TEST(WorkQueue, CloseGivesBackEverythingHeldAndEndsTakes) {
  std::vector<std::string> files = MakeFiles("close", 2, 40);
  WorkQueueOptions o = Options("close", files);
  o.num_slices = 4;
  o.num_clients = 4;
  auto q = WorkQueue::Create(o);
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<WorkItem> taken = (*q)->Take();
  ASSERT_TRUE(taken.ok()) << taken.status();
  // A reader in another item, part of it returned.
  TextLineReader reader;
  absl::StatusOr<std::vector<Record>> got = reader.ReadUpTo(**q, 5);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 5u);
  ASSERT_GE((*q)->Stats()->leased, 2);
  (*q)->Close();
  (*q)->Close();  // idempotent
  EXPECT_EQ((*q)->held(), 0);
  absl::StatusOr<QueueStats> stats = (*q)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->leased, 0);
  // The reader's item was split after its 5 records: those are completed.
  EXPECT_EQ(stats->records, 5);
  absl::Status s = (*q)->Take().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("closed"), std::string::npos) << s;
  // The reader's item went back: it returns none of its records any more.
  s = reader.ReadUpTo(**q, 5).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ((*q)->records_read_again(), 0);
}

TEST(WorkQueue, DifferentConfigUnderTheSameNameFails) {
  std::vector<std::string> files = MakeFiles("cfg", 2, 5);
  auto a = WorkQueue::Create(Options("cfg", files));
  ASSERT_TRUE(a.ok());
  WorkQueueOptions o = Options("cfg", files);
  o.num_epochs = 3;
  absl::Status s = WorkQueue::Create(o).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("num_epochs"), std::string::npos);
}

TEST(WorkQueue, UnsetSeedIsDrawnAndReported) {
  WorkQueueOptions o = Options("seedless", MakeFiles("seedless", 2, 5));
  o.seed.reset();
  auto a = WorkQueue::Create(o);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->Stats()->seed, (*a)->seed());
}

TEST(WorkQueue, TakeTimesOutWhileOthersHoldEverything) {
  auto a = WorkQueue::Create(Options("timeout", MakeFiles("timeout", 1, 5)));
  auto b = WorkQueue::Create(Options("timeout", MakeFiles("timeout", 1, 5)));
  ASSERT_TRUE((*a)->Take().ok());
  EXPECT_EQ((*b)->Take(absl::Milliseconds(30)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(WorkQueue, DestroyingAWorkerReleasesItsItems) {
  std::vector<std::string> files = MakeFiles("destroy", 1, 5);
  auto b = WorkQueue::Create(Options("destroy", files));
  {
    auto a = WorkQueue::Create(Options("destroy", files));
    ASSERT_TRUE((*a)->Take().ok());
  }
  absl::StatusOr<WorkItem> item = (*b)->Take(absl::Seconds(5));
  ASSERT_TRUE(item.ok()) << item.status();
}

TEST(WorkQueue, InputDatasetCompletesEachItemWhenTheNextIsRequested) {
  auto q = WorkQueue::Create(Options("dataset", MakeFiles("dataset", 3, 2)));
  std::unique_ptr<ItemStream> items = (*q)->InputDataset();
  ASSERT_TRUE(items->Next().ok());
  EXPECT_EQ((*q)->Stats()->completed, 0);
  ASSERT_TRUE(items->Next().ok());
  EXPECT_EQ((*q)->Stats()->completed, 1);
  ASSERT_TRUE(items->Next().ok());
  EXPECT_TRUE(absl::IsOutOfRange(items->Next().status()));
  EXPECT_EQ((*q)->Stats()->completed, 3);
}

TEST(WorkQueue, EightReaderThreadsOverThreeEpochsReadEveryLineOncePerEpoch) {
  std::vector<std::string> files = MakeFiles("eight", 6, 100);
  std::mutex mu;
  std::map<std::string, int> lines;  // value -> times read
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      WorkQueueOptions o = Options("eight", files);
      o.num_epochs = 3;
      o.num_slices = 40;
      o.num_clients = 2;
      o.worker_id = absl::StrCat("t", t);
      auto q = WorkQueue::Create(o);
      ASSERT_TRUE(q.ok()) << q.status();
      std::unique_ptr<InputProducer> producer = (*q)->MakeInputProducer();
      TextLineReader reader;
      while (true) {
        absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(*producer, 9);
        if (absl::IsOutOfRange(batch.status())) break;
        ASSERT_TRUE(batch.ok()) << batch.status();
        std::lock_guard<std::mutex> lock(mu);
        for (const Record& r : *batch) ++lines[r.value];
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(lines.size(), 600u);
  for (const auto& [line, n] : lines) EXPECT_EQ(n, 3) << line;
  auto q = WorkQueue::Create([&] {
    WorkQueueOptions o = Options("eight", files);
    o.num_epochs = 3;
    o.num_slices = 40;
    o.num_clients = 2;
    return o;
  }());
  absl::StatusOr<QueueStats> stats = (*q)->Stats();
  EXPECT_EQ(stats->completed, 120);
  EXPECT_EQ(stats->duplicates, 0);
  EXPECT_EQ(stats->pending + stats->leased, 0);
}

TEST(WorkQueue, ShortLeasesOfALiveWorkerAreKeptByHeartbeats) {
  WorkQueueOptions o = Options("heartbeat", MakeFiles("heartbeat", 1, 5));
  o.lease_timeout = absl::Milliseconds(150);
  auto a = WorkQueue::Create(o);
  auto b = WorkQueue::Create(o);
  absl::StatusOr<WorkItem> item = (*a)->Take();
  ASSERT_TRUE(item.ok());
  // Several lease periods pass; heartbeats keep the item with `a`.
  EXPECT_EQ((*b)->Take(absl::Milliseconds(600)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*a)->Stats()->expired, 0);
  ASSERT_TRUE((*a)->Complete(*item).ok());
}

TEST(WorkQueue, ItemOfADeadWorkerGoesToASurvivorAfterTheLease) {
  // A worker that stops heartbeating: simulated by a backend call that takes
  // without a WorkQueue (so nothing renews the lease).
  WorkQueueOptions o = Options("dead", MakeFiles("dead", 1, 5));
  o.lease_timeout = absl::Milliseconds(100);
  auto survivor = WorkQueue::Create(o);
  ASSERT_TRUE(survivor.ok());
  absl::StatusOr<std::vector<WorkItem>> taken =
      EmbeddedBackend()->Take("dead", "ghost", 1, absl::Now());
  ASSERT_EQ(taken->size(), 1u);
  absl::StatusOr<WorkItem> item = (*survivor)->Take(absl::Seconds(10));
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(item->index, (*taken)[0].index);
  ASSERT_TRUE((*survivor)->Complete(*item).ok());
  EXPECT_TRUE(absl::IsOutOfRange((*survivor)->Take().status()));
  EXPECT_EQ((*survivor)->Stats()->expired, 1);
}

// A backend whose coordinator can be swapped, as a remote client's address
// reaches whichever coordinator process listens there after a restart, and
// whose takes can be held on their way (a slow coordinator).
class RestartableBackend final : public QueueBackend {
 public:
  void PointAt(CoordinatorImpl* coordinator) {
    absl::MutexLock lock(&mu_);
    target_ = BackendForCoordinator(coordinator);
  }
  // While held, a take waits before it reaches the coordinator.
  void HoldTakes(bool held) {
    absl::MutexLock lock(&mu_);
    takes_held_ = held;
    changed_.SignalAll();
  }
  // Waits (generous bound) until `n` takes have been sent in all.
  bool AwaitTakesSent(int64_t n) {
    absl::MutexLock lock(&mu_);
    const absl::Time bound = absl::Now() + absl::Seconds(60);
    while (takes_sent_ < n) {
      if (changed_.WaitWithDeadline(&mu_, bound)) return takes_sent_ >= n;
    }
    return true;
  }
  // Whether this backend says it is remote (QueueBackend::Remote).
  void SetRemote(bool remote) { remote_.store(remote); }
  bool Remote() const override { return remote_.load(); }
  // While held, a release or a split answer waits before it reaches the
  // coordinator (a coordinator that does not answer).
  void HoldGiveBacks(bool held) {
    absl::MutexLock lock(&mu_);
    give_backs_held_ = held;
    changed_.SignalAll();
  }
  // Waits (generous bound) until `n` releases or split answers were sent.
  bool AwaitGiveBacksSent(int64_t n) {
    absl::MutexLock lock(&mu_);
    const absl::Time bound = absl::Now() + absl::Seconds(60);
    while (give_backs_sent_ < n) {
      if (changed_.WaitWithDeadline(&mu_, bound)) return give_backs_sent_ >= n;
    }
    return true;
  }
  absl::StatusOr<QueueInfo> CreateQueue(const QueueConfig& config) override {
    return Target()->CreateQueue(config);
  }
  absl::StatusOr<QueueInfo> GetQueue(absl::string_view queue) override {
    return Target()->GetQueue(queue);
  }
  absl::StatusOr<std::vector<WorkItem>> Take(absl::string_view queue, absl::string_view worker,
                                             int64_t max_items, absl::Time deadline,
                                             int64_t ahead) override {
    {
      absl::MutexLock lock(&mu_);
      ++takes_sent_;
      changed_.SignalAll();
      while (takes_held_) changed_.Wait(&mu_);
    }
    return Target()->Take(queue, worker, max_items, deadline, ahead);
  }
  absl::StatusOr<CompleteOutcome> Complete(absl::string_view queue, absl::string_view worker,
                                           uint64_t lease_id, int64_t records) override {
    return Target()->Complete(queue, worker, lease_id, records);
  }
  absl::Status Release(absl::string_view queue, absl::string_view worker,
                       uint64_t lease_id) override {
    WaitWhileGiveBacksHeld();
    return Target()->Release(queue, worker, lease_id);
  }
  absl::StatusOr<HeartbeatReply> Heartbeat(
      absl::string_view queue, absl::string_view worker, const std::vector<uint64_t>& lease_ids,
      const std::vector<std::pair<uint64_t, int64_t>>& progress,
      absl::Duration wait) override {
    return Target()->Heartbeat(queue, worker, lease_ids, progress, wait);
  }
  absl::StatusOr<bool> AcceptSplit(absl::string_view queue, absl::string_view worker,
                                   uint64_t lease_id, int64_t split_point) override {
    WaitWhileGiveBacksHeld();
    return Target()->AcceptSplit(queue, worker, lease_id, split_point);
  }
  absl::Status ReportProgress(absl::string_view queue, absl::string_view worker,
                              const std::vector<std::pair<uint64_t, int64_t>>& progress) override {
    return Target()->ReportProgress(queue, worker, progress);
  }
  absl::StatusOr<journal::Checkpoint> ExportCheckpoint(absl::string_view queue) override {
    return Target()->ExportCheckpoint(queue);
  }
  absl::StatusOr<QueueInfo> RestoreCheckpoint(const journal::Checkpoint& checkpoint,
                                              const std::string& name) override {
    return Target()->RestoreCheckpoint(checkpoint, name);
  }
  absl::StatusOr<QueueStats> Stats(absl::string_view queue) override {
    return Target()->Stats(queue);
  }
  absl::StatusOr<std::vector<QueueStats>> AllStats() override { return Target()->AllStats(); }

 private:
  std::shared_ptr<QueueBackend> Target() {
    absl::MutexLock lock(&mu_);
    return target_;
  }
  void WaitWhileGiveBacksHeld() {
    absl::MutexLock lock(&mu_);
    ++give_backs_sent_;
    changed_.SignalAll();
    while (give_backs_held_) changed_.Wait(&mu_);
  }
  absl::Mutex mu_;
  std::shared_ptr<QueueBackend> target_ ABSL_GUARDED_BY(mu_);
  absl::CondVar changed_;  // a hold or a count below changed
  bool takes_held_ ABSL_GUARDED_BY(mu_) = false;
  int64_t takes_sent_ ABSL_GUARDED_BY(mu_) = 0;
  bool give_backs_held_ ABSL_GUARDED_BY(mu_) = false;
  int64_t give_backs_sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> remote_{false};
};

// One file of `lines` lines of 10 characters and a newline each.
std::string FixedLinesFile(const std::string& tag, int lines) {
  std::string path = absl::StrCat(testing::TempDir(), "/", tag, ".txt");
  std::ofstream out(path);
  for (int l = 0; l < lines; ++l) out << "0123456789\n";
  return path;
}

// A worker of a queue over one FixedLinesFile in 2 slices, through a
// RestartableBackend that says it is remote, holding its first item, of
// which its reader returned the first 5 lines in order.
struct StoppedRemoteReader {
  explicit StoppedRemoteReader(const std::string& tag, int64_t take_ahead) {
    auto created = CoordinatorImpl::Create(CoordinatorOptions());
    EXPECT_TRUE(created.ok()) << created.status();
    coordinator = *std::move(created);
    backend->PointAt(coordinator.get());
    backend->SetRemote(true);
    WorkQueueOptions o = Options(tag, {FixedLinesFile(tag, 100)});
    o.num_slices = 2;
    o.num_clients = 2;
    o.take_ahead = take_ahead;
    auto made = WorkQueueFactory::Create(o, backend);
    EXPECT_TRUE(made.ok()) << made.status();
    worker = *std::move(made);
    absl::StatusOr<WorkItem> taken = worker->Take();
    EXPECT_TRUE(taken.ok()) << taken.status();
    item = *std::move(taken);
    worker->NoteReturned(item, item.range->start() + 5 * 11, 5, 5);
  }
  std::unique_ptr<CoordinatorImpl> coordinator;
  std::shared_ptr<RestartableBackend> backend = std::make_shared<RestartableBackend>();
  std::unique_ptr<WorkQueue> worker;
  WorkItem item;
};

TEST(WorkQueue, AStoppedReaderLeavesItsGiveBackToTheBackgroundWhenTheCoordinatorIsSilent) {
  // A remote coordinator that does not answer the give-back of a stopped
  // reader (a pipeline iterator destroyed): GiveBackStopped returns after
  // kGiveBackWait, the item still leased, and the background thread gives
  // back its rest once the coordinator answers.
  StoppedRemoteReader r("silent", /*take_ahead=*/0);
  ASSERT_NE(r.worker, nullptr);
  r.backend->HoldGiveBacks(true);
  r.worker->GiveBackStopped({LeaseSource::StoppedItem{r.item, true}});
  ASSERT_TRUE(r.backend->AwaitGiveBacksSent(1));
  absl::StatusOr<QueueStats> stats = r.worker->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->leased, 1);  // not answered yet
  EXPECT_EQ(stats->records, 0);
  r.backend->HoldGiveBacks(false);
  // The background thread goes on: the first 5 lines are completed, the
  // rest is back in the queue (generous bound).
  const absl::Time bound = absl::Now() + absl::Seconds(60);
  while (r.worker->held() > 0 && absl::Now() < bound) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(r.worker->held(), 0);
  stats = r.worker->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->leased, 0);
  EXPECT_EQ(stats->records, 5);
  EXPECT_EQ(stats->splits, 1);
  EXPECT_EQ(r.worker->records_read_again(), 0);
}

TEST(WorkQueue, AStoppedReadersGiveBackToAnAnsweringRemoteCoordinatorIsDoneOnReturn) {
  StoppedRemoteReader r("answering", /*take_ahead=*/1);
  ASSERT_NE(r.worker, nullptr);
  r.worker->GiveBackStopped({LeaseSource::StoppedItem{r.item, true}});
  // Done by the background thread, waited for: the split item and the one
  // taken ahead are back.
  EXPECT_EQ(r.worker->held(), 0);
  EXPECT_EQ(r.worker->ready(), 0);
  absl::StatusOr<QueueStats> stats = r.worker->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->leased, 0);
  EXPECT_EQ(stats->records, 5);
}

TEST(WorkQueue, EndTakesIfIsUndecidedWhileATakeOutlastsItsPoll) {
  // A take held on its way past its poll and the grace: EndTakesIf does
  // not wait for it (false, over() not asked); once it arrives the worker
  // reads its item.
  auto created = CoordinatorImpl::Create(CoordinatorOptions());
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<CoordinatorImpl> coordinator = *std::move(created);
  auto backend = std::make_shared<RestartableBackend>();
  backend->PointAt(coordinator.get());
  WorkQueueOptions o = Options("stall", MakeFiles("stall", 1, 3));
  o.take_ahead = 0;
  auto worker = WorkQueueFactory::Create(o, backend);
  ASSERT_TRUE(worker.ok()) << worker.status();
  (*worker)->SetTakePoll(absl::Milliseconds(10));
  backend->HoldTakes(true);
  absl::StatusOr<WorkItem> item;
  std::thread reader([&] { item = (*worker)->Take(); });
  ASSERT_TRUE(backend->AwaitTakesSent(1));
  int asked = 0;
  absl::StatusOr<bool> ended = (*worker)->EndTakesIf([&]() -> absl::StatusOr<bool> {
    ++asked;
    return true;
  });
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_FALSE(*ended);
  EXPECT_EQ(asked, 0);
  backend->HoldTakes(false);
  reader.join();
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_TRUE((*worker)->Complete(*item).ok());
  EXPECT_TRUE(coordinator->Stats("stall")->finished);
}

std::unique_ptr<CoordinatorImpl> OpenDurable(const std::string& dir) {
  CoordinatorOptions options;
  options.state_dir = dir;
  absl::StatusOr<std::unique_ptr<CoordinatorImpl>> c = CoordinatorImpl::Create(options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

// What is on disk right now, as a crash would leave it.
std::string CrashCopy(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string copy = dir + "-crashed";
  fs::remove_all(copy);
  fs::create_directories(copy);
  // COMMITTED first: a crash never leaves it ahead of the database.
  for (const char* file : {"COMMITTED", "state.db", "state.db-wal"}) {
    if (fs::exists(dir + "/" + file)) fs::copy_file(dir + "/" + file, copy + "/" + file);
  }
  return copy;
}

TEST(WorkQueue, LeaseLostInACoordinatorCrashIsCountedNotAnError) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/lost-lease-", ::getpid());
  std::filesystem::remove_all(dir);
  std::unique_ptr<CoordinatorImpl> before = OpenDurable(dir);
  ASSERT_NE(before, nullptr);
  auto backend = std::make_shared<RestartableBackend>();
  backend->PointAt(before.get());
  WorkQueueOptions o = Options("lost", MakeFiles("lost", 4, 3));
  o.num_clients = 2;
  // The counts below are of these two leases alone: no item taken ahead.
  o.take_ahead = 0;
  auto worker = WorkQueueFactory::Create(o, backend);
  ASSERT_TRUE(worker.ok()) << worker.status();
  ASSERT_TRUE(before->Flush().ok());
  const std::string crashed = CrashCopy(dir);
  // Grants are answered before they are durable: these two are not in the
  // copy, as if the coordinator crashed right after answering.
  absl::StatusOr<WorkItem> completed_later = (*worker)->Take();
  absl::StatusOr<WorkItem> released_later = (*worker)->Take();
  ASSERT_TRUE(completed_later.ok() && released_later.ok());

  std::unique_ptr<CoordinatorImpl> after = OpenDurable(crashed);
  ASSERT_NE(after, nullptr);
  backend->PointAt(after.get());
  EXPECT_TRUE((*worker)->Complete(*completed_later).ok());
  EXPECT_TRUE((*worker)->Release(*released_later).ok());
  EXPECT_EQ((*worker)->lost_leases(), 1);
  EXPECT_EQ((*worker)->held(), 0);
  absl::StatusOr<QueueStats> stats = after->Stats("lost");
  EXPECT_EQ(stats->completed, 0);
  EXPECT_EQ(stats->pending, 4);
  // The lost item is read again: the next take hands it out (new lease).
  absl::StatusOr<WorkItem> again = (*worker)->Take();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->index, completed_later->index);
  EXPECT_NE(again->lease_id, completed_later->lease_id);
  EXPECT_TRUE((*worker)->Complete(*again).ok());
  EXPECT_EQ(after->Stats("lost")->completed, 1);

  // A lease this worker never held is still the caller's error.
  WorkItem bogus = *again;
  bogus.lease_id = (uint64_t{1000} << 20) | 1;
  EXPECT_EQ((*worker)->Complete(bogus).code(), absl::StatusCode::kNotFound);
  // So is a queue that is gone altogether (a coordinator without state).
  absl::StatusOr<WorkItem> held = (*worker)->Take();
  ASSERT_TRUE(held.ok());
  CoordinatorImpl empty;
  backend->PointAt(&empty);
  EXPECT_EQ((*worker)->Complete(*held).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*worker)->lost_leases(), 1);
  backend->PointAt(after.get());
  worker->reset();  // releases `held` while `after` is alive
}

}  // namespace
}  // namespace shardq
