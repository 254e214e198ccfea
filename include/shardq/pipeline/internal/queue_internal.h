// Internal building blocks of include/shardq/pipeline/queues.h: the element
// store interface, the line in which blocked producers or consumers take
// turns, and the error messages. Not part of the public API. WaitLine and
// the buffers are thread-compatible: the owning Queue calls them only with
// its mutex held.
#ifndef SHARDQ_SRC_PIPELINE_QUEUE_INTERNAL_H_
#define SHARDQ_SRC_PIPELINE_QUEUE_INTERNAL_H_

#include <cstdint>
#include <deque>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardq::pipeline::internal {

// Callers of one side of a queue (producers or consumers), oldest first.
// Only the front caller may act, so a DequeueMany(n) is not starved by
// later single Dequeues and an EnqueueMany's elements stay contiguous.
// Each waiter has its own CondVar, so a state change wakes only the caller
// that can use it rather than the whole side.
class WaitLine {
 public:
  struct Waiter {
    absl::CondVar cv;
  };

  void Join(Waiter* waiter) { waiting_.push_back(waiter); }
  void Leave(Waiter* waiter);
  bool AtFront(const Waiter* waiter) const {
    return !waiting_.empty() && waiting_.front() == waiter;
  }
  bool empty() const { return waiting_.empty(); }
  int64_t size() const { return static_cast<int64_t>(waiting_.size()); }
  // Wakes the front waiter (if any): it is the only one that can act.
  void WakeFront() const;
  // Wakes every waiter: each has to leave (cancel).
  void WakeAll() const;

 private:
  std::deque<Waiter*> waiting_;
};

// Where a queue keeps its elements; decides only the dequeue order.
template <typename T>
class QueueBuffer {
 public:
  virtual ~QueueBuffer() = default;
  virtual int64_t size() const = 0;
  virtual void Push(T value) = 0;
  // Requires size() > 0.
  virtual T Pop() = 0;
};

// INVALID_ARGUMENT naming the field and value the factories reject.
absl::Status ValidateQueueOptions(absl::string_view name, int64_t capacity,
                                  int64_t min_after_dequeue);

// Error messages; each names the queue and the operation.
absl::Status InvalidDequeueCountError(absl::string_view queue,
                                      absl::string_view op, int64_t n,
                                      int64_t capacity,
                                      int64_t min_after_dequeue);
absl::Status ClosedForEnqueueError(absl::string_view queue,
                                   absl::string_view op);
absl::Status EnqueueCancelledError(absl::string_view queue,
                                   absl::string_view op, int64_t enqueued,
                                   int64_t total);
// `behind_others`: the caller never reached the front of its line.
absl::Status EnqueueTimeoutError(absl::string_view queue,
                                 absl::string_view op, absl::Duration timeout,
                                 bool behind_others, int64_t enqueued,
                                 int64_t total);
absl::Status DequeueClosedError(absl::string_view queue, absl::string_view op,
                                int64_t requested, int64_t remaining);
absl::Status DequeueTimeoutError(absl::string_view queue,
                                 absl::string_view op, absl::Duration timeout,
                                 bool behind_others, int64_t requested,
                                 int64_t available);

// The absolute deadline `timeout` from now; InfiniteFuture for an infinite
// timeout, now (poll once) for a zero or negative one.
absl::Time DeadlineAfter(absl::Duration timeout);

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_QUEUE_INTERNAL_H_
