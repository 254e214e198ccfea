// The coordinator over the etcd store: what it completes survives a new
// coordinator (a standby taking over), snapshots included, and a deposed
// coordinator hands out nothing and refuses every change.
#include <memory>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/server/coordinator_impl.h"
#include "src/store/etcd_store.h"
#include "src/store/etcd_test_fixture.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

QueueConfig Config(const std::string& name, int64_t items, int64_t epochs) {
  QueueConfig c;
  c.name = name;
  for (int64_t i = 0; i < items; ++i) c.items.push_back(absl::StrCat(name, "-item-", i));
  c.num_epochs = epochs;
  c.num_clients = 4;
  c.seed = 7;
  c.lease_timeout = absl::Seconds(30);
  return c;
}

class EtcdCoordinatorTest : public EtcdTest {
 protected:
  // A coordinator over the job's state, guarded by `guard_rev` of the
  // election key (0: unguarded). `store` gets the store it runs on.
  std::unique_ptr<CoordinatorImpl> Open(int64_t guard_rev = 0, EtcdStore** store = nullptr,
                                        int64_t snapshot_every = 20000) {
    EtcdStoreOptions options;
    options.client = client_;
    options.job = "train";
    if (guard_rev != 0) {
      options.guard_key = EtcdStore::JobPrefix("train") + "leader";
      options.guard_create_revision = guard_rev;
    }
    RecoveredState recovered;
    absl::StatusOr<std::unique_ptr<EtcdStore>> opened = EtcdStore::Open(options, &recovered);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return nullptr;
    if (store != nullptr) *store = opened->get();
    CoordinatorOptions coordinator_options;
    coordinator_options.snapshot_every = snapshot_every;
    coordinator_options.snapshot_bytes_per_update = 1;
    absl::StatusOr<std::unique_ptr<CoordinatorImpl>> c = CoordinatorImpl::CreateWithStore(
        coordinator_options, *std::move(opened), std::move(recovered), "etcd job 'train'");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  // Puts the election key anew; returns its create revision.
  int64_t Elect(const std::string& who) {
    const std::string key = EtcdStore::JobPrefix("train") + "leader";
    etcdserverpb::DeleteRangeRequest del;
    del.set_key(key);
    EXPECT_TRUE(client_->DeleteRange(del).ok());
    etcdserverpb::PutRequest put;
    put.set_key(key);
    put.set_value(who);
    EXPECT_TRUE(client_->Put(put).ok());
    return client_->Get(key)->create_revision();
  }

};

TEST_F(EtcdCoordinatorTest, ANewCoordinatorContinuesWithNothingLostOrRepeated) {
  std::set<std::pair<int64_t, int64_t>> completed;
  uint64_t held_lease = 0;
  {
    std::unique_ptr<CoordinatorImpl> c = Open(0, nullptr, /*snapshot_every=*/25);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->CreateQueue(Config("q", 40, 2)).ok());
    for (int i = 0; i < 50; ++i) {
      auto items = c->Take("q", "w1", 1, absl::Now() + absl::Seconds(5));
      ASSERT_TRUE(items.ok()) << items.status();
      ASSERT_EQ(items->size(), 1u);
      auto outcome = c->Complete("q", "w1", (*items)[0].lease_id);
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      completed.insert({(*items)[0].epoch, (*items)[0].index});
    }
    // One held (not completed) when the coordinator goes.
    auto held = c->Take("q", "w1", 1, absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(held.ok() && held->size() == 1u) << held.status();
    held_lease = (*held)[0].lease_id;
    ASSERT_TRUE(c->Flush().ok());
    ASSERT_GE(c->journal_totals()->snapshots, 1);
  }
  std::unique_ptr<CoordinatorImpl> c = Open();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->recovery().queues, 1);
  absl::StatusOr<QueueStats> stats = c->Stats("q");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->completed, 50);
  // The lease held across the change of coordinator is still w1's.
  ASSERT_TRUE(c->Release("q", "w1", held_lease).ok());
  // The rest, by another worker.
  while (true) {
    auto items = c->Take("q", "w2", 1, absl::Now() + absl::Milliseconds(1));
    if (items.status().code() == absl::StatusCode::kOutOfRange) break;
    ASSERT_TRUE(items.ok()) << items.status();
    ASSERT_EQ(items->size(), 1u);
    ASSERT_TRUE(c->Complete("q", "w2", (*items)[0].lease_id).ok());
    EXPECT_TRUE(completed.insert({(*items)[0].epoch, (*items)[0].index}).second)
        << "completed twice: epoch " << (*items)[0].epoch << " item " << (*items)[0].index;
  }
  EXPECT_EQ(completed.size(), 80u);
}

TEST_F(EtcdCoordinatorTest, ADeposedCoordinatorHandsOutNothingAndChangesNothing) {
  const int64_t first = Elect("first");
  EtcdStore* store = nullptr;
  std::unique_ptr<CoordinatorImpl> old = Open(first, &store);
  ASSERT_NE(old, nullptr);
  ASSERT_TRUE(old->CreateQueue(Config("q", 10, 1)).ok());
  auto held = old->Take("q", "w1", 1, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_TRUE(old->Complete("q", "w1", (*held)[0].lease_id).ok());

  Elect("second");  // another coordinator wins
  auto take = old->Take("q", "w1", 1, absl::Now() + absl::Seconds(5));
  if (take.ok()) {
    // A grant is written behind...
    ASSERT_EQ(take->size(), 1u);
    // ...but its completion waits for the store, which refuses.
    absl::Status s = old->Complete("q", "w1", (*take)[0].lease_id).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(s.message(), HasSubstr("not leader"));
  } else {
    // Or the store learnt of the new leader first (a write of its own, made
    // behind, was refused before this take): refused up front. Which one
    // comes first depends on the store's own timing.
    EXPECT_EQ(take.status().code(), absl::StatusCode::kUnavailable) << take.status();
    EXPECT_THAT(take.status().message(), HasSubstr("not leader"));
  }
  EXPECT_TRUE(store->lost_leadership());
  // From then on every change is refused up front, before it hands out anything.
  EXPECT_EQ(old->Writable().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(old->Take("q", "w2", 1, absl::Now() + absl::Seconds(1)).ok());
  old.reset();

  std::unique_ptr<CoordinatorImpl> next = Open();
  ASSERT_NE(next, nullptr);
  absl::StatusOr<QueueStats> stats = next->Stats("q");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->completed, 1);
}

}  // namespace
}  // namespace shardq
