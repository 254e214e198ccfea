#include "src/observe/process_metrics.h"

#include <unistd.h>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

TEST(ProcessMetrics, ReadsThisProcessFromProc) {
  absl::StatusOr<ProcessMetrics> m = ReadProcessMetrics();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(m->resident_memory_bytes, 0);
  EXPECT_GE(m->virtual_memory_bytes, m->resident_memory_bytes);
  EXPECT_GE(m->open_fds, 3);  // at least stdin, stdout, stderr
  EXPECT_GE(m->max_fds, m->open_fds);
  EXPECT_GE(m->cpu_seconds, 0);
  // This test binary started within the last hour.
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_LE(m->start_time_seconds, now + 1);
  EXPECT_GT(m->start_time_seconds, now - 3600);
}

TEST(ProcessMetrics, TextHasTheStandardNamesAndTypes) {
  ProcessMetrics m;
  m.cpu_seconds = 1.5;
  m.resident_memory_bytes = 4096;
  m.open_fds = 7;
  const std::string text = ProcessMetricsText(m);
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE process_resident_memory_bytes gauge\n"
                      "process_resident_memory_bytes 4096\n"),
            std::string::npos);
  EXPECT_NE(text.find("process_open_fds 7\n"), std::string::npos);
  for (const char* name : {"process_virtual_memory_bytes", "process_max_fds",
                           "process_start_time_seconds"}) {
    EXPECT_NE(text.find(std::string("# TYPE ") + name + " gauge\n"), std::string::npos) << name;
  }
}

TEST(ProcessMetrics, BuildInfoCarriesTheProjectVersion) {
  EXPECT_FALSE(ShardqVersion().empty());
  EXPECT_EQ(BuildInfoText("1.2\"3"),
            "# HELP shardq_build_info The shardq version serving; always 1.\n"
            "# TYPE shardq_build_info gauge\n"
            "shardq_build_info{version=\"1.2\\\"3\"} 1\n");
}

}  // namespace
}  // namespace shardq
