#include "src/observe/status_server.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

TEST(StatusPage, ShowsSplitsNextToTheQueueCounters) {
  QueueMetrics m;
  m.stats.name = "train";
  m.stats.num_items = 10;
  m.stats.num_epochs = 1;
  m.stats.duplicates = 2;
  m.stats.splits = 3;
  m.stats.split_items_open = 1;
  const std::string page = StatusPage({m});
  EXPECT_NE(page.find("queue train"), std::string::npos);
  EXPECT_NE(page.find(", duplicates 2, splits 3 (1 open), "), std::string::npos) << page;
}

TEST(StatusPage, EscapesQueueNames) {
  QueueMetrics m;
  m.stats.name = "<b>";
  const std::string page = StatusPage({m});
  EXPECT_NE(page.find("queue &lt;b&gt;"), std::string::npos);
  EXPECT_EQ(page.find("<b>"), std::string::npos);
}

TEST(StatusPage, LinksToTheMetricsItIsGiven) {
  const std::string page = StatusPage({}, "/metrics?token=a%26b");
  EXPECT_NE(page.find("<a href=\"/metrics?token=a%26b\">"), std::string::npos) << page;
}

TEST(HttpRequestAllowed, ATokenIsRequiredUnlessThePageIsPublic) {
  StatusHttpOptions open;
  EXPECT_TRUE(HttpRequestAllowed(open, "", ""));
  StatusHttpOptions closed;
  closed.token = "s3cret";
  EXPECT_FALSE(HttpRequestAllowed(closed, "", ""));
  EXPECT_FALSE(HttpRequestAllowed(closed, "Bearer wrong", ""));
  EXPECT_FALSE(HttpRequestAllowed(closed, "s3cret", ""));  // not "Bearer <token>"
  EXPECT_FALSE(HttpRequestAllowed(closed, "", "s3cre"));
  EXPECT_TRUE(HttpRequestAllowed(closed, "Bearer s3cret", ""));
  EXPECT_TRUE(HttpRequestAllowed(closed, "", "s3cret"));
  StatusHttpOptions public_page = closed;
  public_page.public_page = true;
  EXPECT_TRUE(HttpRequestAllowed(public_page, "", ""));
}

class StatusHttpServerTest : public testing::Test {
 protected:
  void SetUp() override {
    // A coordinator with one queue, seen through the functions serve wires.
    CoordinatorView view;
    view.all_stats = [] {
      QueueStats s;
      s.name = "seen";
      return std::vector<QueueStats>{s};
    };
    absl::StatusOr<std::unique_ptr<MetricsSampler>> s =
        MetricsSampler::Start(std::move(view), "", absl::Seconds(10));
    ASSERT_TRUE(s.ok()) << s.status();
    sampler_ = *std::move(s);
  }
  void TearDown() override {
    sampler_.reset();
  }
  std::unique_ptr<MetricsSampler> sampler_;
};

TEST_F(StatusHttpServerTest, ASecondServerOnTheSamePortFailsInsteadOfSharingIt) {
  StatusHttpOptions options;
  options.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> first =
      StatusHttpServer::Start(sampler_.get(), options);
  ASSERT_TRUE(first.ok()) << first.status();
  options.listen = absl::StrCat("127.0.0.1:", (*first)->port());
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> second =
      StatusHttpServer::Start(sampler_.get(), options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(
                absl::StrCat("address 127.0.0.1:", (*first)->port(), " already in use")),
            absl::string_view::npos)
      << second.status();
}

TEST_F(StatusHttpServerTest, APortAbove65535IsRefusedNotWrapped) {
  StatusHttpOptions options;
  options.listen = "127.0.0.1:70000";
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> server =
      StatusHttpServer::Start(sampler_.get(), options);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(server.status().message().find("--http '127.0.0.1:70000'"), absl::string_view::npos)
      << server.status();
}


TEST(MetricsSampler, ReadsTheCoordinatorOnlyThroughItsView) {
  CoordinatorView view;
  int calls = 0;
  view.all_stats = [&calls] {
    ++calls;
    QueueStats s;
    s.name = "q";
    s.completed = 7;
    return std::vector<QueueStats>{s};
  };
  absl::StatusOr<std::unique_ptr<MetricsSampler>> sampler =
      MetricsSampler::Start(view, "", absl::Hours(1));
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  std::vector<QueueMetrics> now = (*sampler)->Current();
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(now[0].stats.name, "q");
  EXPECT_EQ(now[0].stats.completed, 7);
  EXPECT_GE(calls, 1);
  // In memory: no journal function, no journal metrics.
  EXPECT_FALSE((*sampler)->JournalTotals().has_value());

  view.journal_totals = [] {
    JournalMetrics m;
    m.commits = 3;
    m.entries = 12;
    return std::optional<JournalMetrics>(m);
  };
  sampler = MetricsSampler::Start(view, "", absl::Hours(1));
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  std::optional<JournalMetrics> totals = (*sampler)->JournalTotals();
  ASSERT_TRUE(totals.has_value());
  EXPECT_EQ(totals->commits, 3);
  EXPECT_EQ(totals->entries, 12);
}

TEST(MetricsSampler, NeedsTheStatsFunction) {
  absl::StatusOr<std::unique_ptr<MetricsSampler>> sampler =
      MetricsSampler::Start(CoordinatorView{}, "", absl::Hours(1));
  EXPECT_TRUE(absl::IsInvalidArgument(sampler.status())) << sampler.status();
}

}  // namespace
}  // namespace shardq
