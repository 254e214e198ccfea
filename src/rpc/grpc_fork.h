// gRPC across fork(): what a process that used shardq over gRPC may do in
// a child it forks (PyTorch's DataLoader forks its workers from the
// training process).
//
// Debian's gRPC 1.51 cannot be carried across fork() while it runs: it is
// built without GRPC_POSIX_FORK_ALLOW_PTHREAD_ATFORK, so its EventEngine
// (thread pool, timer thread, poller: used by every channel and server) has
// no fork handlers at all (its Forkable hooks are empty), and grpc_prefork()
// only stops the older iomgr threads. A child forked while gRPC is
// initialized inherits threads that exist only in the parent. Shut down,
// gRPC keeps one thing: the "epoll1" engine's epoll set and wakeup eventfd
// stay open for the next grpc_init, so every child would share that kernel
// object with its parent and its siblings, and one process's epoll_wait
// takes another's wakeups: a call that never ends, deadline included (two
// DataLoader workers after a pass with none). The "poll" engine keeps
// nothing; a child forked while gRPC is shut down then starts it afresh.
//
// So the rules this module enforces:
//  - EnableGrpcFork() registers fork handlers; PreferForkSafePolling()
//    also makes gRPC poll with "poll" (GRPC_POLL_STRATEGY, unless the user
//    set it): the Python module does at import, since Python processes are
//    the ones that fork (C++ programs keep gRPC's default, "epoll1", which
//    notices connection events sooner);
//  - a fork child may use gRPC iff gRPC was not initialized in its parent
//    when it forked, and the parent's engine was "poll" (or gRPC was never
//    used there);
//  - when no shardq channel or server is alive but gRPC is still tearing
//    the last one down (on its own threads), a fork waits briefly (at most
//    2 s after the last one closed) for that to end, so that a fork right
//    after closing a queue works;
//  - otherwise the child records why gRPC is unusable, and CheckGrpcUsable()
//    (before any channel or server is made) fails at once with
//    FAILED_PRECONDITION naming the cause and the fixes, instead of hanging.
// The parent's gRPC is never touched: it goes on working.
//
// A child must neither use nor destroy gRPC objects it inherited (they run
// on its parent's threads and sockets): shardq's clients leak them there
// (OwnerProcess, src/core/process.h) and refuse calls on them.
//
// Thread-safe.
#ifndef SHARDQ_RPC_GRPC_FORK_H_
#define SHARDQ_RPC_GRPC_FORK_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace shardq {

// Registers the fork handlers; call before this process's first gRPC use
// (the Python module does at import). Later calls do nothing. Without it,
// CheckGrpcUsable() cannot tell a fork child from its parent.
void EnableGrpcFork();

// EnableGrpcFork(), and gRPC's "poll" polling engine unless
// GRPC_POLL_STRATEGY is set: with it, a child forked after this process
// closed its channels and servers can use gRPC (with "epoll1" it is
// refused). Call before this process's first gRPC use.
void PreferForkSafePolling();

// OK where this process may make gRPC channels and servers; in a child
// forked while its parent had gRPC initialized, FAILED_PRECONDITION saying
// so (the parent's pid, what it had open), with what to do instead.
absl::Status CheckGrpcUsable();

// grpc::CreateCustomChannel, refused (CheckGrpcUsable) in a fork child that
// cannot use gRPC. Check CheckGrpcUsable() before making `credentials`
// too: a gRPC object made there (credentials included) initializes gRPC,
// which can hang on a lock that one of the parent's threads held at the fork. The channel counts as live gRPC state (GrpcInUse) for as
// long as any copy of the returned pointer lives.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateForkAwareChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args);

// Marks a live gRPC object of shardq's (a channel, a server) for as long as
// it lives: a fork then does not wait for gRPC's teardown, and the child's
// error says what was open. Make it before the object and destroy it after.
class GrpcInUse {
 public:
  GrpcInUse();
  ~GrpcInUse();
  GrpcInUse(const GrpcInUse&) = delete;
  GrpcInUse& operator=(const GrpcInUse&) = delete;
};

// The error for a call on a gRPC object `what` made in process `owner` and
// used in this process, a fork child of it.
absl::Status InheritedGrpcError(const std::string& what, int owner);

}  // namespace shardq

#endif  // SHARDQ_RPC_GRPC_FORK_H_
