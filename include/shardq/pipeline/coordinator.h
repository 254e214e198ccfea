// Stopping a group of pipeline threads cleanly, in the shape of TensorFlow's
// tf.train.Coordinator and tf.train.QueueRunner:
//
//   ThreadCoordinator coordinator;
//   auto runner = QueueRunner<Record>::Create(queue, producers);
//   (*runner)->Start(&coordinator);           // threads keep `queue` filled
//   while (true) {                            // the consumer
//     absl::StatusOr<Record> record = queue->Dequeue();
//     if (!record.ok()) break;                // OUT_OF_RANGE: closed, drained
//     ...
//   }
//   coordinator.RequestStop();
//   absl::Status status = coordinator.Join();  // first error of any thread
//
// Lifetimes: queues and anything else the threads use must outlive the
// coordinator's Join (or its destruction, which joins).
#ifndef SHARDQ_PIPELINE_COORDINATOR_H_
#define SHARDQ_PIPELINE_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shardq/pipeline/queues.h"

namespace shardq::pipeline {

// Owns a group of threads, tells them when to stop, and reports the first
// error of any of them. Thread-safe.
class ThreadCoordinator {
 public:
  using StopCallbackId = int64_t;

  ThreadCoordinator() = default;
  // Requests a stop, then joins every launched thread.
  ~ThreadCoordinator();
  ThreadCoordinator(const ThreadCoordinator&) = delete;
  ThreadCoordinator& operator=(const ThreadCoordinator&) = delete;

  // Asks every thread to stop: ShouldStop() turns true, WaitForStop
  // returns, and the first call runs the stop callbacks (in the calling
  // thread, with no lock held). The first non-OK `error` is kept for
  // error() and Join(), even if it comes after a clean stop, except
  //  * OUT_OF_RANGE, which is a clean stop (end of input), as in TensorFlow;
  //  * CANCELLED once a stop was requested: the consequence of the stop.
  void RequestStop(absl::Status error = absl::OkStatus());

  // True once a stop was requested. Thread bodies poll this.
  bool ShouldStop() const;

  // Blocks until a stop is requested or `timeout` passes; true if stopped.
  bool WaitForStop(absl::Duration timeout = absl::InfiniteDuration()) const;

  // The error kept by RequestStop so far; OK if none.
  absl::Status error() const;

  // Starts a thread running `body`, owned by this coordinator. A non-OK
  // result of `body` is passed to RequestStop, so one failing thread stops
  // the others. A body must return promptly once ShouldStop() is true, or
  // be unblocked by a stop callback (e.g. its queue closed with cancel).
  // `name` identifies the thread in Join's timeout error.
  void Launch(std::string name, std::function<absl::Status()> body);

  // Waits until every launched thread has finished, then returns error().
  // DEADLINE_EXCEEDED naming the threads still running if `timeout` passes
  // first; they stay owned and Join may be called again. Must not be
  // called from a launched thread or a stop callback.
  absl::Status Join(absl::Duration timeout = absl::InfiniteDuration());

  // Runs `callback` once when a stop is first requested, or right away in
  // the calling thread if one already was. Callbacks must be quick and
  // must not block (closing a queue with cancel_pending is the model).
  StopCallbackId AddStopCallback(std::function<void()> callback);

  // Unregisters a callback. If it is running right now, waits until it
  // has finished, so after return it never runs and what it references may
  // be destroyed. A no-op for a callback that already ran. Must not be
  // called from inside that callback.
  void RemoveStopCallback(StopCallbackId id);

 private:
  static constexpr StopCallbackId kNoCallback = -1;

  // Runs the callback registered as `id` unless it was removed meanwhile.
  void RunStopCallback(StopCallbackId id) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits use CondVars rather than absl::Condition so that every predicate
  // is evaluated in the waiting thread, in this file's code (see
  // src/pipeline/tsan_absl_mutex_shim.cc).
  mutable absl::Mutex mu_;
  mutable absl::CondVar stop_requested_cv_;
  absl::CondVar threads_finished_cv_;
  absl::CondVar callback_finished_cv_;
  bool stop_requested_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::map<StopCallbackId, std::function<void()>> stop_callbacks_
      ABSL_GUARDED_BY(mu_);
  StopCallbackId next_callback_id_ ABSL_GUARDED_BY(mu_) = 0;
  StopCallbackId running_callback_ ABSL_GUARDED_BY(mu_) = kNoCallback;
  // Launched threads whose body has not returned yet, by launch number.
  std::map<int64_t, std::string> running_threads_ ABSL_GUARDED_BY(mu_);
  int64_t next_thread_number_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

// Keeps a queue filled by N threads of a ThreadCoordinator, each calling
// its producer until the producer's input is exhausted:
//  * a producer returns the next element, std::nullopt (or OUT_OF_RANGE)
//    when its input is exhausted, or an error;
//  * when every thread has finished, the queue is closed, so consumers
//    drain it and then get OUT_OF_RANGE;
//  * a producer error, prefixed with the queue name, is reported to the
//    coordinator (stopping the other threads) and the queue is closed with
//    cancel_pending;
//  * a stop requested on the coordinator closes the queue with
//    cancel_pending, waking producers blocked on a full queue;
//  * a closed queue (e.g. by a consumer that has read enough, with
//    cancel_pending so that blocked producers wake) ends the threads
//    quietly.
// A stop is seen between two producer calls: a producer that blocks (a
// slow read) delays its thread's exit until it returns.
// Thread-compatible: call Start once. The threads share nothing with the
// QueueRunner object, which may be destroyed while they run.
template <typename T>
class QueueRunner {
 public:
  using Producer = std::function<absl::StatusOr<std::optional<T>>()>;

  // One thread per producer. INVALID_ARGUMENT if `queue` is null or
  // `producers` is empty or holds an empty function. `queue` must outlive
  // the threads (until the coordinator's Join returns).
  static absl::StatusOr<std::unique_ptr<QueueRunner<T>>> Create(
      Queue<T>* queue, std::vector<Producer> producers);

  // `num_threads` threads calling the same `producer`, which must be
  // thread-safe. INVALID_ARGUMENT as above, or if num_threads < 1.
  static absl::StatusOr<std::unique_ptr<QueueRunner<T>>> Create(
      Queue<T>* queue, int num_threads, Producer producer);

  // Launches the threads in `coordinator`, which owns them.
  // FAILED_PRECONDITION if already started; INVALID_ARGUMENT if
  // `coordinator` is null.
  absl::Status Start(ThreadCoordinator* coordinator);

  Queue<T>* queue() const { return state_->queue; }
  int num_threads() const { return static_cast<int>(state_->producers.size()); }

 private:
  // Shared by the threads; outlives the QueueRunner if they do.
  struct State {
    State(Queue<T>* queue, std::vector<Producer> producers)
        : queue(queue), producers(std::move(producers)) {}

    Queue<T>* const queue;
    const std::vector<Producer> producers;
    // Set by Start before any thread is launched.
    ThreadCoordinator* coordinator = nullptr;
    ThreadCoordinator::StopCallbackId stop_callback = 0;
    absl::Mutex mu;
    int threads_running ABSL_GUARDED_BY(mu) = 0;
  };

  explicit QueueRunner(std::shared_ptr<State> state)
      : state_(std::move(state)) {}
  // The body of thread `index`.
  static absl::Status RunProducer(State& state, size_t index);

  const std::shared_ptr<State> state_;
  bool started_ = false;
};

}  // namespace shardq::pipeline

// Template definitions.
#include "shardq/pipeline/internal/queue_runner_impl.h"  // IWYU pragma: export

#endif  // SHARDQ_PIPELINE_COORDINATOR_H_
