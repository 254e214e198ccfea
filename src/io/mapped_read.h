// Reads out of memory-mapped files that turn a vanished page into an error.
//
// A reader that copies records straight out of a file's mapping skips the
// kernel's copy into a read buffer (half of what reading a file from the
// page cache costs: bench/results/read_throughput.md). The price of a
// mapping is that a file cut shorter while it is mapped, or a page the
// device cannot return, is not a short read or EIO but a SIGBUS that ends
// the process. The functions here touch a mapping only inside a guard: a
// SIGBUS raised by an address inside the guarded range, on the thread that
// guards it, returns false from the guarded call instead; every other
// SIGBUS goes on to the handler installed before ours (Python's
// faulthandler, say), or kills the process as it would have without shardq.
//
// The guard is a process-wide SIGBUS handler (installed on first use, and
// again if another library replaced it since) plus a sigsetjmp per call
// (a few nanoseconds, no system call). The guarded code is a leaf copy or
// checksum: nothing with a destructor is skipped when a fault jumps out.
#ifndef SHARDQ_IO_MAPPED_READ_H_
#define SHARDQ_IO_MAPPED_READ_H_

#include <setjmp.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace shardq {

namespace mapped_read_internal {
// One guarded call in progress on a thread (nested calls chain by outer).
struct Guard {
  sigjmp_buf env;
  uintptr_t lo;  // [lo, hi): the mapped bytes the call may touch
  uintptr_t hi;
  Guard* outer;
};
// Makes `guard` this thread's guard; Leave restores the one it replaced.
void Enter(Guard* guard);
void Leave(Guard* guard);
}  // namespace mapped_read_internal

// Makes sure the guard's SIGBUS handler is the one installed, chaining to
// whatever handler it replaces. Called by whoever creates a mapping that
// will be read through the functions below; cheap enough per file (one
// sigaction call when nothing changed). Thread-safe.
void InstallMappedReadGuard();

// Runs fn() so that a SIGBUS raised by touching [src, src + n) returns
// false instead of ending the process. fn must touch no other mapped bytes
// and be a leaf as far as the fault goes: nothing it creates may need a
// destructor, and it must not allocate or lock (a fault jumps out of it;
// a std::string append into room reserved before is fine: a fault leaves
// the string as it was). Write its results through references and read
// them only after a true return. Not for code that throws.
template <typename Fn>
bool RunMappedGuarded(const char* src, size_t n, Fn&& fn) {
  mapped_read_internal::Guard guard;
  guard.lo = reinterpret_cast<uintptr_t>(src);
  guard.hi = guard.lo + n;
  // savemask 0: no system call. The handler runs with SA_NODEFER, so SIGBUS
  // is not left blocked after the jump.
  if (sigsetjmp(guard.env, 0) != 0) {
    mapped_read_internal::Leave(&guard);
    return false;
  }
  mapped_read_internal::Enter(&guard);
  std::forward<Fn>(fn)();
  mapped_read_internal::Leave(&guard);
  return true;
}

// Copies src[0, n) (inside a mapping) to dst. False when a page of the
// source vanished (SIGBUS); dst then holds an unspecified prefix.
bool GuardedCopy(const char* src, size_t n, char* dst);

// Finds the first '\n' in src[0, n): *found = its address or null. False
// when a page vanished.
bool GuardedFindNewline(const char* src, size_t n, const char** found);

}  // namespace shardq

#endif  // SHARDQ_IO_MAPPED_READ_H_
