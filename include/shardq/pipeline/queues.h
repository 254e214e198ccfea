// Bounded producer/consumer queues of the input pipeline, in the shape of
// TensorFlow's FIFOQueue / RandomShuffleQueue / PriorityQueue:
//
//   QueueOptions options;
//   options.name = "records";
//   options.capacity = 64;
//   auto queue = FifoQueue<Record>::Create(options);  // StatusOr<unique_ptr>
//   producer threads:  (*queue)->Enqueue(record);     // blocks while full
//   consumer threads:  (*queue)->DequeueMany(batch);  // blocks while short
//   at end of input:   (*queue)->Close();             // consumers drain,
//                                                     // then OUT_OF_RANGE
//
// Contract shared by every queue kind:
//  * Bounded: at most capacity() elements are held; producers block while
//    the queue is full, consumers while it holds too few elements.
//  * Every blocking call takes a timeout (default: wait forever); when it
//    runs out the call fails with DEADLINE_EXCEEDED. A zero timeout polls.
//  * Turns: blocked producers are served in arrival order, and so are
//    blocked consumers. A DequeueMany(n) waiting for n elements is not
//    overtaken by a later Dequeue (which therefore may time out although
//    elements are present), and the elements of one EnqueueMany are never
//    interleaved with those of another producer.
//  * Close(): Enqueue afterwards fails with FAILED_PRECONDITION. Producers
//    already blocked stay blocked and finish as room frees up. Consumers
//    drain what is left, including what those producers still add
//    (min_after_dequeue no longer applies), then get OUT_OF_RANGE.
//  * Close(/*cancel_pending=*/true): as Close(), and every blocked producer
//    is woken with CANCELLED; the elements it had not enqueued are dropped.
//  * Every error message names the queue and the operation.
//  * Elements are moved, never copied: move-only types are fine. Elements
//    that a failing enqueue call did not add are destroyed.
//
// All queues are thread-safe.
#ifndef SHARDQ_PIPELINE_QUEUES_H_
#define SHARDQ_PIPELINE_QUEUES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shardq/pipeline/internal/queue_internal.h"

namespace shardq::pipeline {

struct QueueOptions {
  // Names the queue in every error message; pick one a user can grep for.
  std::string name = "queue";
  // Most elements held at once (>= 1). Larger smooths out bursts of the
  // producers at the cost of memory.
  int64_t capacity = 1024;
};

struct RandomShuffleQueueOptions {
  std::string name = "random_shuffle_queue";
  // Most elements held at once (> min_after_dequeue).
  int64_t capacity = 1024;
  // While the queue is open, a dequeue leaves at least this many elements
  // behind, so every element is drawn from a pool of more than this size.
  // Larger mixes better but delays the first element and holds more
  // memory. 0 <= min_after_dequeue < capacity.
  int64_t min_after_dequeue = 0;
  // Seeds the choice of the dequeued element (SplitMix64, see
  // shardq/internal/rng.h). The same seed and the same sequence of calls give the
  // same order on every machine; with several producer or consumer threads
  // the sequence of calls itself is what varies.
  uint64_t seed = 0;
};

// The base of every queue kind, holding the blocking, close and cancel
// logic; the kinds differ only in which element a dequeue takes. Pipeline
// stages and QueueRunner take a Queue<T>* so that any kind fits.
template <typename T>
class Queue {
 public:
  using value_type = T;

  virtual ~Queue() = default;
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // Adds `value`, blocking while the queue is full. FAILED_PRECONDITION if
  // the queue was closed before the call; CANCELLED if it was closed with
  // cancel_pending while the call waited; DEADLINE_EXCEEDED after
  // `timeout`. On error `value` is dropped and the queue is unchanged.
  absl::Status Enqueue(T value,
                       absl::Duration timeout = absl::InfiniteDuration());

  // Adds `values` in order, contiguously. More than the free room (even
  // more than capacity()) is fine: the call adds what fits and waits for
  // room for the rest, so consumers may see the first elements before the
  // call returns. Errors as Enqueue; on CANCELLED or DEADLINE_EXCEEDED the
  // elements added so far stay (the message says how many) and the rest
  // are dropped. An empty `values` is OK unless the queue is closed.
  absl::Status EnqueueMany(std::vector<T> values,
                           absl::Duration timeout = absl::InfiniteDuration());

  // Removes one element, blocking while none is available (for a
  // RandomShuffleQueue: while size() <= min_after_dequeue and the queue is
  // open). OUT_OF_RANGE once the queue is closed and drained;
  // DEADLINE_EXCEEDED after `timeout`.
  absl::StatusOr<T> Dequeue(absl::Duration timeout = absl::InfiniteDuration());

  // Removes exactly `n` elements, all at once, blocking until `n` are
  // available. OUT_OF_RANGE if the queue is closed with fewer than `n`
  // left: nothing is removed then, so a DequeueUpTo can still drain them.
  // INVALID_ARGUMENT if n < 0 or if n could never be available while the
  // queue is open (n > capacity - min_after_dequeue). n == 0 returns an
  // empty vector at once. DEADLINE_EXCEEDED after `timeout`, removing
  // nothing.
  absl::StatusOr<std::vector<T>> DequeueMany(
      int64_t n, absl::Duration timeout = absl::InfiniteDuration());

  // As DequeueMany while the queue is open (waits for `n`); once it is
  // closed, returns whatever is left, 1 to n elements, and OUT_OF_RANGE
  // only when nothing is left. This is how the last, short batch is read.
  // Other errors as DequeueMany.
  absl::StatusOr<std::vector<T>> DequeueUpTo(
      int64_t n, absl::Duration timeout = absl::InfiniteDuration());

  // Closes the queue for producers (see the contract at the top of this
  // file). Idempotent; a later Close(true) still cancels the producers
  // that are blocked at that moment.
  void Close(bool cancel_pending = false);

  const std::string& name() const { return name_; }
  int64_t capacity() const { return capacity_; }
  // The water level: elements held right now.
  int64_t size() const;
  bool closed() const;
  // Callers blocked in an enqueue / dequeue call right now; for monitoring
  // (a starved consumer side shows waiting consumers) and for tests.
  int64_t num_waiting_producers() const;
  int64_t num_waiting_consumers() const;

 protected:
  // `min_after_dequeue` elements are held back from consumers while the
  // queue is open. The options are validated by the factories.
  Queue(std::string name, int64_t capacity, int64_t min_after_dequeue,
        std::unique_ptr<internal::QueueBuffer<T>> buffer);

 private:
  // Adds values[0..n) under the turn rules; `op` names the call in errors.
  absl::Status EnqueueRange(T* values, int64_t n, absl::Duration timeout,
                            absl::string_view op) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes and returns up to `n` elements, at least 1 once the queue is
  // closed and `partial_after_close`, else exactly `n`.
  absl::StatusOr<std::vector<T>> DequeueRange(int64_t n,
                                              bool partial_after_close,
                                              absl::Duration timeout,
                                              absl::string_view op)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for this consumer's turn and enough elements; returns how many
  // to take. The caller takes them before releasing mu_.
  absl::StatusOr<int64_t> AwaitElementsLocked(int64_t n,
                                              bool partial_after_close,
                                              absl::Time deadline,
                                              absl::Duration timeout,
                                              absl::string_view op)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Elements a consumer may take now.
  int64_t AvailableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const int64_t capacity_;
  const int64_t min_after_dequeue_;

  mutable absl::Mutex mu_;
  const std::unique_ptr<internal::QueueBuffer<T>> buffer_
      ABSL_PT_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Blocked callers. The front producer is woken when room frees up, the
  // front consumer when elements arrive, on Close, or when a producer of a
  // closed queue leaves (once none is left, the queue's end is final).
  internal::WaitLine producers_ ABSL_GUARDED_BY(mu_);
  internal::WaitLine consumers_ ABSL_GUARDED_BY(mu_);
};

// First in, first out. Thread-safe.
template <typename T>
class FifoQueue final : public Queue<T> {
 public:
  // INVALID_ARGUMENT naming the field if `options` cannot make a queue.
  static absl::StatusOr<std::unique_ptr<FifoQueue<T>>> Create(
      const QueueOptions& options);

 private:
  explicit FifoQueue(const QueueOptions& options);
};

// Dequeues a uniformly random element among those held, keeping at least
// min_after_dequeue behind while open: a shuffle buffer. Thread-safe.
template <typename T>
class RandomShuffleQueue final : public Queue<T> {
 public:
  // INVALID_ARGUMENT naming the field if `options` cannot make a queue.
  static absl::StatusOr<std::unique_ptr<RandomShuffleQueue<T>>> Create(
      const RandomShuffleQueueOptions& options);

  int64_t min_after_dequeue() const { return min_after_dequeue_; }
  uint64_t seed() const { return seed_; }

 private:
  explicit RandomShuffleQueue(const RandomShuffleQueueOptions& options);

  const int64_t min_after_dequeue_;
  const uint64_t seed_;
};

// An element of a PriorityQueue: enqueue {priority, value}; a dequeue
// returns both.
template <typename T>
struct Prioritized {
  int64_t priority = 0;
  T value;
};

// Dequeues the SMALLEST priority first (as TensorFlow's PriorityQueue), in
// enqueue order among equal priorities. A Queue<Prioritized<T>>:
//   queue->Enqueue({/*priority=*/3, value});
// Thread-safe.
template <typename T>
class PriorityQueue final : public Queue<Prioritized<T>> {
 public:
  // INVALID_ARGUMENT naming the field if `options` cannot make a queue.
  static absl::StatusOr<std::unique_ptr<PriorityQueue<T>>> Create(
      const QueueOptions& options);

 private:
  explicit PriorityQueue(const QueueOptions& options);
};

}  // namespace shardq::pipeline

// Template definitions.
#include "shardq/pipeline/internal/queues_impl.h"  // IWYU pragma: export

#endif  // SHARDQ_PIPELINE_QUEUES_H_
