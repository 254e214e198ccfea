// WorkQueue::AgreeSteps end to end: in process (the embedded coordinator)
// and over gRPC (a real server on loopback), the two paths a worker uses.
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/work_queue.h"
#include "src/server/grpc_service.h"

namespace shardq {
namespace {

StepReport R(const std::string& who, int64_t count, bool done) {
  StepReport r;
  r.key = "epoch-0";
  r.participant = who;
  r.participants = 2;
  r.count = count;
  r.done = done;
  return r;
}

std::unique_ptr<WorkQueue> Worker(const std::string& name, const std::string& address,
                                  const std::string& worker) {
  WorkQueueOptions options;
  options.name = name;
  const std::string path = absl::StrCat(testing::TempDir(), "/steps-", name, ".txt");
  std::ofstream(path) << "one line\n";
  options.works = {path};
  options.address = address;
  options.worker_id = worker;
  options.seed = 1;
  absl::StatusOr<std::unique_ptr<WorkQueue>> q = WorkQueue::Create(options);
  EXPECT_TRUE(q.ok()) << q.status();
  return q.ok() ? *std::move(q) : nullptr;
}

// Two ranks: a runs dry after 1 batch, b yields 3; a pads in step with b
// and both end at 3.
void RunTwoParticipants(const std::string& address, const std::string& name) {
  std::unique_ptr<WorkQueue> a = Worker(name, address, "a");
  std::unique_ptr<WorkQueue> b = Worker(name, address, "b");
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->AgreeSteps(R("a", 1, false)).ok());
  ASSERT_TRUE(b->AgreeSteps(R("b", 1, false)).ok());
  absl::StatusOr<StepTally> t = a->AgreeSteps(R("a", 1, true));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->agreed);
  t = a->AgreeSteps(R("a", 2, true));
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->granted);  // b is at 1
  ASSERT_TRUE(b->AgreeSteps(R("b", 2, false)).ok());
  t = a->AgreeSteps(R("a", 2, true));
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->granted);
  ASSERT_TRUE(b->AgreeSteps(R("b", 3, false)).ok());
  t = b->AgreeSteps(R("b", 3, true));
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->agreed);
  EXPECT_EQ(t->steps, 3);
  t = a->AgreeSteps(R("a", 2, true));
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->agreed);
  EXPECT_EQ(t->steps, 3);
  t = a->AgreeSteps(R("a", 4, true));  // crossed the agreement: refused
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->granted);
  std::unique_ptr<WorkQueue> c = Worker(name, address, "c");
  ASSERT_TRUE(c);
  absl::Status bad = c->AgreeSteps(R("c", 0, true)).status();  // a third of two
  EXPECT_TRUE(absl::IsFailedPrecondition(bad)) << bad;
  EXPECT_NE(std::string(bad.message()).find(name), std::string::npos) << bad;
}

TEST(AgreeSteps, InProcess) { RunTwoParticipants("", "steps-embedded"); }

TEST(AgreeSteps, OverGrpc) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  RunTwoParticipants(absl::StrCat("127.0.0.1:", (*server)->port()), "steps-remote");
  (*server)->Shutdown();
}

}  // namespace
}  // namespace shardq
