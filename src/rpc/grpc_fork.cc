#include "src/rpc/grpc_fork.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include <grpc/fork.h>
#include <grpc/grpc.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace shardq {
namespace {

// gRPC activity that may be inside gRPC right now (GrpcActivity).
std::atomic<int> g_active{0};

// Set by the fork handlers (they run in the forking thread, the child's
// only thread, with no other fork in progress: fork() serialises them).
bool g_prepared = false;      // grpc_prefork ran: postfork hooks are due
int g_active_at_fork = 0;     // g_active when the fork began
bool g_support_off = false;   // gRPC was running with fork support off
pid_t g_parent = 0;           // the forking process, as the child sees it

// Why gRPC cannot be used in this process (a fork child); empty: it can.
// Written only by PostforkChild, before the child runs anything else.
std::string* g_unusable = nullptr;

bool ForkSupportOn() {
  const char* v = std::getenv("GRPC_ENABLE_FORK_SUPPORT");
  if (v == nullptr) return false;
  const std::string value = absl::AsciiStrToLower(v);
  return value == "1" || value == "true" || value == "yes";
}

void Prefork() {
  g_prepared = false;
  g_support_off = false;
  g_active_at_fork = g_active.load();
  g_parent = getpid();
  if (!grpc_is_initialized()) return;  // nothing of gRPC's runs: the child starts it afresh
  if (g_active_at_fork > 0) return;    // a thread may be inside gRPC: the child cannot use it
  if (!ForkSupportOn()) {
    g_support_off = true;
    return;
  }
  grpc_prefork();
  g_prepared = true;
}

void PostforkParent() {
  if (g_prepared) grpc_postfork_parent();
}

void PostforkChild() {
  if (g_prepared) grpc_postfork_child();
  const pid_t self = getpid();
  if (g_active_at_fork > 0) {
    g_unusable = new std::string(absl::StrCat(
        "this process (pid ", self, ") was forked from pid ", g_parent, " while that process had ",
        g_active_at_fork,
        " shardq gRPC connection(s) or server(s) in use (an open WorkQueue or session, an "
        "in-process coordinator); gRPC cannot work in such a child (it would hang). Close them "
        "before forking (make the WorkQueue in the child), or start children with the 'spawn' "
        "or 'forkserver' method (torch: DataLoader(..., multiprocessing_context='spawn'))"));
  } else if (g_support_off) {
    g_unusable = new std::string(absl::StrCat(
        "this process (pid ", self, ") was forked from pid ", g_parent,
        ", which used gRPC with GRPC_ENABLE_FORK_SUPPORT off; gRPC cannot work in such a child "
        "(it would hang). Unset GRPC_ENABLE_FORK_SUPPORT (shardq turns it on), or start "
        "children with the 'spawn' or 'forkserver' method"));
  }
  g_active.store(0);  // the threads it counted are not in this process
}

}  // namespace

void EnableGrpcFork() {
  static std::once_flag once;
  std::call_once(once, [] {
    setenv("GRPC_ENABLE_FORK_SUPPORT", "true", /*overwrite=*/0);
    pthread_atfork(Prefork, PostforkParent, PostforkChild);
  });
}

absl::Status CheckGrpcUsable() {
  if (g_unusable == nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(*g_unusable);
}

GrpcActivity::GrpcActivity() { g_active.fetch_add(1); }

GrpcActivity::~GrpcActivity() {
  // A child may destroy an activity it inherited: never below zero.
  int n = g_active.load();
  while (n > 0 && !g_active.compare_exchange_weak(n, n - 1)) {
  }
}

}  // namespace shardq
