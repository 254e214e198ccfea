// Template definitions for include/shardq/pipeline/queues.h; include that
// header, not this one.
#ifndef SHARDQ_SRC_PIPELINE_QUEUES_IMPL_H_
#define SHARDQ_SRC_PIPELINE_QUEUES_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shardq/pipeline/queues.h"
#include "shardq/internal/rng.h"
#include "shardq/pipeline/internal/queue_internal.h"

namespace shardq::pipeline {
namespace internal {

template <typename T>
class FifoBuffer final : public QueueBuffer<T> {
 public:
  int64_t size() const override {
    return static_cast<int64_t>(elements_.size());
  }
  void Push(T value) override { elements_.push_back(std::move(value)); }
  T Pop() override {
    T value = std::move(elements_.front());
    elements_.pop_front();
    return value;
  }

 private:
  std::deque<T> elements_;
};

// Pop takes the element at index UniformBelow(size) and moves the last
// element into its slot. With a fixed seed and a fixed sequence of calls
// the order is identical on every machine (SplitMix64 is specified).
template <typename T>
class ShuffleBuffer final : public QueueBuffer<T> {
 public:
  explicit ShuffleBuffer(uint64_t seed) : rng_(seed) {}
  int64_t size() const override {
    return static_cast<int64_t>(elements_.size());
  }
  void Push(T value) override { elements_.push_back(std::move(value)); }
  T Pop() override {
    const size_t index = static_cast<size_t>(rng_.UniformBelow(
        static_cast<uint64_t>(elements_.size())));
    T value = std::move(elements_[index]);
    if (index + 1 != elements_.size()) {
      elements_[index] = std::move(elements_.back());
    }
    elements_.pop_back();
    return value;
  }

 private:
  SplitMix64 rng_;
  std::vector<T> elements_;
};

// A binary heap on (priority, arrival number): smallest priority first,
// arrival order among equal priorities.
template <typename T>
class PriorityBuffer final : public QueueBuffer<Prioritized<T>> {
 public:
  int64_t size() const override { return static_cast<int64_t>(heap_.size()); }
  void Push(Prioritized<T> element) override {
    heap_.push_back(Entry{next_arrival_++, std::move(element)});
    std::push_heap(heap_.begin(), heap_.end(), &ComesLater);
  }
  Prioritized<T> Pop() override {
    std::pop_heap(heap_.begin(), heap_.end(), &ComesLater);
    Prioritized<T> element = std::move(heap_.back().element);
    heap_.pop_back();
    return element;
  }

 private:
  struct Entry {
    uint64_t arrival;
    Prioritized<T> element;
  };
  // The heap's "less than": std heaps keep the greatest entry on top, so
  // the entry that comes first must compare greatest.
  static bool ComesLater(const Entry& a, const Entry& b) {
    if (a.element.priority != b.element.priority) {
      return a.element.priority > b.element.priority;
    }
    return a.arrival > b.arrival;
  }

  std::vector<Entry> heap_;
  uint64_t next_arrival_ = 0;
};

}  // namespace internal

template <typename T>
Queue<T>::Queue(std::string name, int64_t capacity, int64_t min_after_dequeue,
                std::unique_ptr<internal::QueueBuffer<T>> buffer)
    : name_(std::move(name)),
      capacity_(capacity),
      min_after_dequeue_(min_after_dequeue),
      buffer_(std::move(buffer)) {}

template <typename T>
absl::Status Queue<T>::Enqueue(T value, absl::Duration timeout) {
  return EnqueueRange(&value, 1, timeout, "Enqueue");
}

template <typename T>
absl::Status Queue<T>::EnqueueMany(std::vector<T> values,
                                   absl::Duration timeout) {
  return EnqueueRange(values.data(), static_cast<int64_t>(values.size()),
                      timeout, "EnqueueMany");
}

template <typename T>
absl::StatusOr<T> Queue<T>::Dequeue(absl::Duration timeout) {
  const absl::Time deadline = internal::DeadlineAfter(timeout);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<int64_t> count = AwaitElementsLocked(
      1, /*partial_after_close=*/false, deadline, timeout, "Dequeue");
  if (!count.ok()) return count.status();
  T value = buffer_->Pop();
  producers_.WakeFront();
  return value;
}

template <typename T>
absl::StatusOr<std::vector<T>> Queue<T>::DequeueMany(int64_t n,
                                                     absl::Duration timeout) {
  return DequeueRange(n, /*partial_after_close=*/false, timeout,
                      "DequeueMany");
}

template <typename T>
absl::StatusOr<std::vector<T>> Queue<T>::DequeueUpTo(int64_t n,
                                                     absl::Duration timeout) {
  return DequeueRange(n, /*partial_after_close=*/true, timeout,
                      "DequeueUpTo");
}

template <typename T>
void Queue<T>::Close(bool cancel_pending) {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  // Producers that join later fail on closed_ before joining the line, so
  // the sticky flag cancels exactly those blocked now.
  if (cancel_pending && !producers_.empty()) {
    cancelled_ = true;
    producers_.WakeAll();
  }
  consumers_.WakeFront();
}

template <typename T>
int64_t Queue<T>::size() const {
  absl::MutexLock lock(&mu_);
  return buffer_->size();
}

template <typename T>
bool Queue<T>::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

template <typename T>
int64_t Queue<T>::num_waiting_producers() const {
  absl::MutexLock lock(&mu_);
  return producers_.size();
}

template <typename T>
int64_t Queue<T>::num_waiting_consumers() const {
  absl::MutexLock lock(&mu_);
  return consumers_.size();
}

template <typename T>
absl::Status Queue<T>::EnqueueRange(T* values, int64_t n,
                                    absl::Duration timeout,
                                    absl::string_view op) {
  const absl::Time deadline = internal::DeadlineAfter(timeout);
  absl::MutexLock lock(&mu_);
  if (closed_) return internal::ClosedForEnqueueError(name_, op);
  if (n == 0) return absl::OkStatus();

  internal::WaitLine::Waiter self;
  producers_.Join(&self);
  int64_t enqueued = 0;
  bool timed_out = false;
  absl::Status status;
  while (true) {
    if (cancelled_) {
      status = internal::EnqueueCancelledError(name_, op, enqueued, n);
      break;
    }
    if (producers_.AtFront(&self)) {
      const int64_t before = enqueued;
      while (enqueued < n && buffer_->size() < capacity_) {
        buffer_->Push(std::move(values[enqueued]));
        ++enqueued;
      }
      if (enqueued > before) consumers_.WakeFront();
      if (enqueued == n) break;
    }
    // Checked after one more look at the queue, so a wake-up that raced
    // with the deadline is not lost.
    if (timed_out) {
      status = internal::EnqueueTimeoutError(
          name_, op, timeout, !producers_.AtFront(&self), enqueued, n);
      break;
    }
    timed_out = self.cv.WaitWithDeadline(&mu_, deadline);
  }
  producers_.Leave(&self);
  producers_.WakeFront();
  // A closed queue is drained once no producer is pending.
  if (closed_) consumers_.WakeFront();
  return status;
}

template <typename T>
absl::StatusOr<std::vector<T>> Queue<T>::DequeueRange(
    int64_t n, bool partial_after_close, absl::Duration timeout,
    absl::string_view op) {
  if (n < 0 || n > capacity_ - min_after_dequeue_) {
    return internal::InvalidDequeueCountError(name_, op, n, capacity_,
                                              min_after_dequeue_);
  }
  std::vector<T> values;
  if (n == 0) return values;
  const absl::Time deadline = internal::DeadlineAfter(timeout);
  absl::MutexLock lock(&mu_);
  absl::StatusOr<int64_t> count =
      AwaitElementsLocked(n, partial_after_close, deadline, timeout, op);
  if (!count.ok()) return count.status();
  values.reserve(static_cast<size_t>(*count));
  for (int64_t i = 0; i < *count; ++i) values.push_back(buffer_->Pop());
  producers_.WakeFront();
  return values;
}

template <typename T>
absl::StatusOr<int64_t> Queue<T>::AwaitElementsLocked(
    int64_t n, bool partial_after_close, absl::Time deadline,
    absl::Duration timeout, absl::string_view op) {
  internal::WaitLine::Waiter self;
  consumers_.Join(&self);
  bool timed_out = false;
  absl::StatusOr<int64_t> count;
  while (true) {
    if (consumers_.AtFront(&self)) {
      const int64_t available = AvailableLocked();
      if (available >= n) {
        count = n;
        break;
      }
      // Producers blocked before Close may still add elements.
      if (closed_ && producers_.empty()) {
        if (partial_after_close && available > 0) {
          count = available;
        } else {
          count = internal::DequeueClosedError(name_, op, n, available);
        }
        break;
      }
    }
    if (timed_out) {
      count = internal::DequeueTimeoutError(name_, op, timeout,
                                            !consumers_.AtFront(&self), n,
                                            AvailableLocked());
      break;
    }
    timed_out = self.cv.WaitWithDeadline(&mu_, deadline);
  }
  consumers_.Leave(&self);
  // The next consumer cannot run before the caller has taken its elements
  // and released mu_.
  consumers_.WakeFront();
  return count;
}

template <typename T>
int64_t Queue<T>::AvailableLocked() const {
  const int64_t size = buffer_->size();
  if (closed_) return size;
  return std::max<int64_t>(0, size - min_after_dequeue_);
}

template <typename T>
absl::StatusOr<std::unique_ptr<FifoQueue<T>>> FifoQueue<T>::Create(
    const QueueOptions& options) {
  absl::Status valid = internal::ValidateQueueOptions(
      options.name, options.capacity, /*min_after_dequeue=*/0);
  if (!valid.ok()) return valid;
  return absl::WrapUnique(new FifoQueue<T>(options));
}

template <typename T>
FifoQueue<T>::FifoQueue(const QueueOptions& options)
    : Queue<T>(options.name, options.capacity, /*min_after_dequeue=*/0,
               std::make_unique<internal::FifoBuffer<T>>()) {}

template <typename T>
absl::StatusOr<std::unique_ptr<RandomShuffleQueue<T>>>
RandomShuffleQueue<T>::Create(const RandomShuffleQueueOptions& options) {
  absl::Status valid = internal::ValidateQueueOptions(
      options.name, options.capacity, options.min_after_dequeue);
  if (!valid.ok()) return valid;
  return absl::WrapUnique(new RandomShuffleQueue<T>(options));
}

template <typename T>
RandomShuffleQueue<T>::RandomShuffleQueue(
    const RandomShuffleQueueOptions& options)
    : Queue<T>(options.name, options.capacity, options.min_after_dequeue,
               std::make_unique<internal::ShuffleBuffer<T>>(options.seed)),
      min_after_dequeue_(options.min_after_dequeue),
      seed_(options.seed) {}

template <typename T>
absl::StatusOr<std::unique_ptr<PriorityQueue<T>>> PriorityQueue<T>::Create(
    const QueueOptions& options) {
  absl::Status valid = internal::ValidateQueueOptions(
      options.name, options.capacity, /*min_after_dequeue=*/0);
  if (!valid.ok()) return valid;
  return absl::WrapUnique(new PriorityQueue<T>(options));
}

template <typename T>
PriorityQueue<T>::PriorityQueue(const QueueOptions& options)
    : Queue<Prioritized<T>>(options.name, options.capacity,
                            /*min_after_dequeue=*/0,
                            std::make_unique<internal::PriorityBuffer<T>>()) {}

}  // namespace shardq::pipeline

#endif  // SHARDQ_SRC_PIPELINE_QUEUES_IMPL_H_
