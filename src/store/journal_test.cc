#include "src/store/journal.h"

#include <sqlite3.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/journal-", name, "-", ::getpid());
  fs::remove_all(dir);
  return dir;
}

journal::Update Release(uint64_t lease) {
  journal::Update u;
  u.set_time_us(1);
  u.mutable_release()->set_lease_id(lease);
  return u;
}

TEST(Journal, AppendedUpdatesAreRecoveredInOrder) {
  const std::string dir = FreshDir("order");
  {
    RecoveredState state;
    auto journal = Journal::Open(dir, &state);
    ASSERT_TRUE(journal.ok()) << journal.status();
    EXPECT_TRUE(state.queues.empty());
    uint64_t last = 0;
    for (int i = 1; i <= 100; ++i) last = (*journal)->Append(i % 2 ? "a" : "b", Release(i));
    ASSERT_TRUE((*journal)->WaitDurable(last).ok());
  }
  RecoveredState state;
  auto journal = Journal::Open(dir, &state);
  ASSERT_TRUE(journal.ok());
  ASSERT_EQ(state.queues.size(), 2u);
  EXPECT_EQ(state.queues[0].name, "a");
  ASSERT_EQ(state.queues[0].updates.size(), 50u);
  for (size_t i = 0; i < 50; ++i) {
    EXPECT_EQ(state.queues[0].updates[i].release().lease_id(), 2 * i + 1);
  }
  EXPECT_EQ(state.last_seq, 100u);
}

TEST(Journal, ConcurrentAppendsShareCommits) {
  const std::string dir = FreshDir("group");
  RecoveredState state;
  auto journal = Journal::Open(dir, &state);
  ASSERT_TRUE(journal.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        uint64_t seq = (*journal)->Append("q", Release(t * 1000 + i));
        ASSERT_TRUE((*journal)->WaitDurable(seq).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  // 800 durable appends; group commit needs far fewer fsyncs than that.
  EXPECT_LT((*journal)->commits(), 800);
}

TEST(Journal, TotalsCountWhatTheCommitsStored) {
  const std::string dir = FreshDir("totals");
  RecoveredState state;
  auto journal = Journal::Open(dir, &state);
  ASSERT_TRUE(journal.ok());
  EXPECT_EQ((*journal)->totals().commits, 0);
  (*journal)->Append("q", Release(1));
  (*journal)->Append("q", Release(2));
  const uint64_t third = (*journal)->Append("q", Release(3));
  ASSERT_TRUE((*journal)->WaitDurable(third).ok());
  Journal::Totals t = (*journal)->totals();
  // Usually one commit of three (the writer thread may commit an append
  // on its own if this thread stalls for kMaxCommitDelay in between).
  EXPECT_GE(t.commits, 1);
  EXPECT_LE(t.commits, 3);
  EXPECT_EQ(t.entries, 3);
  EXPECT_EQ(t.bytes, 3 * static_cast<int64_t>(Release(1).ByteSizeLong()));
  EXPECT_EQ(t.snapshots, 0);
  journal::QueueSnapshot snapshot;
  snapshot.set_taken(7);
  const size_t bytes = (*journal)->AppendSnapshot("q", third, snapshot);
  EXPECT_EQ(bytes, snapshot.ByteSizeLong());
  ASSERT_TRUE((*journal)->Flush().ok());
  const int64_t commits_before = t.commits;
  t = (*journal)->totals();
  EXPECT_EQ(t.commits, commits_before + 1);
  EXPECT_EQ(t.entries, 4);
  EXPECT_EQ(t.snapshots, 1);
  EXPECT_EQ(t.bytes, 3 * static_cast<int64_t>(Release(1).ByteSizeLong()) +
                         static_cast<int64_t>(bytes));
}

TEST(Journal, AnAppendNobodyWaitsForIsStillCommitted) {
  // Lease grants are appended and not waited for: the writer commits them
  // on its own after at most kMaxCommitDelay (liveness only; the bound is
  // not timed here).
  const std::string dir = FreshDir("behind");
  RecoveredState state;
  auto journal = Journal::Open(dir, &state);
  ASSERT_TRUE(journal.ok());
  for (int round = 0; round < 3; ++round) {
    const uint64_t seq = (*journal)->Append("q", Release(round + 1));
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while ((*journal)->durable_seq() < seq && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    EXPECT_GE((*journal)->durable_seq(), seq);
    absl::SleepFor(Journal::kMaxCommitDelay * 3);  // let the writer go idle
  }
}

TEST(Journal, OnDurableAnswersOnceTheAppendIsDurable) {
  const std::string dir = FreshDir("ondurable");
  RecoveredState state;
  auto journal = Journal::Open(dir, &state);
  ASSERT_TRUE(journal.ok());
  // Many appends answered by callback from several threads, mixed with
  // blocking waits: every callback runs once, with OK, and only when
  // durable_seq() has passed its entry.
  constexpr int kThreads = 6;
  constexpr int kPerThread = 150;
  std::atomic<int> answered{0};
  std::atomic<int> early{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const uint64_t seq = (*journal)->Append("q", Release(t * 1000 + i + 1));
        if (t % 3 == 0) {
          ASSERT_TRUE((*journal)->WaitDurable(seq).ok());
          answered.fetch_add(1);
          continue;
        }
        absl::Notification done;
        (*journal)->OnDurable(seq, [&, seq](absl::Status s) {
          EXPECT_TRUE(s.ok()) << s;
          if ((*journal)->durable_seq() < seq) early.fetch_add(1);
          answered.fetch_add(1);
          done.Notify();
        });
        done.WaitForNotification();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(answered.load(), kThreads * kPerThread);
  EXPECT_EQ(early.load(), 0);
  EXPECT_LT((*journal)->commits(), kThreads * kPerThread);  // grouped

  // Already durable: answered at once, on the caller's thread.
  const std::thread::id caller = std::this_thread::get_id();
  bool inline_ok = false;
  (*journal)->OnDurable((*journal)->durable_seq(), [&](absl::Status s) {
    inline_ok = s.ok() && std::this_thread::get_id() == caller;
  });
  EXPECT_TRUE(inline_ok);
}

TEST(Journal, OnDurableCallbacksOfOneThreadAreAllAnswered) {
  // One thread appends and registers callbacks without waiting for them
  // (no waiter leads a commit after the first): the writer thread must
  // commit for them at once.
  const std::string dir = FreshDir("ondurable-writer");
  RecoveredState state;
  auto journal = Journal::Open(dir, &state);
  ASSERT_TRUE(journal.ok());
  std::atomic<int> answered{0};
  absl::Notification all;
  constexpr int kCallbacks = 500;
  for (int i = 0; i < kCallbacks; ++i) {
    const uint64_t seq = (*journal)->Append("q", Release(i + 1));
    (*journal)->OnDurable(seq, [&](absl::Status s) {
      EXPECT_TRUE(s.ok()) << s;
      if (answered.fetch_add(1) + 1 == kCallbacks) all.Notify();
    });
  }
  EXPECT_TRUE(all.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(answered.load(), kCallbacks);
}

TEST(Journal, OnDurableNeverCommitsOnItsCallersThread) {
  // The caller is a gRPC callback thread in the coordinator: it must not
  // park in an fsync. Whether or not a commit runs, a callback for an entry
  // not yet durable runs on another thread (the writer's), and OnDurable
  // itself commits nothing.
  const std::string dir = FreshDir("ondurable-handoff");
  RecoveredState state;
  auto journal = Journal::Open(dir, &state);
  ASSERT_TRUE(journal.ok());
  const std::thread::id caller = std::this_thread::get_id();
  for (int i = 0; i < 50; ++i) {
    const uint64_t seq = (*journal)->Append("q", Release(i + 1));
    absl::Notification done;
    std::thread::id ran_on;
    bool ok = false;
    (*journal)->OnDurable(seq, [&](absl::Status s) {
      ok = s.ok();
      ran_on = std::this_thread::get_id();
      done.Notify();
    });
    ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    EXPECT_TRUE(ok);
    EXPECT_NE(ran_on, caller) << "entry " << i << " was committed on OnDurable's caller";
  }
}

TEST(Journal, SnapshotReplacesTheEntriesItCovers) {
  const std::string dir = FreshDir("snapshot");
  {
    RecoveredState state;
    auto journal = Journal::Open(dir, &state);
    uint64_t seq = 0;
    for (int i = 1; i <= 10; ++i) seq = (*journal)->Append("q", Release(i));
    journal::QueueSnapshot snapshot;
    snapshot.set_taken(10);
    (*journal)->AppendSnapshot("q", seq, snapshot);
    (*journal)->Append("q", Release(11));
    ASSERT_TRUE((*journal)->Flush().ok());
  }
  RecoveredState state;
  auto journal = Journal::Open(dir, &state);
  ASSERT_TRUE(journal.ok());
  ASSERT_EQ(state.queues.size(), 1u);
  ASSERT_NE(state.queues[0].snapshot, nullptr);
  EXPECT_EQ(state.queues[0].snapshot->taken(), 10);
  ASSERT_EQ(state.queues[0].updates.size(), 1u);
  EXPECT_EQ(state.queues[0].updates[0].release().lease_id(), 11u);
}

// Rows of each queue in `dir`'s state.db (the journal must be closed).
std::map<std::string, int64_t> JournalRows(const std::string& dir) {
  std::map<std::string, int64_t> rows;
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2((dir + "/state.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, "SELECT queue, count(*) FROM journal GROUP BY queue", -1, &st,
                               nullptr),
            SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW) {
    rows[reinterpret_cast<const char*>(sqlite3_column_text(st, 0))] = sqlite3_column_int64(st, 1);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rows;
}

// A snapshot's entries are deleted over several commits (at most
// kTrimRowsPerCommit each), each delete starting where the last ended; the
// entries of another queue that no snapshot covers, lying below, between
// and above them, stay. The same after a restart, where the queues'
// starting points come from what was recovered.
TEST(Journal, TrimsDeleteEveryCoveredEntryOfTheirQueueAndNothingElse) {
  const std::string dir = FreshDir("trims");
  constexpr int kRounds = 3 * Journal::kTrimRowsPerCommit / 2;  // > 1 commit of trims per snapshot
  uint64_t covered = 0;
  {
    RecoveredState state;
    auto journal = Journal::Open(dir, &state);
    ASSERT_TRUE(journal.ok()) << journal.status();
    Journal& j = **journal;
    // "old" first (below everything of "q"), then both interleaved.
    for (int i = 0; i < 100; ++i) j.Append("old", Release(static_cast<uint64_t>(i)));
    for (int i = 0; i < kRounds; ++i) {
      j.Append("old", Release(static_cast<uint64_t>(i)));
      covered = j.Append("q", Release(static_cast<uint64_t>(i)));
    }
    j.AppendSnapshot("q", covered, journal::QueueSnapshot());
    ASSERT_TRUE(j.Flush().ok());
    // Each later commit deletes up to kTrimRowsPerCommit of the covered rows.
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(j.WaitDurable(j.Append("old", Release(1))).ok());
    }
    // A second snapshot of "q" while nothing of the first is left: its
    // delete starts after the first's.
    uint64_t second = 0;
    for (int i = 0; i < 10; ++i) {
      j.Append("old", Release(static_cast<uint64_t>(i)));
      second = j.Append("q", Release(static_cast<uint64_t>(i)));
    }
    j.AppendSnapshot("q", second, journal::QueueSnapshot());
    ASSERT_TRUE(j.Flush().ok());
    ASSERT_TRUE(j.WaitDurable(j.Append("old", Release(1))).ok());
    // Left for after the restart: 7 entries of "q" covered by a third
    // snapshot, whose delete the restart interrupts (none ran yet).
    for (int i = 0; i < 7; ++i) covered = j.Append("q", Release(static_cast<uint64_t>(i)));
    j.AppendSnapshot("q", covered, journal::QueueSnapshot());
    j.Append("q", Release(99));  // after the snapshot: kept
    ASSERT_TRUE(j.Flush().ok());
  }
  std::map<std::string, int64_t> rows = JournalRows(dir);
  EXPECT_EQ(rows["old"], 100 + kRounds + 4 + 10 + 1);
  // The third snapshot's 7 were committed with it: their delete is the
  // next commit's, which the close did not make, or made in part.
  EXPECT_GE(rows["q"], 1);
  EXPECT_LE(rows["q"], 8);
  {
    RecoveredState state;
    auto journal = Journal::Open(dir, &state);
    ASSERT_TRUE(journal.ok()) << journal.status();
    ASSERT_TRUE((*journal)->WaitDurable((*journal)->Append("old", Release(1))).ok());
  }
  rows = JournalRows(dir);
  EXPECT_EQ(rows["old"], 100 + kRounds + 4 + 10 + 1 + 1);
  EXPECT_EQ(rows["q"], 1);  // the entry after the last snapshot
}

TEST(Journal, SecondCoordinatorOnTheSameDirIsRefused) {
  const std::string dir = FreshDir("lock");
  RecoveredState state;
  auto first = Journal::Open(dir, &state);
  ASSERT_TRUE(first.ok());
  auto second = Journal::Open(dir, &state);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find(dir), std::string::npos);
}

TEST(Journal, CorruptDatabaseIsRefusedNotStartedEmpty) {
  const std::string dir = FreshDir("corrupt");
  fs::create_directories(dir);
  std::ofstream(dir + "/state.db") << std::string(8192, 'x');
  RecoveredState state;
  auto journal = Journal::Open(dir, &state);
  ASSERT_FALSE(journal.ok());
  EXPECT_EQ(journal.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(journal.status().message().find(dir), std::string::npos);
}

TEST(Journal, UnusableDirectoryIsAnError) {
  RecoveredState state;
  auto journal = Journal::Open("/proc/shardq-cannot-exist/state", &state);
  EXPECT_FALSE(journal.ok());
}

}  // namespace
}  // namespace shardq
