#include "src/observe/status_server.h"

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

}  // namespace
}  // namespace shardq
