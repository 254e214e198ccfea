// The coordinator over a state directory: random histories recover into
// identical state, and bad state refuses to start.
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "src/core/rng.h"
#include "src/server/coordinator_impl.h"
#include "src/store/journal.h"

namespace shardq {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/durable-", name, "-", ::getpid());
  fs::remove_all(dir);
  return dir;
}

// A crash at this moment: copy what is on disk (COMMITTED, database and
// WAL) while the coordinator still runs, so nothing a clean shutdown would
// add is there. COMMITTED first: a crash never leaves it ahead of the
// database.
std::string CrashCopy(const std::string& dir, const std::string& name) {
  std::string copy = FreshDir(name);
  fs::create_directories(copy);
  for (const char* file : {"COMMITTED", "state.db", "state.db-wal"}) {
    if (fs::exists(dir + "/" + file)) fs::copy_file(dir + "/" + file, copy + "/" + file);
  }
  return copy;
}

std::unique_ptr<CoordinatorImpl> Open(const std::string& dir, Clock* clock,
                                      int64_t snapshot_every = 20000,
                                      int64_t snapshot_bytes_per_update = 256) {
  CoordinatorOptions options;
  options.clock = clock;
  options.state_dir = dir;
  options.snapshot_every = snapshot_every;
  options.snapshot_bytes_per_update = snapshot_bytes_per_update;
  absl::StatusOr<std::unique_ptr<CoordinatorImpl>> c = CoordinatorImpl::Create(options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

QueueConfig Config(const std::string& name, int64_t items, int64_t epochs, int64_t clients) {
  QueueConfig c;
  c.name = name;
  for (int64_t i = 0; i < items; ++i) c.items.push_back(absl::StrCat(name, "-item-", i));
  c.num_epochs = epochs;
  c.num_clients = clients;
  c.seed = 99;
  c.lease_timeout = absl::Seconds(10);
  return c;
}

// Drives a random history: takes, completions (some late, some by the
// wrong worker), releases, expiries.
void RandomHistory(CoordinatorImpl& c, FakeClock& clock, uint64_t seed, int steps) {
  SplitMix64 rng(seed);
  std::vector<std::pair<std::string, WorkItem>> held;
  std::vector<std::pair<std::string, WorkItem>> stale;
  const std::vector<std::string> queues = {"alpha", "beta"};
  for (int step = 0; step < steps; ++step) {
    const std::string& q = queues[rng.UniformBelow(2)];
    const std::string worker = absl::StrCat("w", rng.UniformBelow(5));
    switch (rng.UniformBelow(10)) {
      case 0: case 1: case 2: case 3: {
        auto items = c.Take(q, worker, 1 + static_cast<int64_t>(rng.UniformBelow(2)),
                            absl::InfinitePast());
        if (items.ok()) {
          for (WorkItem& item : *items) held.emplace_back(q + "|" + worker, item);
        }
        break;
      }
      case 4: case 5: case 6:
        if (!held.empty()) {
          const size_t i = rng.UniformBelow(held.size());
          const std::string key = held[i].first;
          const std::string qn = key.substr(0, key.find('|'));
          const std::string wn = key.substr(key.find('|') + 1);
          // Sometimes the wrong worker tries first (rejected, no change).
          if (rng.UniformBelow(4) == 0) c.Complete(qn, "intruder", held[i].second.lease_id).IgnoreError();
          c.Complete(qn, wn, held[i].second.lease_id).IgnoreError();
          stale.push_back(held[i]);
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 7:
        if (!held.empty()) {
          const size_t i = rng.UniformBelow(held.size());
          const std::string key = held[i].first;
          c.Release(key.substr(0, key.find('|')), key.substr(key.find('|') + 1),
                    held[i].second.lease_id).IgnoreError();
          held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      case 8:
        clock.Advance(absl::Seconds(static_cast<int64_t>(rng.UniformBelow(12))));
        c.Stats(q).IgnoreError();  // expires overdue leases
        break;
      case 9:
        if (!stale.empty()) {  // a late or repeated completion
          const auto& s = stale[rng.UniformBelow(stale.size())];
          const std::string key = s.first;
          c.Complete(key.substr(0, key.find('|')), key.substr(key.find('|') + 1),
                     s.second.lease_id).IgnoreError();
        }
        break;
    }
  }
}

constexpr uint64_t kLeaseSequenceMask = (uint64_t{1} << 20) - 1;

// `recovered` is `live` replayed from its journal: the same state, except
// that recovery skipped QueueState::kLeaseIdsSkippedAtRecovery lease ids.
void ExpectSameStateAfterRecovery(CoordinatorImpl& live, CoordinatorImpl& recovered,
                                  const std::vector<std::string>& queues = {"alpha", "beta"}) {
  for (const std::string& q : queues) {
    absl::StatusOr<journal::QueueSnapshot> sa = live.DebugSnapshot(q);
    absl::StatusOr<journal::QueueSnapshot> sb = recovered.DebugSnapshot(q);
    ASSERT_TRUE(sa.ok() && sb.ok());
    EXPECT_EQ(sb->lease_sequence(),
              (sa->lease_sequence() + QueueState::kLeaseIdsSkippedAtRecovery) %
                  kLeaseSequenceMask)
        << q;
    std::string diff;
    google::protobuf::util::MessageDifferencer differ;
    differ.IgnoreField(journal::QueueSnapshot::descriptor()->FindFieldByName("lease_sequence"));
    differ.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differ.Compare(*sa, *sb)) << q << ": " << diff;
  }
}

TEST(DurableCoordinator, RandomHistoriesRecoverIntoIdenticalState) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    FakeClock clock;
    const std::string dir = FreshDir(absl::StrCat("prop-", seed));
    // Small snapshot interval on odd seeds: recovery = snapshot + journal.
    std::unique_ptr<CoordinatorImpl> live = Open(dir, &clock, seed % 2 ? 37 : 100000);
    ASSERT_TRUE(live->CreateQueue(Config("alpha", 13, 3, 2)).ok());
    ASSERT_TRUE(live->CreateQueue(Config("beta", 5, 4, 1)).ok());
    RandomHistory(*live, clock, seed, 400);
    ASSERT_TRUE(live->Flush().ok());
    const std::string crashed = CrashCopy(dir, absl::StrCat("prop-copy-", seed));
    std::unique_ptr<CoordinatorImpl> recovered = Open(crashed, &clock);
    ASSERT_NE(recovered, nullptr);
    ExpectSameStateAfterRecovery(*live, *recovered);
    // And the futures agree: the same next hand-outs, under new lease ids.
    for (int i = 0; i < 5; ++i) {
      auto x = live->Take("alpha", "next", 1, absl::InfinitePast());
      auto y = recovered->Take("alpha", "next", 1, absl::InfinitePast());
      ASSERT_EQ(x.ok(), y.ok());
      if (!x.ok()) break;
      ASSERT_EQ(x->size(), y->size());
      for (size_t k = 0; k < x->size(); ++k) {
        EXPECT_EQ((*x)[k].epoch, (*y)[k].epoch);
        EXPECT_EQ((*x)[k].index, (*y)[k].index);
        EXPECT_EQ((*x)[k].item, (*y)[k].item);
        EXPECT_NE((*x)[k].lease_id, (*y)[k].lease_id);
        live->Complete("alpha", "next", (*x)[k].lease_id).IgnoreError();
        recovered->Complete("alpha", "next", (*y)[k].lease_id).IgnoreError();
      }
    }
  }
}

// Grants are written behind (answered before they are durable). A crash can
// lose the last ones: recover from a journal prefix that lacks them.
TEST(DurableCoordinator, GrantsLostInACrashAreNeverReissuedAndTheirItemsAreReadAgain) {
  FakeClock clock;
  const std::string dir = FreshDir("lostgrants");
  std::unique_ptr<CoordinatorImpl> live = Open(dir, &clock);
  ASSERT_TRUE(live->CreateQueue(Config("alpha", 8, 1, 2)).ok());
  const WorkItem kept = (*live->Take("alpha", "w0", 1, absl::InfinitePast()))[0];
  ASSERT_TRUE(live->Flush().ok());
  const std::string crashed = CrashCopy(dir, "lostgrants-copy");
  // Answered after the copy: the crash loses these grants.
  std::vector<WorkItem> lost = *live->Take("alpha", "w1", 2, absl::InfinitePast());
  ASSERT_EQ(lost.size(), 2u);

  std::unique_ptr<CoordinatorImpl> recovered = Open(crashed, &clock);
  ASSERT_NE(recovered, nullptr);
  EXPECT_EQ(recovered->Stats("alpha")->leased, 1);
  // The same front items are handed out again, under new ids.
  std::vector<WorkItem> again = *recovered->Take("alpha", "w2", 2, absl::InfinitePast());
  ASSERT_EQ(again.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(again[i].epoch, lost[i].epoch);
    EXPECT_EQ(again[i].index, lost[i].index);
    EXPECT_NE(again[i].lease_id, lost[i].lease_id);
  }
  // The holder of a lost grant learns that the coordinator does not know
  // it; nothing is completed.
  for (const WorkItem& item : lost) {
    EXPECT_EQ(recovered->Complete("alpha", "w1", item.lease_id).status().code(),
              absl::StatusCode::kNotFound);
    EXPECT_TRUE(recovered->Heartbeat("alpha", "w1", {item.lease_id}).ok());
  }
  absl::StatusOr<QueueStats> stats = recovered->Stats("alpha");
  EXPECT_EQ(stats->completed, 0);
  EXPECT_EQ(stats->duplicates, 0);
  EXPECT_EQ(stats->leased, 3);
  EXPECT_EQ(stats->workers.count("w1"), 0u);
  // The new holders and the surviving one complete normally; w1's lost
  // grant stays unknown once someone else completed its item: refused, not
  // counted as a duplicate (issue 15 item 7), but counted as refused.
  EXPECT_EQ(*recovered->Complete("alpha", "w0", kept.lease_id), CompleteOutcome::kCompleted);
  for (const WorkItem& item : again) {
    EXPECT_EQ(*recovered->Complete("alpha", "w2", item.lease_id), CompleteOutcome::kCompleted);
  }
  EXPECT_EQ(recovered->Complete("alpha", "w1", lost[0].lease_id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(recovered->Stats("alpha")->completed, 3);
  EXPECT_EQ(recovered->Stats("alpha")->duplicates, 0);
  EXPECT_EQ(recovered->Stats("alpha")->refused_completions, 3);

  // The skipped ids are journaled through the grants that use them: a
  // second recovery (replaying that journal) continues after them.
  ASSERT_TRUE(recovered->Flush().ok());
  const std::string crashed_again = CrashCopy(crashed, "lostgrants-copy2");
  std::unique_ptr<CoordinatorImpl> second = Open(crashed_again, &clock);
  ASSERT_NE(second, nullptr);
  const WorkItem next = (*second->Take("alpha", "w3", 1, absl::InfinitePast()))[0];
  EXPECT_EQ(next.lease_id & kLeaseSequenceMask,
            (again[1].lease_id & kLeaseSequenceMask) +
                QueueState::kLeaseIdsSkippedAtRecovery + 1);
}

// The updates a recovery of `dir` would replay after the queues' snapshots
// (read from a copy, so `dir` is untouched).
int64_t UpdatesAfterSnapshots(const std::string& dir, const std::string& name) {
  const std::string copy = CrashCopy(dir, name);
  RecoveredState state;
  absl::StatusOr<std::unique_ptr<Journal>> journal = Journal::Open(copy, &state);
  EXPECT_TRUE(journal.ok()) << journal.status();
  int64_t updates = 0;
  for (const RecoveredState::Queue& q : state.queues) {
    EXPECT_NE(q.snapshot, nullptr) << q.name;
    updates += static_cast<int64_t>(q.updates.size());
  }
  return updates;
}

// A snapshot is due after snapshot_every updates, and, once the queue has
// one, not before there is one update per snapshot_bytes_per_update bytes
// of it: a large queue is not rewritten every few thousand completions.
TEST(DurableCoordinator, ALargeSnapshotWaitsForProportionallyManyUpdates) {
  for (const int64_t bytes_per_update : {int64_t{1}, int64_t{1} << 40}) {
    SCOPED_TRACE(absl::StrCat("snapshot_bytes_per_update ", bytes_per_update));
    FakeClock clock;
    const std::string dir = FreshDir(absl::StrCat("snapsize-", bytes_per_update));
    std::unique_ptr<CoordinatorImpl> c = Open(dir, &clock, 10, bytes_per_update);
    ASSERT_TRUE(c->CreateQueue(Config("big", 300, 1, 1)).ok());
    for (int i = 0; i < 100; ++i) {  // 200 updates
      auto taken = c->Take("big", "w", 1, absl::InfinitePast());
      ASSERT_TRUE(taken.ok() && taken->size() == 1);
      ASSERT_TRUE(c->Complete("big", "w", (*taken)[0].lease_id).ok());
    }
    ASSERT_TRUE(c->Flush().ok());
    const int64_t replayed =
        UpdatesAfterSnapshots(dir, absl::StrCat("snapsize-copy-", bytes_per_update));
    if (bytes_per_update == 1) {
      // The first snapshot came after 10 updates (there was none to weigh);
      // the next needs one update per byte of a snapshot of 300 item names.
      EXPECT_GE(replayed, 185);
    } else {
      EXPECT_LT(replayed, 10);  // every 10 updates
    }
    // Either way the recovered queue is the live one.
    std::unique_ptr<CoordinatorImpl> recovered = Open(CrashCopy(dir, "snapsize-rec"), &clock);
    ASSERT_NE(recovered, nullptr);
    EXPECT_EQ(recovered->recovery().queues, 1);
    EXPECT_EQ(recovered->recovery().updates_replayed, replayed);
    ExpectSameStateAfterRecovery(*c, *recovered, {"big"});
  }
}

// While alive, no file of this process may grow past `bytes` (writes past
// it fail with EFBIG instead of raising SIGXFSZ): a disk that fills up.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit limit = old_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_;
  sighandler_t old_handler_;
};

// The disk fills up under a running coordinator: the completion whose
// commit failed is answered with an error, never as done; every later
// change is refused with the same clear error (a failed write is not
// retried); and a restart recovers exactly what was acknowledged.
TEST(DurableCoordinator, AFailedWriteIsNeverAcknowledgedAndARestartKeepsWhatWas) {
  FakeClock clock;
  const std::string dir = FreshDir("full");
  WorkItem refused;
  {
    std::unique_ptr<CoordinatorImpl> c = Open(dir, &clock);
    ASSERT_TRUE(c->CreateQueue(Config("alpha", 20, 1, 1)).ok());
    for (int i = 0; i < 3; ++i) {
      auto taken = c->Take("alpha", "w", 1, absl::InfinitePast());
      ASSERT_TRUE(taken.ok() && taken->size() == 1);
      ASSERT_TRUE(c->Complete("alpha", "w", (*taken)[0].lease_id).ok());
    }
    auto taken = c->Take("alpha", "w", 1, absl::InfinitePast());
    ASSERT_TRUE(taken.ok() && taken->size() == 1);
    refused = (*taken)[0];
    ASSERT_TRUE(c->Flush().ok());  // its grant is stored; its completion will not be
    {
      // Commits append to the WAL (it only grows this early in its life,
      // and the database file is written only by checkpoints), so the next
      // commit needs more room than the WAL has now.
      FileSizeLimit full(fs::file_size(dir + "/state.db-wal"));
      absl::StatusOr<CompleteOutcome> outcome = c->Complete("alpha", "w", refused.lease_id);
      ASSERT_FALSE(outcome.ok());
      // UNAVAILABLE: a client retries it until a restarted coordinator answers.
      EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable);
      EXPECT_NE(outcome.status().message().find("cannot store state"), std::string::npos)
          << outcome.status();
      EXPECT_NE(outcome.status().message().find(dir), std::string::npos) << outcome.status();
      // Sticky: the journal is not trusted again until a restart.
      absl::StatusOr<CompleteOutcome> again = c->Complete("alpha", "w", refused.lease_id);
      EXPECT_FALSE(again.ok());
      absl::StatusOr<std::vector<WorkItem>> take = c->Take("alpha", "w", 1, absl::InfinitePast());
      EXPECT_FALSE(take.ok());
      if (!take.ok()) {
        EXPECT_NE(take.status().message().find("cannot store state"), std::string::npos)
            << take.status();
      }
      EXPECT_FALSE(c->Writable().ok());
      EXPECT_TRUE(c->Stats("alpha").ok());  // reads still work
    }
  }  // the clean close cannot snapshot either; it must not make things up
  std::unique_ptr<CoordinatorImpl> restarted = Open(dir, &clock);
  ASSERT_NE(restarted, nullptr);
  absl::StatusOr<QueueStats> stats = restarted->Stats("alpha");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->completed, 3);
  // The refused completion's item is still to be done: its lease survived
  // (its grant was stored before the disk filled up) and its holder may
  // complete it now.
  absl::StatusOr<CompleteOutcome> retry = restarted->Complete("alpha", "w", refused.lease_id);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ(*retry, CompleteOutcome::kCompleted);
  EXPECT_EQ(restarted->Stats("alpha")->completed, 4);
}

TEST(DurableCoordinator, CompleteAsyncAnswersOnlyWhatACrashKeeps) {
  FakeClock clock;
  const std::string dir = FreshDir("async");
  std::unique_ptr<CoordinatorImpl> live = Open(dir, &clock);
  ASSERT_TRUE(live->CreateQueue(Config("alpha", 6, 1, 6)).ok());
  std::vector<WorkItem> items = *live->Take("alpha", "w0", 6, absl::InfinitePast());
  ASSERT_EQ(items.size(), 6u);
  // A crash at the moment each answer is given: the copy must already hold
  // that completion.
  for (size_t i = 0; i < items.size(); ++i) {
    std::string copy;
    absl::StatusOr<CompleteOutcome> answer;
    absl::Notification answered;
    live->CompleteAsync("alpha", "w0", items[i].lease_id,
                        [&](absl::StatusOr<CompleteOutcome> outcome) {
                          copy = CrashCopy(dir, absl::StrCat("async-copy-", i));
                          answer = std::move(outcome);
                          answered.Notify();
                        });
    answered.WaitForNotification();
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(*answer, CompleteOutcome::kCompleted);
    std::unique_ptr<CoordinatorImpl> recovered = Open(copy, &clock);
    ASSERT_NE(recovered, nullptr);
    EXPECT_EQ(recovered->Stats("alpha")->completed, static_cast<int64_t>(i + 1));
  }
  // The same answers as Complete: a duplicate, an unknown lease, an unknown
  // queue (answered at once).
  auto complete = [&](const std::string& queue, uint64_t lease) {
    absl::StatusOr<CompleteOutcome> answer;
    absl::Notification answered;
    live->CompleteAsync(queue, "w0", lease, [&](absl::StatusOr<CompleteOutcome> outcome) {
      answer = std::move(outcome);
      answered.Notify();
    });
    answered.WaitForNotification();
    return answer;
  };
  EXPECT_EQ(*complete("alpha", items[0].lease_id), CompleteOutcome::kDuplicate);
  EXPECT_EQ(complete("alpha", 987654321).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(complete("nope", items[0].lease_id).status().code(), absl::StatusCode::kNotFound);
}

TEST(DurableCoordinator, LeasesSurviveARestartAndCanBeCompletedAfterwards) {
  FakeClock clock;
  const std::string dir = FreshDir("leases");
  WorkItem item;
  {
    std::unique_ptr<CoordinatorImpl> c = Open(dir, &clock);
    ASSERT_TRUE(c->CreateQueue(Config("alpha", 3, 1, 1)).ok());
    item = (*c->Take("alpha", "w", 1, absl::InfinitePast()))[0];
  }
  clock.Advance(absl::Seconds(60));  // the outage is longer than the lease
  std::unique_ptr<CoordinatorImpl> c = Open(dir, &clock);
  // A fresh lease period starts at recovery: the holder heartbeats in time.
  clock.Advance(absl::Seconds(5));
  EXPECT_TRUE(c->Heartbeat("alpha", "w", {item.lease_id})->lost.empty());
  EXPECT_EQ(*c->Complete("alpha", "w", item.lease_id), CompleteOutcome::kCompleted);
  EXPECT_EQ(c->Stats("alpha")->expired, 0);
}

TEST(DurableCoordinator, LeaseOfAWorkerThatNeverReturnsExpiresAfterRecovery) {
  FakeClock clock;
  const std::string dir = FreshDir("dead");
  {
    std::unique_ptr<CoordinatorImpl> c = Open(dir, &clock);
    ASSERT_TRUE(c->CreateQueue(Config("alpha", 1, 1, 1)).ok());
    ASSERT_EQ(c->Take("alpha", "dead", 1, absl::InfinitePast())->size(), 1u);
  }
  std::unique_ptr<CoordinatorImpl> c = Open(dir, &clock);
  EXPECT_TRUE(c->Take("alpha", "alive", 1, absl::InfinitePast())->empty());
  clock.Advance(absl::Seconds(11));
  EXPECT_EQ(c->Take("alpha", "alive", 1, absl::InfinitePast())->size(), 1u);
}

TEST(DurableCoordinator, CorruptJournalEntryRefusesToStartAndNamesIt) {
  FakeClock clock;
  const std::string dir = FreshDir("badentry");
  {
    std::unique_ptr<CoordinatorImpl> c = Open(dir, &clock);
    ASSERT_TRUE(c->CreateQueue(Config("alpha", 3, 1, 1)).ok());
    ASSERT_TRUE(c->Take("alpha", "w", 1, absl::InfinitePast()).ok());
    ASSERT_TRUE(c->Flush().ok());
    // Drop the final snapshot the clean shutdown would write: corrupt the
    // journal of the copy instead.
    const std::string copy = CrashCopy(dir, "badentry-copy");
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((copy + "/state.db").c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE journal SET update_pb = x'ffffffff' WHERE seq = 2",
                           nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    CoordinatorOptions options;
    options.clock = &clock;
    options.state_dir = copy;
    absl::StatusOr<std::unique_ptr<CoordinatorImpl>> bad = CoordinatorImpl::Create(options);
    ASSERT_FALSE(bad.ok());
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(bad.status().message().find("entry 2"), std::string::npos) << bad.status();
  }
}

TEST(DurableCoordinator, CheckpointResumesFromTheReportedOffset) {
  FakeClock clock;
  CoordinatorImpl c(&clock);
  QueueConfig config = Config("alpha", 0, 2, 2);
  config.items = {"a.txt?start=0&end=100", "b.txt?start=0&end=50"};
  config.shuffle = false;
  ASSERT_TRUE(c.CreateQueue(config).ok());
  auto items = c.Take("alpha", "w", 2, absl::InfinitePast());
  ASSERT_EQ(items->size(), 2u);
  ASSERT_TRUE(c.Complete("alpha", "w", (*items)[1].lease_id).ok());   // b done
  ASSERT_TRUE(c.ReportProgress("alpha", "w", {{(*items)[0].lease_id, 40}}).ok());
  absl::StatusOr<journal::Checkpoint> checkpoint = c.ExportCheckpoint("alpha");
  ASSERT_TRUE(checkpoint.ok());

  CoordinatorImpl fresh(&clock);
  ASSERT_TRUE(fresh.RestoreCheckpoint(*checkpoint, "").ok());
  std::vector<std::string> order;
  while (true) {
    auto next = fresh.Take("alpha", "v", 1, absl::InfinitePast());
    if (!next.ok()) break;
    ASSERT_EQ(next->size(), 1u);
    order.push_back(absl::StrCat((*next)[0].epoch, ":", (*next)[0].item));
    ASSERT_TRUE(fresh.Complete("alpha", "v", (*next)[0].lease_id).ok());
  }
  // The unread rest of a first, nothing of b in epoch 0, then epoch 1 whole.
  EXPECT_EQ(order, (std::vector<std::string>{"0:a.txt?start=40&end=100",
                                             "1:a.txt?start=0&end=100",
                                             "1:b.txt?start=0&end=50"}));
  EXPECT_EQ(fresh.RestoreCheckpoint(*checkpoint, "").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardq
