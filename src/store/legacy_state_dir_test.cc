// A state dir written before compact queue state (state dir format 2, its
// creation updates and snapshots in format 1: the plan as item strings) is
// read, upgraded to format 3 and goes on exactly where it stopped; a newer
// state dir format is refused naming it.
#include <sqlite3.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/slice.h"
#include "src/core/legacy_format_testing.h"
#include "src/core/queue_state.h"
#include "src/server/coordinator_impl.h"
#include "src/store/journal.h"
#include "src/store/state_db.h"

namespace shardq {
namespace {

namespace fs = std::filesystem;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

std::string FreshDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/legacy-", name, "-", ::getpid());
  fs::remove_all(dir);
  return dir;
}

QueueConfig Config(const std::string& name) {
  QueueConfig c;
  c.name = name;
  c.items = testing_legacy::ItemsOfEveryShape();
  c.num_epochs = 2;
  c.seed = 7;
  c.num_clients = 8;
  c.lease_timeout = absl::Hours(1);
  return c;
}

// Takes `n` items for `worker`, completes the first, splits the others that
// have a range in their middle.
std::vector<WorkItem> Work(QueueState& s, const std::string& worker, int n) {
  std::vector<WorkItem> held;
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<TakeResult> r = s.Take(worker, kT0);
    EXPECT_TRUE(r.ok() && r->outcome == TakeOutcome::kItem);
    held.push_back(r->item);
  }
  EXPECT_TRUE(s.Complete(worker, held[0].lease_id, kT0).ok());
  for (size_t i = 1; i < held.size(); ++i) {
    absl::StatusOr<SliceSpec> spec = ParseItem(held[i].item);
    if (!spec.ok() || !spec->start || !spec->end || *spec->end - *spec->start < 2) continue;
    EXPECT_TRUE(s.AcceptSplit(worker, held[i].lease_id, *spec->start + 1, kT0).ok());
  }
  return held;
}

int Format(const std::string& dir) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open((dir + "/state.db").c_str(), &db), SQLITE_OK);
  int format = 0;
  sqlite3_exec(
      db, "SELECT value FROM meta WHERE key = 'format'",
      [](void* out, int, char** values, char**) {
        *static_cast<int*>(out) = std::atoi(values[0]);
        return 0;
      },
      &format, nullptr);
  sqlite3_close(db);
  return format;
}

void Exec(const std::string& dir, const std::vector<std::string>& statements) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/state.db").c_str(), &db), SQLITE_OK);
  for (const std::string& sql : statements) {
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
        << sql << ": " << (error != nullptr ? error : "");
    sqlite3_free(error);
  }
  sqlite3_close(db);
}

// Writes what the previous version left in a state dir: queue "legacy"
// with a format 1 snapshot and journal entries after it, queue "fresh"
// with only its format 1 creation and updates; then makes the database
// format 2 (its tables as they were). `live` get the same history.
void WriteFormat2StateDir(const std::string& dir, std::unique_ptr<QueueState>* legacy,
                          std::unique_ptr<QueueState>* fresh) {
  std::vector<std::pair<std::string, journal::Update>> updates;
  *legacy = *QueueState::Create(Config("legacy"));
  *fresh = *QueueState::Create(Config("fresh"));
  {
    RecoveredState ignored;
    auto j = *Journal::Open(dir, &ignored);
    j->Append("legacy", testing_legacy::CreationUpdate(Config("legacy"), kT0));
    uint64_t seq = 0;
    (*legacy)->set_update_sink([&](const journal::Update& u) { seq = j->Append("legacy", u); });
    Work(**legacy, "w1", 4);
    j->AppendSnapshot("legacy", seq, testing_legacy::Snapshot((*legacy)->ToSnapshot()));
    Work(**legacy, "w2", 3);
    j->Append("fresh", testing_legacy::CreationUpdate(Config("fresh"), kT0));
    (*fresh)->set_update_sink([&](const journal::Update& u) { j->Append("fresh", u); });
    Work(**fresh, "w3", 3);
    ASSERT_TRUE(j->Flush().ok());
    (*legacy)->set_update_sink(nullptr);
    (*fresh)->set_update_sink(nullptr);
  }
  Exec(dir, {"DROP TABLE snapshot_parts", "ALTER TABLE snapshots DROP COLUMN parts",
             "ALTER TABLE snapshots DROP COLUMN first_part",
             "UPDATE meta SET value = '2' WHERE key = 'format'"});
  ASSERT_EQ(Format(dir), 2);
}

// The items `c` hands out for `queue` to the end, completing each, next to
// those `live` hands out.
void ExpectSameItemsToTheEnd(CoordinatorImpl& c, QueueState& live, const std::string& queue) {
  int n = 0;
  while (true) {
    absl::StatusOr<TakeResult> want = live.Take("drain", kT0);
    ASSERT_TRUE(want.ok());
    absl::StatusOr<std::vector<WorkItem>> got = c.Take(queue, "drain", 1, absl::InfinitePast());
    if (want->outcome == TakeOutcome::kEndOfInput) {
      EXPECT_TRUE(absl::IsOutOfRange(got.status())) << got.status();
      break;
    }
    if (want->outcome == TakeOutcome::kWait) {  // the rest is held by w1..w3
      EXPECT_TRUE(got.ok() && got->empty()) << got.status();
      break;
    }
    ASSERT_TRUE(got.ok() && got->size() == 1) << got.status();
    EXPECT_EQ((*got)[0].item, want->item.item) << queue << " item " << n;
    EXPECT_EQ((*got)[0].epoch, want->item.epoch);
    EXPECT_EQ((*got)[0].index, want->item.index);
    ASSERT_TRUE(live.Complete("drain", want->item.lease_id, kT0).ok());
    ASSERT_TRUE(c.Complete(queue, "drain", (*got)[0].lease_id).ok());
    ++n;
  }
  EXPECT_GT(n, 10);
}

TEST(LegacyStateDir, AFormat2StateDirIsReadUpgradedAndGoesOnWhereItStopped) {
  const std::string dir = FreshDir("format2");
  std::unique_ptr<QueueState> legacy, fresh;
  WriteFormat2StateDir(dir, &legacy, &fresh);
  CoordinatorOptions options;
  options.state_dir = dir;
  {
    auto c = CoordinatorImpl::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    for (auto [name, live] : {std::pair{"legacy", legacy.get()}, std::pair{"fresh", fresh.get()}}) {
      absl::StatusOr<QueueStats> stats = (*c)->Stats(name);
      ASSERT_TRUE(stats.ok()) << stats.status();
      EXPECT_EQ(stats->completed, live->Stats(kT0).completed) << name;
      EXPECT_EQ(stats->leased, live->Stats(kT0).leased) << name;
      EXPECT_EQ(stats->splits, live->Stats(kT0).splits) << name;
    }
    // A clean close snapshots both queues in the compact format...
  }
  EXPECT_EQ(Format(dir), state_db::kFormatVersion);
  {
    // ... which the next start reads.
    auto c = CoordinatorImpl::Create(options);
    ASSERT_TRUE(c.ok()) << c.status();
    absl::StatusOr<journal::QueueSnapshot> snapshot = (*c)->DebugSnapshot("legacy");
    ASSERT_TRUE(snapshot.ok());
    EXPECT_EQ(snapshot->format(), QueueState::kSnapshotFormat);
    ExpectSameItemsToTheEnd(**c, *legacy, "legacy");
    ExpectSameItemsToTheEnd(**c, *fresh, "fresh");
  }
  fs::remove_all(dir);
}

TEST(LegacyStateDir, ANewerStateDirFormatIsRefusedNamingIt) {
  const std::string dir = FreshDir("newer");
  {
    RecoveredState ignored;
    ASSERT_TRUE(Journal::Open(dir, &ignored).ok());
  }
  Exec(dir, {absl::StrCat("UPDATE meta SET value = '", state_db::kFormatVersion + 1,
                          "' WHERE key = 'format'")});
  RecoveredState ignored;
  absl::Status s = Journal::Open(dir, &ignored).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find(absl::StrCat("has format ", state_db::kFormatVersion + 1)),
            std::string::npos)
      << s;
  fs::remove_all(dir);
}

TEST(LegacyStateDir, ALargeSnapshotIsStoredInPartsAndReadBack) {
  const std::string dir = FreshDir("parts");
  journal::QueueSnapshot big;
  big.mutable_config()->set_name("q");
  for (int64_t i = 0; i < 900000; ++i) big.add_pending_slots(i * 7);  // ~2.5 MiB
  {
    RecoveredState ignored;
    auto j = *Journal::Open(dir, &ignored);
    const size_t bytes = j->WriteSnapshot("q", 0, big);
    EXPECT_GT(bytes, 2 * Journal::kSnapshotPartBytes);
    ASSERT_TRUE(j->Flush().ok());
  }
  RecoveredState state;
  auto j = Journal::Open(dir, &state);
  ASSERT_TRUE(j.ok()) << j.status();
  ASSERT_EQ(state.queues.size(), 1u);
  ASSERT_NE(state.queues[0].snapshot, nullptr);
  EXPECT_EQ(state.queues[0].snapshot->pending_slots_size(), 900000);
  EXPECT_EQ(state.queues[0].snapshot->pending_slots(899999), 899999 * 7);
  j->reset();
  // A part lost is DATA_LOSS, not a shorter snapshot.
  Exec(dir, {"DELETE FROM snapshot_parts WHERE seq = (SELECT min(seq) FROM snapshot_parts)"});
  RecoveredState damaged;
  EXPECT_EQ(Journal::Open(dir, &damaged).status().code(), absl::StatusCode::kDataLoss);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardq
