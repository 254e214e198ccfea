// The one retry helper of the client: repeats a call while it fails with
// UNAVAILABLE (coordinator down or restarting), ABORTED, or CANCELLED, with
// capped exponential backoff and jitter, until the policy's total budget is
// spent. Every other status is returned at once.
//
// CANCELLED: the client never cancels its own calls, so it comes from a
// coordinator shutting down under the call (gRPC cancels the calls it has
// not answered when its server stops, e.g. `shardq serve` on SIGTERM or on
// a storage failure). As with UNAVAILABLE, the call may or may not have
// taken effect (a repeated completion is answered as a duplicate; a
// repeated take's first lease expires and its item is handed out again).
//
// The waits here (and the remote client's wait for a coordinator's first
// answer) poll a process-wide interrupt check, so that a user's Ctrl-C ends
// a call that waits out an outage at once instead of after the budget.
#ifndef SHARDQ_CLIENT_RETRY_H_
#define SHARDQ_CLIENT_RETRY_H_

#include <algorithm>
#include <atomic>
#include <random>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace shardq {

struct RetryPolicy {
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // Give up after this long without success (the coordinator is gone).
  absl::Duration total_budget = absl::Minutes(10);
  // When set and true, a failed attempt is not retried (its owner began to
  // close while the call waited out an outage). Not owned.
  const std::atomic<bool>* stop = nullptr;
};

// A function the client's waits call every kInterruptPoll; true means the
// user asked the process to stop (the Python module installs one that runs
// Python's signal handlers, so Ctrl-C raises KeyboardInterrupt). Must be
// cheap and thread-safe; it is called from whichever thread waits.
using InterruptCheck = bool (*)();
inline constexpr absl::Duration kInterruptPoll = absl::Milliseconds(100);

namespace retry_internal {
inline std::atomic<InterruptCheck> interrupt_check{nullptr};
// This thread's own interrupt (ScopedInterrupt); null when none.
inline thread_local const std::atomic<bool>* thread_interrupt = nullptr;
}  // namespace retry_internal

// While alive, the waits of this thread also end once *interrupt is true
// (as if the process-wide check fired): for a call that only its caller
// abandons, such as a pipeline's take when the pipeline stops. `interrupt`
// (may be null: nothing) must outlive this object. Not nestable.
class ScopedInterrupt {
 public:
  explicit ScopedInterrupt(const std::atomic<bool>* interrupt) {
    retry_internal::thread_interrupt = interrupt;
  }
  ~ScopedInterrupt() { retry_internal::thread_interrupt = nullptr; }
  ScopedInterrupt(const ScopedInterrupt&) = delete;
  ScopedInterrupt& operator=(const ScopedInterrupt&) = delete;
};

// Installs the process-wide check (nullptr: never interrupted).
inline void SetInterruptCheck(InterruptCheck check) {
  retry_internal::interrupt_check.store(check);
}

// Whether the installed check (or this thread's ScopedInterrupt) says to
// stop now.
inline bool InterruptRequested() {
  const std::atomic<bool>* own = retry_internal::thread_interrupt;
  if (own != nullptr && own->load(std::memory_order_acquire)) return true;
  const InterruptCheck check = retry_internal::interrupt_check.load();
  return check != nullptr && check();
}

// Sleeps `duration`, polling InterruptRequested(); false when interrupted.
inline bool SleepUnlessInterrupted(absl::Duration duration) {
  const absl::Time until = absl::Now() + duration;
  while (true) {
    if (InterruptRequested()) return false;
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return true;
    absl::SleepFor(std::min(left, kInterruptPoll));
  }
}

inline bool IsRetryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsAborted(status) || absl::IsCancelled(status);
}

namespace retry_internal {
inline const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) { return s.status(); }
}  // namespace retry_internal

// `call` returns absl::Status or absl::StatusOr<T>. `what` names the call in
// the final error. CANCELLED "interrupted" (not retried) when the interrupt
// check fires during a backoff. Not thread-affine; safe to use from any
// thread.
template <typename Call>
auto CallWithRetry(const RetryPolicy& policy, absl::string_view what, Call call)
    -> decltype(call()) {
  const absl::Time give_up = absl::Now() + policy.total_budget;
  absl::Duration backoff = policy.initial_backoff;
  thread_local std::minstd_rand jitter(std::random_device{}());
  while (true) {
    auto result = call();
    const absl::Status& status = retry_internal::StatusOf(result);
    if (!IsRetryable(status)) return result;
    if (policy.stop != nullptr && policy.stop->load()) return result;
    const absl::Time now = absl::Now();
    if (now >= give_up) {
      return absl::Status(status.code(),
                          absl::StrCat(what, ": gave up after ",
                                       absl::FormatDuration(policy.total_budget),
                                       " of retries: ", status.message()));
    }
    // Sleep a random 50-100% of the backoff so restarting coordinators are
    // not hit by every client at once.
    const double factor = 0.5 + 0.5 * (static_cast<double>(jitter() - jitter.min()) /
                                       static_cast<double>(jitter.max() - jitter.min()));
    if (!SleepUnlessInterrupted(std::min(backoff * factor, give_up - now))) {
      return absl::CancelledError(absl::StrCat(what, ": interrupted while retrying after: ",
                                               status.message()));
    }
    backoff = std::min(backoff * 2, policy.max_backoff);
  }
}

}  // namespace shardq

#endif  // SHARDQ_CLIENT_RETRY_H_
