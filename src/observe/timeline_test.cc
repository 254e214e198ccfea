#include "src/observe/timeline.h"

#include "gtest/gtest.h"
#include "src/observe/status_json.h"

namespace shardq {
namespace {

journal::Update LeaseUpdate(int64_t t_us, uint64_t lease, const std::string& worker,
                            int64_t index) {
  journal::Update u;
  u.set_time_us(t_us);
  u.mutable_lease()->set_lease_id(lease);
  u.mutable_lease()->set_worker(worker);
  u.mutable_lease()->set_epoch(0);
  u.mutable_lease()->set_index(index);
  return u;
}

journal::Update CompleteUpdate(int64_t t_us, uint64_t lease, const std::string& worker) {
  journal::Update u;
  u.set_time_us(t_us);
  u.mutable_complete()->set_lease_id(lease);
  u.mutable_complete()->set_worker(worker);
  return u;
}

TEST(Timeline, AnEndCarriesItsTakeTimeHolderAndItem) {
  Timeline t;
  t.Record("q", LeaseUpdate(1'000'000, 7, "w1", 3));
  t.Record("q", CompleteUpdate(3'500'000, 7, "w1"));
  std::vector<ItemEvent> events = t.Since("q", 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, ItemEventKind::kTake);
  EXPECT_EQ(events[1].kind, ItemEventKind::kComplete);
  EXPECT_EQ(events[1].worker, "w1");
  EXPECT_EQ(events[1].index, 3);
  EXPECT_EQ(events[1].taken_us, 1'000'000);
  EXPECT_EQ(events[1].at_us, 3'500'000);
  EXPECT_TRUE(t.Open("q").empty());
}

TEST(Timeline, ExpiryFailureAndSplitNameTheHolderTheyOnlyKnowByLease) {
  Timeline t;
  t.Record("q", LeaseUpdate(10, 1, "a", 0));
  t.Record("q", LeaseUpdate(11, 2, "b", 1));
  t.Record("q", LeaseUpdate(12, 3, "c", 2));
  journal::Update split;
  split.set_time_us(20);
  split.mutable_split()->set_lease_id(3);
  split.mutable_split()->set_split_point(500);
  t.Record("q", split);
  journal::Update expire;
  expire.set_time_us(30);
  expire.mutable_expire()->set_lease_id(1);
  t.Record("q", expire);
  journal::Update fail;
  fail.set_time_us(40);
  fail.mutable_fail()->set_lease_id(2);
  fail.mutable_fail()->set_reason("disk full");
  t.Record("q", fail);
  std::vector<ItemEvent> events = t.Since("q", 20);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].kind, ItemEventKind::kSplit);
  EXPECT_EQ(events[0].worker, "c");
  EXPECT_EQ(events[0].split_point, 500);
  EXPECT_EQ(events[1].kind, ItemEventKind::kExpire);
  EXPECT_EQ(events[1].worker, "a");
  EXPECT_EQ(events[2].kind, ItemEventKind::kFail);
  EXPECT_EQ(events[2].worker, "b");
  EXPECT_EQ(events[2].reason, "disk full");
  // The split lease stays with its holder; the others ended.
  std::vector<ItemEvent> open = t.Open("q");
  ASSERT_EQ(open.size(), 1u);
  EXPECT_EQ(open[0].lease_id, 3u);
}

TEST(Timeline, KeepsOnlyTheNewestEventsPerQueueAndCountsTheDropped) {
  Timeline t(/*events_per_queue=*/4);
  for (int i = 0; i < 10; ++i) t.Record("q", LeaseUpdate(i, i + 1, "w", i));
  t.Record("other", LeaseUpdate(0, 1, "w", 0));
  std::vector<ItemEvent> events = t.Since("q", 0);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events.front().at_us, 6);
  EXPECT_EQ(events.back().at_us, 9);
  EXPECT_EQ(t.Dropped("q"), 6);
  EXPECT_EQ(t.Since("other", 0).size(), 1u);
  // `limit` keeps the newest.
  std::vector<ItemEvent> two = t.Since("q", 0, 2);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two.front().at_us, 8);
}

TEST(Timeline, ACreationStartsTheQueueAfresh) {
  Timeline t;
  t.Record("q", LeaseUpdate(1, 1, "w", 0));
  journal::Update create;
  create.set_time_us(5);
  create.mutable_create();
  t.Record("q", create);
  EXPECT_TRUE(t.Since("q", 0).empty());
  EXPECT_TRUE(t.Open("q").empty());
  EXPECT_TRUE(t.Since("unknown", 0).empty());
}

TEST(Timeline, JsonListsEventsAndOpenLeases) {
  Timeline t;
  t.Record("q", LeaseUpdate(1'000'000, 1, "w", 0));
  t.Record("q", LeaseUpdate(2'000'000, 2, "w", 1));
  t.Record("q", CompleteUpdate(2'500'000, 1, "w"));
  nlohmann::json j = TimelineJson(t, "q", 0, 3'000'000, 100);
  EXPECT_EQ(j["events"].size(), 3u);
  EXPECT_EQ(j["events"][2]["kind"], "complete");
  EXPECT_DOUBLE_EQ(j["events"][2]["taken"].get<double>(), 1.0);
  ASSERT_EQ(j["open"].size(), 1u);
  EXPECT_EQ(j["open"][0]["lease"], 2);
  EXPECT_FALSE(j["truncated"].get<bool>());
  EXPECT_TRUE(TimelineJson(t, "q", 0, 3'000'000, 2)["truncated"].get<bool>());
}

TEST(LatencyHistogram, BucketsAreCumulativeWithSumAndCount) {
  LatencyHistogram h;
  h.Observe(absl::Milliseconds(3));
  h.Observe(absl::Milliseconds(300));
  h.Observe(absl::Seconds(100));
  const std::string text = h.PrometheusText("x_seconds", "help");
  EXPECT_NE(text.find("# TYPE x_seconds histogram\n"), std::string::npos);
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.0025\"} 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"0.5\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"60\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("x_seconds_count 3\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace shardq
