// Test-only, linked into TSan builds of the pipeline tests: makes absl::Mutex
// visible to ThreadSanitizer.
//
// Why: Debian's libabsl is not built with -fsanitize=thread, so the
// happens-before edges of absl::Mutex (its annotations are compiled out and
// it sleeps on raw futexes) are invisible to TSan, which then reports every
// field guarded by a Mutex as a data race. This file interposes the
// exported Mutex / CondVar entry points (the executable's definitions win
// over the shared library's), forwards to the real ones found with
// dlsym(RTLD_NEXT), and tells TSan about the lock: acquire after locking,
// release before unlocking, both around a CondVar wait.
//
// Limits: absl::Condition predicates run inside abseil, sometimes in the
// thread that unlocks, and are not modelled; code checked with this shim
// waits on CondVars. Written for the abseil whose exported functions it
// names (LTS 20220623, as in Debian bookworm); CMake links it only there.
// Building abseil itself with -fsanitize=thread makes it unnecessary.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/base/config.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace {

#define SHARDQ_STRINGIZE_INNER(x) #x
#define SHARDQ_STRINGIZE(x) SHARDQ_STRINGIZE_INNER(x)

// The Itanium-mangled name of absl::<suffix>, e.g. "5Mutex4LockEv", with
// the inline namespace of this abseil build.
std::string MangledAbslName(const char* suffix) {
#if ABSL_OPTION_USE_INLINE_NAMESPACE
  const char* inline_namespace =
      SHARDQ_STRINGIZE(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  return "_ZN4absl" + std::to_string(std::strlen(inline_namespace)) +
         inline_namespace + suffix;
#else
  return std::string("_ZN4absl") + suffix;
#endif
}

template <typename Function>
Function Real(const char* suffix) {
  const std::string name = MangledAbslName(suffix);
  void* function = dlsym(RTLD_NEXT, name.c_str());
  if (function == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex_shim: %s not found\n",
                 name.c_str());
    std::abort();
  }
  return reinterpret_cast<Function>(function);
}

// absl's deadlock detector keeps its graph of mutexes under an internal
// spin lock that this shim cannot show to TSan, whose memmove interceptor
// then reports two threads updating the graph as a race. TSan checks lock
// order itself: switch the detector off in these builds.
const bool kDeadlockDetectorOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  static const auto real = Real<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::ReaderLock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::ReaderTryLock() {
  static const auto real = Real<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

// LockWhen* hold the lock on return whatever they return.
void Mutex::LockWhen(const Condition& cond) {
  static const auto real = Real<void (*)(Mutex*, const Condition&)>(
      "5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = real(this, cond, deadline);
  __tsan_acquire(this);
  return result;
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool result = real(this, cond, timeout);
  __tsan_acquire(this);
  return result;
}

void Mutex::Await(const Condition& cond) {
  static const auto real = Real<void (*)(Mutex*, const Condition&)>(
      "5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  const bool result = real(this, cond, deadline);
  __tsan_acquire(this);
  return result;
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool result = real(this, cond, timeout);
  __tsan_acquire(this);
  return result;
}

void CondVar::Wait(Mutex* mu) {
  static const auto real =
      Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl
