#include "src/client/planner.h"

#include <fstream>

#include "gtest/gtest.h"

namespace shardq {
namespace {

std::string WriteFile(const std::string& name, const std::string& contents) {
  std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST(PlanWorks, MissingFileIsNotFoundWithItsPath) {
  absl::Status s = PlanWorks({"/no/such/shardq-file.txt"}, "", 4).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("/no/such/shardq-file.txt"), std::string::npos);
  // Also without slicing: a queue of missing files is a mistake.
  EXPECT_EQ(PlanWorks({"/no/such/shardq-file.txt"}, "", std::nullopt).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(PlanWorks, PrefixIsPutBeforeEveryWork) {
  WriteFile("pa.txt", "hello\n");
  absl::StatusOr<std::vector<std::string>> plan =
      PlanWorks({"pa.txt"}, testing::TempDir() + "/", std::nullopt);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ((*plan)[0], testing::TempDir() + "/pa.txt");
}

TEST(PlanWorks, EmptyWorksAndBadSliceCountsAreRejected) {
  EXPECT_EQ(PlanWorks({}, "", 3).status().code(), absl::StatusCode::kInvalidArgument);
  std::string f = WriteFile("pb.txt", "x\n");
  absl::Status s = PlanWorks({f}, "", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("num_slices"), std::string::npos);
  std::string empty = WriteFile("pc.txt", "");
  s = PlanWorks({empty}, "", 3).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("empty"), std::string::npos);
}

TEST(PlanWorks, DirectoryIsNotAWork) {
  absl::Status s = PlanWorks({testing::TempDir()}, "", 2).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos);
}

}  // namespace
}  // namespace shardq
