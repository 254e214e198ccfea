// A damaged state dir refuses to start with DATA_LOSS naming the file
// (issue 15 item 3): a truncated or deleted state.db, a deleted or
// truncated WAL, a flipped byte in a snapshot or an entry, a missing or
// damaged COMMITTED, a state.db from another state dir. What is not damage
// still starts: a new or empty dir, COMMITTED behind the database (a crash
// between a commit and its write), a format 1 dir (upgraded).
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/store/journal.h"

namespace shardq {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/statedir-", name, "-", ::getpid());
  fs::remove_all(dir);
  return dir;
}

journal::Update Release(uint64_t lease) {
  journal::Update u;
  u.set_time_us(1);
  u.mutable_release()->set_lease_id(lease);
  return u;
}

journal::QueueSnapshot Snapshot(int64_t taken) {
  journal::QueueSnapshot s;
  s.mutable_config()->set_name("q");
  s.add_completed_bits(std::string(19, '\xff') + std::string(6, '\0'));
  s.set_taken(taken);
  return s;
}

// Appends `n` updates (each waited for: n commits) to queue "q".
void AppendReleases(Journal& j, int first, int n) {
  for (int i = first; i < first + n; ++i) {
    ASSERT_TRUE(j.WaitDurable(j.Append("q", Release(static_cast<uint64_t>(i)))).ok());
  }
}

// A state dir with a snapshot and 20 entries after it, closed cleanly.
std::string CleanDir(const std::string& name) {
  const std::string dir = FreshDir(name);
  RecoveredState state;
  auto j = Journal::Open(dir, &state);
  EXPECT_TRUE(j.ok()) << j.status();
  AppendReleases(**j, 1, 10);
  (*j)->AppendSnapshot("q", 10, Snapshot(10));
  AppendReleases(**j, 11, 20);
  return dir;
}

// A crash at this moment: COMMITTED, state.db and its WAL as they are on
// disk while `dir`'s journal is still open (COMMITTED first: a crash never
// leaves it ahead of the database).
std::string CrashCopy(const std::string& dir, const std::string& name) {
  const std::string copy = FreshDir(name);
  fs::create_directories(copy);
  for (const char* file : {"COMMITTED", "state.db", "state.db-wal"}) {
    if (fs::exists(dir + "/" + file)) fs::copy_file(dir + "/" + file, copy + "/" + file);
  }
  return copy;
}

absl::Status OpenStatus(const std::string& dir, RecoveredState* state = nullptr) {
  RecoveredState ignored;
  auto j = Journal::Open(dir, state != nullptr ? state : &ignored);
  return j.status();
}

void ExpectDataLoss(const absl::Status& s, const std::string& dir, const std::string& file) {
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr(dir));
  EXPECT_THAT(s.message(), HasSubstr(file));
}

int64_t Recovered(const std::string& dir) {
  RecoveredState state;
  absl::Status s = OpenStatus(dir, &state);
  EXPECT_TRUE(s.ok()) << s;
  int64_t n = 0;
  for (const auto& q : state.queues) n += static_cast<int64_t>(q.updates.size());
  return n;
}

void FlipByte(const std::string& path, std::streamoff offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x10));
}

// The offset of `needle` in the file at `path` (which must hold it once).
std::streamoff Find(const std::string& path, const std::string& needle) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(needle);
  EXPECT_NE(at, std::string::npos) << path;
  EXPECT_EQ(bytes.find(needle, at + 1), std::string::npos) << path;
  return static_cast<std::streamoff>(at);
}

TEST(StateDir, NewAndEmptyDirsStartAndReopen) {
  const std::string dir = FreshDir("new");
  EXPECT_TRUE(OpenStatus(dir).ok());
  EXPECT_TRUE(fs::exists(dir + "/COMMITTED"));
  EXPECT_TRUE(OpenStatus(dir).ok());
  const std::string empty = FreshDir("empty");
  fs::create_directories(empty);
  EXPECT_TRUE(OpenStatus(empty).ok());
  EXPECT_EQ(Recovered(CleanDir("clean")), 20);
}

TEST(StateDir, TruncatedOrDeletedDatabaseIsDataLoss) {
  const std::string dir = CleanDir("truncdb");
  fs::resize_file(dir + "/state.db", 0);
  ExpectDataLoss(OpenStatus(dir), dir, "state.db");
  EXPECT_THAT(OpenStatus(dir).message(), HasSubstr("COMMITTED records that entries up to 31"));
  // Refused again: the refusal changed nothing.
  EXPECT_EQ(fs::file_size(dir + "/state.db"), 0u);

  const std::string gone = CleanDir("deldb");
  fs::remove(gone + "/state.db");
  ExpectDataLoss(OpenStatus(gone), gone, "state.db");

  // Cut in half: SQLite's own check, or the missing entries.
  const std::string half = CleanDir("halfdb");
  fs::resize_file(half + "/state.db", fs::file_size(half + "/state.db") / 2);
  ExpectDataLoss(OpenStatus(half), half, "state.db");
}

TEST(StateDir, ALostOrTruncatedWalAfterACrashIsDataLoss) {
  const std::string dir = FreshDir("wal");
  RecoveredState state;
  auto j = Journal::Open(dir, &state);
  ASSERT_TRUE(j.ok()) << j.status();
  AppendReleases(**j, 1, 150);

  // Undamaged, the crash loses nothing.
  EXPECT_EQ(Recovered(CrashCopy(dir, "wal-intact")), 150);

  const std::string deleted = CrashCopy(dir, "wal-deleted");
  ASSERT_TRUE(fs::remove(deleted + "/state.db-wal"));
  ExpectDataLoss(OpenStatus(deleted), deleted, "state.db-wal");
  EXPECT_THAT(OpenStatus(deleted).message(), HasSubstr("did not stop cleanly"));

  const std::string truncated = CrashCopy(dir, "wal-truncated");
  fs::resize_file(truncated + "/state.db-wal", fs::file_size(truncated + "/state.db-wal") / 2);
  ExpectDataLoss(OpenStatus(truncated), truncated, "state.db-wal");
  EXPECT_THAT(OpenStatus(truncated).message(), HasSubstr("holds journal entries up to"));
}

TEST(StateDir, AFlippedByteInASnapshotOrAnEntryIsDataLoss) {
  const std::string dir = CleanDir("flip");
  // In the file itself, inside the snapshot's completion bitset.
  const std::string db = dir + "/state.db";
  FlipByte(db, Find(db, std::string(19, '\xff') + std::string(6, '\0')) + 3);
  absl::Status s = OpenStatus(dir);
  ExpectDataLoss(s, dir, "state.db");
  EXPECT_THAT(s.message(), HasSubstr("snapshot of queue 'q'"));

  // An entry's payload, rewritten through SQLite (so only the checksum can
  // tell): the change still parses as an update.
  const std::string entry = CleanDir("flip-entry");
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open((entry + "/state.db").c_str(), &handle), SQLITE_OK);
  journal::Update other = Release(999);
  const std::string sql = absl::StrCat("UPDATE journal SET update_pb = x'",
                                       absl::BytesToHexString(other.SerializeAsString()),
                                       "' WHERE seq = 15");
  ASSERT_EQ(sqlite3_exec(handle, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(handle);
  s = OpenStatus(entry);
  ExpectDataLoss(s, entry, "state.db");
  EXPECT_THAT(s.message(), HasSubstr("journal entry 15"));
}

TEST(StateDir, AMissingOrDamagedCommittedFileIsDataLoss) {
  const std::string dir = CleanDir("nomark");
  fs::remove(dir + "/COMMITTED");
  ExpectDataLoss(OpenStatus(dir), dir, "COMMITTED is missing");

  const std::string damaged = CleanDir("badmark");
  FlipByte(damaged + "/COMMITTED", 20);
  ExpectDataLoss(OpenStatus(damaged), damaged, "COMMITTED is damaged");
  fs::resize_file(damaged + "/COMMITTED", 7);
  ExpectDataLoss(OpenStatus(damaged), damaged, "COMMITTED is damaged");
}

TEST(StateDir, ADatabaseFromAnotherStateDirIsDataLoss) {
  const std::string a = CleanDir("ida");
  const std::string b = CleanDir("idb");
  fs::copy_file(b + "/state.db", a + "/state.db", fs::copy_options::overwrite_existing);
  ExpectDataLoss(OpenStatus(a), a, "state.db belongs to state dir");
}

TEST(StateDir, CommittedBehindTheDatabaseIsNotDamage) {
  // A crash after a commit and before COMMITTED was written.
  const std::string dir = FreshDir("behind");
  RecoveredState state;
  auto j = Journal::Open(dir, &state);
  ASSERT_TRUE(j.ok()) << j.status();
  AppendReleases(**j, 1, 5);
  const std::string copy = FreshDir("behind-copy");
  fs::create_directories(copy);
  fs::copy_file(dir + "/COMMITTED", copy + "/COMMITTED");
  AppendReleases(**j, 6, 5);
  for (const char* file : {"state.db", "state.db-wal"}) {
    fs::copy_file(dir + "/" + file, copy + "/" + file);
  }
  absl::StatusOr<std::optional<CommitRecord>> mark = CommitMark::Read(copy);
  ASSERT_TRUE(mark.ok() && mark->has_value()) << mark.status();
  EXPECT_EQ((*mark)->seq, 5u);
  EXPECT_EQ(Recovered(copy), 10);
  // Brought up to date (and, after the clean close, marked clean).
  mark = CommitMark::Read(copy);
  ASSERT_TRUE(mark.ok() && mark->has_value()) << mark.status();
  EXPECT_EQ((*mark)->seq, 10u);
  EXPECT_TRUE((*mark)->clean);
}

TEST(StateDir, ManyCommitsCheckpointTheWalAndRecoverEverything) {
  const std::string dir = FreshDir("checkpoint");
  {
    RecoveredState state;
    auto j = Journal::Open(dir, &state);
    ASSERT_TRUE(j.ok()) << j.status();
    journal::Update big = Release(1);
    big.set_time_us(7);
    for (int i = 0; i < 2000; ++i) {  // each commit writes at least one 4 KiB page
      ASSERT_TRUE((*j)->WaitDurable((*j)->Append("q", big)).ok());
    }
    // Checkpointed while open: the WAL was reused from its start instead
    // of growing to 2000 pages.
    EXPECT_LT(fs::file_size(dir + "/state.db-wal"), 1200u * 4096u);
    EXPECT_GT(fs::file_size(dir + "/state.db"), 4096u);
  }
  EXPECT_EQ(Recovered(dir), 2000);
}

TEST(StateDir, AFormat1StateDirIsUpgradedAndThenChecked) {
  const std::string dir = FreshDir("format1");
  fs::create_directories(dir);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/state.db").c_str(), &db), SQLITE_OK);
  const std::string update = absl::BytesToHexString(Release(42).SerializeAsString());
  const std::string snapshot = absl::BytesToHexString(Snapshot(3).SerializeAsString());
  for (const std::string& sql : {
           std::string("PRAGMA journal_mode=WAL"),
           std::string("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"),
           std::string("CREATE TABLE journal (seq INTEGER PRIMARY KEY, queue TEXT NOT NULL,"
                       " update_pb BLOB NOT NULL)"),
           std::string("CREATE TABLE snapshots (queue TEXT PRIMARY KEY,"
                       " seq INTEGER NOT NULL, snapshot_pb BLOB NOT NULL)"),
           std::string("INSERT INTO meta VALUES ('format', '1')"),
           absl::StrCat("INSERT INTO snapshots VALUES ('q', 5, x'", snapshot, "')"),
           absl::StrCat("INSERT INTO journal VALUES (7, 'q', x'", update, "')"),
       }) {
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sql;
  }
  sqlite3_close(db);
  {
    RecoveredState state;
    auto j = Journal::Open(dir, &state);
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_EQ(state.queues.size(), 1u);
    ASSERT_NE(state.queues[0].snapshot, nullptr);
    ASSERT_EQ(state.queues[0].updates.size(), 1u);
    EXPECT_EQ(state.queues[0].updates[0].release().lease_id(), 42u);
    EXPECT_EQ(state.last_seq, 7u);
    EXPECT_EQ((*j)->WaitDurable((*j)->Append("q", Release(43))).code(), absl::StatusCode::kOk);
  }
  EXPECT_TRUE(fs::exists(dir + "/COMMITTED"));
  EXPECT_EQ(Recovered(dir), 2);
  fs::remove(dir + "/COMMITTED");
  ExpectDataLoss(OpenStatus(dir), dir, "COMMITTED");
}

}  // namespace
}  // namespace shardq
