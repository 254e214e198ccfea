// How absl::Mutex behaves in a shardq process.
//
// Debian's abseil is built without NDEBUG, so by default every
// absl::Mutex::Lock checks the lock order for deadlocks: each lock and
// unlock of every thread goes through one process-wide spin lock and a
// lock-order graph. Measured here (2 cores): two threads locking mutexes
// of their own take 300 ns a lock with the check and 8 ns without; one
// thread taking two nested mutexes 73 ns a pair instead of 15. A fork
// child can also hang in Mutex::Lock on that spin lock when a parent
// thread held it at the fork (a grpc_fork_test child did, in grpc_init:
// Mutex::Lock spinning in SpinLock::SlowLock). The product's entry points (the shardq command, the Python
// module, the benchmarks) turn the check off; the C++ tests keep it on, so
// that a lock-order inversion still fails a test.
#ifndef SHARDQ_LOG_MUTEX_MODE_H_
#define SHARDQ_LOG_MUTEX_MODE_H_

namespace shardq {

// Turns absl's mutex deadlock detection off for this process, unless the
// environment has SHARDQ_MUTEX_DEADLOCK_CHECK=1 (then it stays as abseil
// set it: on in a build without NDEBUG). Call at process start, before
// other threads lock mutexes; calling it again does nothing more.
void UseProductionMutexMode();

}  // namespace shardq

#endif  // SHARDQ_LOG_MUTEX_MODE_H_
