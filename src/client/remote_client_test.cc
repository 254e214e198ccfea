// shardq::remote_work_queue: a WorkQueue needs an address, and says so.
#include "gtest/gtest.h"
#include "shardq/options.h"
#include "shardq/work_queue.h"

namespace shardq {
namespace {

TEST(RemoteClient, QueueWithoutAnAddressIsRefusedNamingWhatToDo) {
  WorkQueueOptions options;
  options.name = "q";
  options.works = {"/dev/null"};
  options.address = "";
  absl::StatusOr<std::unique_ptr<WorkQueue>> queue = WorkQueue::Create(options);
  ASSERT_FALSE(queue.ok());
  EXPECT_EQ(queue.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(queue.status().message().find("shardq::remote_client"), std::string::npos);
  EXPECT_NE(queue.status().message().find("SHARDQ_ADDRESS"), std::string::npos);
}

}  // namespace
}  // namespace shardq
