// Fork children of a process that used gRPC: one forked after every channel
// closed makes calls that end (no hang); one forked with a channel open is
// refused at once with the cause; the parent goes on. Each child reports
// through its exit status and is killed by alarm() if it hangs.
#include "src/rpc/grpc_fork.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include "absl/strings/match.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

constexpr int kChildAlarmSeconds = 20;
// Nothing listens there: a call fails with UNAVAILABLE once gRPC's
// connection attempt is refused (it needs gRPC's threads and timers).
constexpr char kRefusedTarget[] = "unix:/nonexistent/shardq-grpc-fork-test.sock";

std::shared_ptr<grpc::Channel> MakeChannel() {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateForkAwareChannel(
      kRefusedTarget, grpc::InsecureChannelCredentials(), grpc::ChannelArguments());
  EXPECT_TRUE(channel.ok()) << channel.status();
  return channel.ok() ? *channel : nullptr;
}

// One unary call with a 2 s deadline; its status code.
grpc::StatusCode CallOnce(grpc::Channel* channel) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  const grpc::internal::RpcMethod method("/shardq.test.Nothing/Call",
                                         grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Slice payload("x");
  grpc::ByteBuffer request(&payload, 1);
  grpc::ByteBuffer response;
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
             channel, method, &context, request, &response)
      .error_code();
}

// Runs `child` in a fork child; its exit status (128 + signal if killed).
int InChild(const std::function<int()>& child) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(kChildAlarmSeconds);  // a hang ends as SIGALRM
    _exit(child());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class GrpcForkTest : public ::testing::Test {
 protected:
  // As the Python module does, before this process's first gRPC use.
  void SetUp() override { PreferForkSafePolling(); }
};

// This process's epoll instances (gRPC's "epoll1" engine keeps one open
// after grpc_shutdown, which fork children would share).
int EpollFds() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::filesystem::path target = std::filesystem::read_symlink(entry.path(), error);
    if (!error && target.string() == "anon_inode:[eventpoll]") ++n;
  }
  return n;
}

TEST_F(GrpcForkTest, ChildForkedAfterTheLastChannelClosedMakesCallsThatEnd) {
  const int epoll_fds_before = EpollFds();
  {
    std::shared_ptr<grpc::Channel> channel = MakeChannel();
    ASSERT_NE(channel, nullptr);
    EXPECT_EQ(CallOnce(channel.get()), grpc::StatusCode::UNAVAILABLE);
  }
  // What the children would share: nothing once gRPC has shut down (the
  // first fork waits for that).
  EXPECT_EQ(InChild([] { return 0; }), 0);
  EXPECT_EQ(EpollFds(), epoll_fds_before);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(InChild([] {
                if (!CheckGrpcUsable().ok()) return 2;
                std::shared_ptr<grpc::Channel> channel = MakeChannel();
                if (channel == nullptr) return 3;
                return CallOnce(channel.get()) == grpc::StatusCode::UNAVAILABLE ? 0 : 4;
              }),
              0)
        << "child " << i << " (" << 128 + SIGALRM << ": it hung)";
  }
  std::shared_ptr<grpc::Channel> channel = MakeChannel();
  EXPECT_EQ(CallOnce(channel.get()), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrpcForkTest, ChildForkedWithAChannelOpenIsRefusedAtOnceAndTheParentGoesOn) {
  std::shared_ptr<grpc::Channel> open = MakeChannel();
  ASSERT_NE(open, nullptr);
  EXPECT_EQ(CallOnce(open.get()), grpc::StatusCode::UNAVAILABLE);
  // Made here: made in the child they would initialize gRPC there, which can
  // hang on a lock one of this process's gRPC threads held at the fork.
  const std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  EXPECT_EQ(InChild([credentials] {
              absl::Status usable = CheckGrpcUsable();
              if (!absl::IsFailedPrecondition(usable)) return 2;
              if (!absl::StrContains(usable.message(), "was forked from pid")) return 3;
              if (!absl::StrContains(usable.message(), "1 shardq gRPC connection")) return 4;
              if (!absl::StrContains(usable.message(), "multiprocessing_context='spawn'")) {
                return 5;
              }
              absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateForkAwareChannel(
                  kRefusedTarget, credentials, grpc::ChannelArguments());
              if (!absl::IsFailedPrecondition(channel.status())) return 6;
              // Its own children are refused too.
              const pid_t grandchild = fork();
              if (grandchild == 0) _exit(absl::IsFailedPrecondition(CheckGrpcUsable()) ? 0 : 1);
              int status = 0;
              waitpid(grandchild, &status, 0);
              return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 7;
            }),
            0);
  EXPECT_TRUE(CheckGrpcUsable().ok());
  EXPECT_EQ(CallOnce(open.get()), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrpcForkTest, InheritedObjectErrorNamesBothProcessesAndTheFix) {
  const absl::Status s = InheritedGrpcError("the connection to coordinator X", 4242);
  EXPECT_TRUE(absl::IsFailedPrecondition(s));
  EXPECT_TRUE(absl::StrContains(s.message(), "the connection to coordinator X was made in "
                                             "process 4242"))
      << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "multiprocessing_context='spawn'")) << s;
}

}  // namespace
}  // namespace shardq
