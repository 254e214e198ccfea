// gRPC across fork(): what a process that used shardq over gRPC may do in
// a child it forks (PyTorch's DataLoader forks its workers from the
// training process).
//
// gRPC keeps threads (timers, executor, pollers) that a forked child does
// not have; a child that makes a new channel on that inherited state hangs
// in its first call. gRPC can stop those threads around a fork when its fork
// support is on and no thread is inside gRPC at that moment. This module:
//  - EnableGrpcFork() turns gRPC's fork support on and registers fork
//    handlers that call gRPC's prefork/postfork hooks;
//  - counts the gRPC activity in this process that can be inside gRPC when
//    the process forks (open worker sessions, in-process servers, unary
//    calls in flight: GrpcActivity);
//  - in a child forked while that count was not zero (where gRPC could not
//    be prepared), CheckGrpcUsable() returns FAILED_PRECONDITION naming the
//    cause and the fixes, so the child fails at once instead of hanging.
// A child must not use or destroy gRPC objects it inherited (their sockets
// are its parent's); shardq's clients are made anew in the child.
//
// Thread-safe.
#ifndef SHARDQ_RPC_GRPC_FORK_H_
#define SHARDQ_RPC_GRPC_FORK_H_

#include "absl/status/status.h"

namespace shardq {

// Call before this process's first gRPC call (the Python module does at
// import); later calls do nothing. Sets GRPC_ENABLE_FORK_SUPPORT unless the
// environment already sets it (then the user's value stands: "false" turns
// the preparation off, and a fork child then fails in CheckGrpcUsable).
void EnableGrpcFork();

// OK where this process may make gRPC channels and servers; in a child
// forked while its parent had gRPC activity (or with fork support off),
// FAILED_PRECONDITION saying so, with what to do instead.
absl::Status CheckGrpcUsable();

// Marks gRPC activity that may be blocked inside gRPC when the process
// forks, for as long as it lives. Movable-free: make one per activity.
class GrpcActivity {
 public:
  GrpcActivity();
  ~GrpcActivity();
  GrpcActivity(const GrpcActivity&) = delete;
  GrpcActivity& operator=(const GrpcActivity&) = delete;
};

}  // namespace shardq

#endif  // SHARDQ_RPC_GRPC_FORK_H_
