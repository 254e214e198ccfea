// Non-template parts of the queues: the wait line and the error messages.
#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "shardq/pipeline/internal/queue_internal.h"

namespace shardq::pipeline::internal {

void WaitLine::Leave(Waiter* waiter) {
  auto it = std::find(waiting_.begin(), waiting_.end(), waiter);
  if (it != waiting_.end()) waiting_.erase(it);
}

void WaitLine::WakeFront() const {
  if (!waiting_.empty()) waiting_.front()->cv.Signal();
}

void WaitLine::WakeAll() const {
  for (Waiter* waiter : waiting_) waiter->cv.Signal();
}

absl::Status ValidateQueueOptions(absl::string_view name, int64_t capacity,
                                  int64_t min_after_dequeue) {
  if (name.empty()) {
    return absl::InvalidArgumentError("queue name must not be empty");
  }
  if (capacity < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", name, "': capacity must be >= 1, got ", capacity));
  }
  if (min_after_dequeue < 0 || min_after_dequeue >= capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "queue '", name, "': min_after_dequeue must be in [0, capacity = ",
        capacity, "), got ", min_after_dequeue));
  }
  return absl::OkStatus();
}

absl::Status InvalidDequeueCountError(absl::string_view queue,
                                      absl::string_view op, int64_t n,
                                      int64_t capacity,
                                      int64_t min_after_dequeue) {
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, "(", n, ") on queue '", queue, "': count must be >= 0"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      op, "(", n, ") on queue '", queue, "' can never be served while the ",
      "queue is open: at most capacity - min_after_dequeue = ", capacity,
      " - ", min_after_dequeue, " = ", capacity - min_after_dequeue,
      " elements can be dequeued at once; raise the capacity"));
}

absl::Status ClosedForEnqueueError(absl::string_view queue,
                                   absl::string_view op) {
  return absl::FailedPreconditionError(
      absl::StrCat(op, " on queue '", queue, "': the queue is closed"));
}

absl::Status EnqueueCancelledError(absl::string_view queue,
                                   absl::string_view op, int64_t enqueued,
                                   int64_t total) {
  return absl::CancelledError(absl::StrCat(
      op, " on queue '", queue,
      "' cancelled: the queue was closed with cancel_pending (", enqueued,
      " of ", total, " elements enqueued, the rest dropped)"));
}

absl::Status EnqueueTimeoutError(absl::string_view queue,
                                 absl::string_view op, absl::Duration timeout,
                                 bool behind_others, int64_t enqueued,
                                 int64_t total) {
  return absl::DeadlineExceededError(absl::StrCat(
      op, " on queue '", queue, "' timed out after ",
      absl::FormatDuration(timeout),
      behind_others ? " waiting behind earlier producers ("
                    : " waiting for room (",
      enqueued, " of ", total, " elements enqueued, the rest dropped)"));
}

absl::Status DequeueClosedError(absl::string_view queue, absl::string_view op,
                                int64_t requested, int64_t remaining) {
  if (remaining == 0) {
    return absl::OutOfRangeError(absl::StrCat(
        op, " on queue '", queue, "': the queue is closed and empty"));
  }
  return absl::OutOfRangeError(absl::StrCat(
      op, "(", requested, ") on queue '", queue, "': the queue is closed ",
      "with only ", remaining, " elements left (none were removed)"));
}

absl::Status DequeueTimeoutError(absl::string_view queue,
                                 absl::string_view op, absl::Duration timeout,
                                 bool behind_others, int64_t requested,
                                 int64_t available) {
  return absl::DeadlineExceededError(absl::StrCat(
      op, "(", requested, ") on queue '", queue, "' timed out after ",
      absl::FormatDuration(timeout), " with ", available,
      " elements available",
      behind_others ? ", waiting behind earlier consumers" : ""));
}

absl::Time DeadlineAfter(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return absl::InfiniteFuture();
  return absl::Now() + std::max(timeout, absl::ZeroDuration());
}

}  // namespace shardq::pipeline::internal
