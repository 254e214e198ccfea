// EndedLeases: the bound, the names kept once, and the packed snapshot
// columns (round trip, canonical form, damaged columns refused).
#include "src/core/ended_leases.h"

#include <string>

#include "gtest/gtest.h"
#include "google/protobuf/util/message_differencer.h"

namespace shardq {
namespace {

bool AnyRef(int64_t, int64_t) { return true; }

TEST(EndedLeases, RemembersTheLastKeptLeasesAndForgetsTheOldest) {
  EndedLeases t(3);
  t.Remember(11, 0, 1, "a", LeaseEnd::kExpired);
  t.Remember(12, 0, 2, "b", LeaseEnd::kReleased);
  t.Remember(13, 1, 3, "a", LeaseEnd::kCompleted);
  ASSERT_NE(t.Find(11), nullptr);
  t.Remember(14, 1, 4, "", LeaseEnd::kFailed);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.Find(11), nullptr);
  const EndedLeases::Lease* l = t.Find(13);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->epoch, 1);
  EXPECT_EQ(l->index, 3);
  EXPECT_EQ(t.worker(*l), "a");
  EXPECT_EQ(l->how, LeaseEnd::kCompleted);
  EXPECT_EQ(t.worker(*t.Find(14)), "");
  // Remembered again: new values, same place in the order (12 goes first).
  t.Remember(12, 0, 2, "b", LeaseEnd::kDuplicate);
  EXPECT_EQ(t.Find(12)->how, LeaseEnd::kDuplicate);
  t.Remember(15, 2, 5, "c", LeaseEnd::kExpired);
  EXPECT_EQ(t.Find(12), nullptr);
  EXPECT_NE(t.Find(13), nullptr);
}

TEST(EndedLeases, ASnapshotNamesEachWorkerOnceAndRoundTrips) {
  EndedLeases t(100);
  const std::string long_name(40, 'w');
  for (int i = 0; i < 50; ++i) {
    t.Remember(1000 + i, i % 2, i, i % 3 == 0 ? long_name : "short",
               static_cast<LeaseEnd>(i % 5));
  }
  t.Remember(2000, 0, 7, "", LeaseEnd::kExpired);
  journal::EndedLeases proto;
  t.ToProto(&proto);
  ASSERT_EQ(proto.workers_size(), 2);  // each name once; "" is worker 0
  EXPECT_EQ(proto.lease_id_size(), 51);
  EXPECT_EQ(proto.worker(50), 0u);
  // Packed columns: far smaller than a message per lease with its name.
  EXPECT_LT(proto.ByteSizeLong(), 51u * 12 + long_name.size() + 16);

  EndedLeases back(100);
  ASSERT_TRUE(back.AddFromProto(proto, AnyRef, "test").ok());
  ASSERT_EQ(back.size(), t.size());
  for (int i = 0; i < 50; ++i) {
    const EndedLeases::Lease* a = t.Find(1000 + i);
    const EndedLeases::Lease* b = back.Find(1000 + i);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->epoch, a->epoch);
    EXPECT_EQ(b->index, a->index);
    EXPECT_EQ(b->how, a->how);
    EXPECT_EQ(back.worker(*b), t.worker(*a));
  }
  EXPECT_EQ(back.worker(*back.Find(2000)), "");
  // The same leases give the same snapshot, however the names were interned.
  journal::EndedLeases again;
  back.ToProto(&again);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(proto, again));
}

TEST(EndedLeases, ASnapshotLeavesOutNamesNoRememberedLeaseUses) {
  EndedLeases t(2);
  t.Remember(1, 0, 0, "gone", LeaseEnd::kExpired);
  t.Remember(2, 0, 1, "kept", LeaseEnd::kExpired);
  t.Remember(3, 0, 2, "kept", LeaseEnd::kExpired);
  journal::EndedLeases proto;
  t.ToProto(&proto);
  ASSERT_EQ(proto.workers_size(), 1);
  EXPECT_EQ(proto.workers(0), "kept");
}

TEST(EndedLeases, NamesNoRememberedLeaseUsesAreDropped) {
  // Workers that come and go under new names (a pod per restart).
  EndedLeases t(8);
  for (int i = 0; i < 1000; ++i) {
    t.Remember(static_cast<uint64_t>(i + 1), 0, i, "worker-" + std::to_string(i),
               LeaseEnd::kCompleted);
    EXPECT_LE(t.names(), 8u);
  }
  for (int i = 992; i < 1000; ++i) {
    const EndedLeases::Lease* l = t.Find(static_cast<uint64_t>(i + 1));
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(t.worker(*l), "worker-" + std::to_string(i));
  }
  // A lease remembered again under another worker lets go of the first.
  t.Remember(1000, 0, 999, "other", LeaseEnd::kDuplicate);
  EXPECT_EQ(t.worker(*t.Find(1000)), "other");
  EXPECT_EQ(t.names(), 8u);
  t.Remember(1001, 0, 1, "other", LeaseEnd::kExpired);
  EXPECT_EQ(t.names(), 7u);  // worker-992 forgotten with its lease; "other" twice
  EXPECT_EQ(t.worker(*t.Find(1001)), "other");
}

TEST(EndedLeases, DamagedColumnsAreDataLossNamingTheSnapshot) {
  EndedLeases t(10);
  t.Remember(5, 0, 1, "a", LeaseEnd::kCompleted);
  t.Remember(6, 0, 2, "b", LeaseEnd::kReleased);
  journal::EndedLeases good;
  t.ToProto(&good);

  journal::EndedLeases short_column = good;
  short_column.mutable_index()->RemoveLast();
  journal::EndedLeases bad_worker = good;
  bad_worker.set_worker(1, 3);  // only 2 names
  journal::EndedLeases bad_end = good;
  (*bad_end.mutable_ended())[0] = 5;
  for (const journal::EndedLeases* bad : {&short_column, &bad_worker, &bad_end}) {
    EndedLeases into(10);
    absl::Status s = into.AddFromProto(*bad, AnyRef, "snapshot of queue 'q'");
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("snapshot of queue 'q'"), std::string::npos) << s;
  }
  EndedLeases into(10);
  absl::Status s = into.AddFromProto(
      good, [](int64_t, int64_t index) { return index < 2; }, "q");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("ended lease 6"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardq
