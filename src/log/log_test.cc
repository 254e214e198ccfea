#include "src/log/log.h"

#include <cstdlib>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace shardq::logging {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// The logger reads SHARDQ_LOG_LEVEL once, on first use: make sure the
// run's environment cannot decide these tests.
class LogTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    unsetenv("SHARDQ_LOG_LEVEL");
    Logger();
  }
  void TearDown() override { SetDefaultLevel(spdlog::level::warn); }
};

std::string Capture(void (*emit)()) {
  ::testing::internal::CaptureStderr();
  emit();
  return ::testing::internal::GetCapturedStderr();
}

TEST_F(LogTest, TheLibraryIsQuietByDefaultButWarningsShow) {
  const std::string out = Capture([] {
    SHARDQ_LOG_INFO("an info line {}", 1);
    SHARDQ_LOG_WARN("queue '{}': a warning", "q");
  });
  EXPECT_THAT(out, Not(HasSubstr("an info line")));
  EXPECT_THAT(out, HasSubstr("queue 'q': a warning"));
}

TEST_F(LogTest, LinesCarryATimestampTheLoggerAndTheLevel) {
  const std::string out = Capture([] { SHARDQ_LOG_ERROR("it broke: {}", "disk"); });
  EXPECT_THAT(out, ContainsRegex(R"(^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}\] )"
                                 R"(\[shardq\] \[error\] it broke: disk)"));
}

TEST_F(LogTest, SetDefaultLevelTurnsInfoOn) {
  EXPECT_EQ(SetDefaultLevel(spdlog::level::info), spdlog::level::info);
  const std::string out = Capture([] { SHARDQ_LOG_INFO("listening on {}", "127.0.0.1:1"); });
  EXPECT_THAT(out, HasSubstr("[info] listening on 127.0.0.1:1"));
}

TEST(LogLevel, ParsesTheDocumentedNamesOnly) {
  spdlog::level::level_enum level = spdlog::level::off;
  EXPECT_TRUE(ParseLevel("warning", &level));
  EXPECT_EQ(level, spdlog::level::warn);
  EXPECT_TRUE(ParseLevel("warn", &level));
  EXPECT_TRUE(ParseLevel("debug", &level));
  EXPECT_EQ(level, spdlog::level::debug);
  EXPECT_TRUE(ParseLevel("off", &level));
  EXPECT_EQ(level, spdlog::level::off);
  EXPECT_FALSE(ParseLevel("loud", &level));
  EXPECT_FALSE(ParseLevel("INFO ", &level));
  EXPECT_EQ(level, spdlog::level::off);
}

}  // namespace
}  // namespace shardq::logging
