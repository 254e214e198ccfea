#include "src/rpc/grpc_fork.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <cstdlib>
#include <string>
#include <thread>

#include <grpc/grpc.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"

namespace shardq {
namespace {

// How long a fork waits, after shardq's last gRPC object is gone, for gRPC
// to finish shutting down (it may end the last channel on its own threads).
constexpr std::chrono::milliseconds kTeardownWait{2000};
constexpr std::chrono::milliseconds kTeardownPoll{1};

constexpr char kFixes[] =
    "Close them before forking (make the WorkQueue in the child), or start children with the "
    "'spawn' or 'forkserver' method (torch: DataLoader(..., multiprocessing_context='spawn'))";

// shardq's live gRPC objects (GrpcInUse), whether there ever was one, and
// when the last one went.
std::atomic<int> g_live{0};
std::atomic<bool> g_ever_used{false};
std::atomic<int64_t> g_last_release_ns{0};  // steady_clock

int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What the forking thread saw when the fork began. thread_local: the three
// handlers of one fork run in one thread (the child's only thread is its
// copy), and two threads may fork at once.
struct ForkSnapshot {
  pid_t parent = 0;
  int live = 0;
  bool grpc_initialized = false;
  // gRPC was used here with a polling engine that outlives grpc_shutdown.
  bool shared_polling = false;
};
thread_local ForkSnapshot t_at_fork;

// Why gRPC cannot be used in this process (a fork child); null: it can.
// Written only by PostforkChild, before the child runs anything else (and
// inherited as it is by the child's own children).
const std::string* g_unusable = nullptr;

// True once gRPC has shut down, or at the deadline.
// True when gRPC polls with "poll" (GRPC_POLL_STRATEGY lists the engines
// to try, the first that works wins; "poll" always does).
bool PollsWithPoll() {
  const char* v = std::getenv("GRPC_POLL_STRATEGY");
  if (v == nullptr) return false;
  const std::string first = absl::AsciiStrToLower(absl::string_view(v).substr(
      0, absl::string_view(v).find(',')));
  return first == "poll";
}

bool AwaitGrpcShutdown(int64_t deadline_ns) {
  while (grpc_is_initialized()) {
    if (SteadyNowNs() >= deadline_ns) return false;
    std::this_thread::sleep_for(kTeardownPoll);
  }
  return true;
}

void Prefork() {
  ForkSnapshot& snap = t_at_fork;
  snap = ForkSnapshot();
  snap.parent = getpid();
  snap.live = g_live.load();
  if (g_unusable != nullptr) {
    snap.grpc_initialized = true;  // the parent's, inherited: it never shuts down here
    return;
  }
  if (snap.live > 0) {
    snap.grpc_initialized = grpc_is_initialized();
    return;
  }
  // The wait is bounded by the last release, so a gRPC that someone else
  // keeps running costs a fork nothing.
  const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(kTeardownWait);
  snap.grpc_initialized = !AwaitGrpcShutdown(g_last_release_ns.load() + wait.count());
  // Shut down, gRPC's "epoll1" engine still keeps its epoll set and wakeup
  // eventfd open for the next grpc_init: children would share that one
  // kernel object with this process and each other, and one child's
  // epoll_wait would take another's wakeups (a call that never ends).
  // "poll" keeps nothing (PreferForkSafePolling chooses it).
  snap.shared_polling = !snap.grpc_initialized && g_ever_used.load() && !PollsWithPoll();
}

void PostforkChild() {
  const ForkSnapshot& snap = t_at_fork;
  g_live.store(0);  // the objects it counted belong to the parent
  if (g_unusable != nullptr) return;
  const pid_t self = getpid();
  if (snap.shared_polling) {
    g_unusable = new std::string(absl::StrCat(
        "this process (pid ", self, ") was forked from pid ", snap.parent,
        ", which used gRPC with GRPC_POLL_STRATEGY=",
        std::getenv("GRPC_POLL_STRATEGY") == nullptr ? "(unset)"
                                                     : std::getenv("GRPC_POLL_STRATEGY"),
        ": that engine's epoll set outlives gRPC's shutdown and is shared by all its "
        "children, where a call can wait forever. Unset GRPC_POLL_STRATEGY (the shardq "
        "Python module then chooses 'poll'), or start children with the 'spawn' or "
        "'forkserver' method (torch: DataLoader(..., multiprocessing_context='spawn'))"));
    return;
  }
  if (!snap.grpc_initialized) return;
  if (snap.live > 0) {
    g_unusable = new std::string(absl::StrCat(
        "this process (pid ", self, ") was forked from pid ", snap.parent,
        " while that process had ", snap.live,
        " shardq gRPC connection(s) or server(s) open (a WorkQueue, a worker session, an "
        "in-process coordinator); gRPC cannot work in such a child (its threads are the "
        "parent's: a call would hang). ",
        kFixes));
  } else {
    g_unusable = new std::string(absl::StrCat(
        "this process (pid ", self, ") was forked from pid ", snap.parent,
        " while gRPC was running in it (used by something other than shardq, or still shutting "
        "down ",
        kTeardownWait.count(), " ms after shardq's last connection closed); gRPC cannot work "
        "in such a child (its threads are the parent's: a call would hang). ",
        kFixes));
  }
}

}  // namespace

void EnableGrpcFork() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(Prefork, /*parent=*/nullptr, PostforkChild); });
}

void PreferForkSafePolling() {
  // Read by gRPC at its first init; the user's value stands.
  setenv("GRPC_POLL_STRATEGY", "poll", /*overwrite=*/0);
  EnableGrpcFork();
}

absl::Status CheckGrpcUsable() {
  if (g_unusable == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(*g_unusable);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateForkAwareChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args) {
  EnableGrpcFork();
  if (absl::Status usable = CheckGrpcUsable(); !usable.ok()) return usable;
  // The mark is made before the channel and goes after it (members are
  // destroyed in reverse order); the returned pointer shares its owner.
  struct Counted {
    GrpcInUse in_use;
    std::shared_ptr<grpc::Channel> channel;
  };
  auto counted = std::make_shared<Counted>();
  counted->channel = grpc::CreateCustomChannel(target, credentials, args);
  grpc::Channel* channel = counted->channel.get();
  return std::shared_ptr<grpc::Channel>(std::move(counted), channel);
}

GrpcInUse::GrpcInUse() {
  g_ever_used.store(true);
  g_live.fetch_add(1);
}

GrpcInUse::~GrpcInUse() {
  g_last_release_ns.store(SteadyNowNs());
  // A child may destroy a mark it inherited (PostforkChild zeroed the
  // count): never below zero.
  int n = g_live.load();
  while (n > 0 && !g_live.compare_exchange_weak(n, n - 1)) {
  }
}

absl::Status InheritedGrpcError(const std::string& what, int owner) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, " was made in process ", owner, "; this process (pid ", getpid(),
      ") is a fork of it and cannot use it (its gRPC connection is the parent's: a call would "
      "hang). Make a new WorkQueue in the child, or start children with the 'spawn' or "
      "'forkserver' method (torch: DataLoader(..., multiprocessing_context='spawn'))"));
}

}  // namespace shardq
