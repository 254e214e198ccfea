// Template definitions for QueueRunner in
// include/shardq/pipeline/coordinator.h; include that header, not this one.
#ifndef SHARDQ_SRC_PIPELINE_QUEUE_RUNNER_IMPL_H_
#define SHARDQ_SRC_PIPELINE_QUEUE_RUNNER_IMPL_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "shardq/pipeline/coordinator.h"
#include "shardq/pipeline/queues.h"

namespace shardq::pipeline {

template <typename T>
absl::StatusOr<std::unique_ptr<QueueRunner<T>>> QueueRunner<T>::Create(
    Queue<T>* queue, std::vector<Producer> producers) {
  if (queue == nullptr) {
    return absl::InvalidArgumentError("QueueRunner: queue must not be null");
  }
  if (producers.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QueueRunner of queue '", queue->name(), "': no producers given"));
  }
  for (size_t i = 0; i < producers.size(); ++i) {
    if (!producers[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("QueueRunner of queue '", queue->name(), "': producer ",
                       i, " is an empty function"));
    }
  }
  auto state = std::make_shared<State>(queue, std::move(producers));
  return absl::WrapUnique(new QueueRunner<T>(std::move(state)));
}

template <typename T>
absl::StatusOr<std::unique_ptr<QueueRunner<T>>> QueueRunner<T>::Create(
    Queue<T>* queue, int num_threads, Producer producer) {
  if (num_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("QueueRunner: num_threads must be >= 1, got ",
                     num_threads));
  }
  if (!producer) {
    return absl::InvalidArgumentError(
        "QueueRunner: producer is an empty function");
  }
  // Every thread calls the one callable (and its state), not a copy.
  auto shared = std::make_shared<Producer>(std::move(producer));
  std::vector<Producer> producers(
      static_cast<size_t>(num_threads),
      [shared]() -> absl::StatusOr<std::optional<T>> { return (*shared)(); });
  return Create(queue, std::move(producers));
}

template <typename T>
absl::Status QueueRunner<T>::Start(ThreadCoordinator* coordinator) {
  if (coordinator == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("QueueRunner of queue '", state_->queue->name(),
                     "': coordinator must not be null"));
  }
  if (started_) {
    return absl::FailedPreconditionError(
        absl::StrCat("QueueRunner of queue '", state_->queue->name(),
                     "' was already started"));
  }
  started_ = true;
  state_->coordinator = coordinator;
  {
    absl::MutexLock lock(&state_->mu);
    state_->threads_running = num_threads();
  }
  Queue<T>* queue = state_->queue;
  state_->stop_callback = coordinator->AddStopCallback(
      [queue] { queue->Close(/*cancel_pending=*/true); });
  for (size_t i = 0; i < state_->producers.size(); ++i) {
    coordinator->Launch(
        absl::StrCat("queue runner of '", queue->name(), "' #", i),
        [state = state_, i] { return RunProducer(*state, i); });
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status QueueRunner<T>::RunProducer(State& state, size_t index) {
  const Producer& produce = state.producers[index];
  absl::Status error;
  while (!state.coordinator->ShouldStop()) {
    absl::StatusOr<std::optional<T>> next = produce();
    if (!next.ok()) {
      if (!absl::IsOutOfRange(next.status())) {
        error = absl::Status(
            next.status().code(),
            absl::StrCat("queue runner of queue '", state.queue->name(),
                         "', producer ", index, ": ",
                         next.status().message()));
      }
      break;
    }
    if (!next->has_value()) break;
    // Fails only once the queue is closed, by a consumer or by a stop:
    // either way this thread is done.
    if (!state.queue->Enqueue(std::move(**next)).ok()) break;
  }
  if (!error.ok()) {
    // Report before closing, so a consumer that sees the queue end already
    // finds the error in the coordinator.
    state.coordinator->RequestStop(error);
    state.queue->Close(/*cancel_pending=*/true);
  }
  bool last_thread;
  {
    absl::MutexLock lock(&state.mu);
    last_thread = --state.threads_running == 0;
  }
  if (last_thread) {
    state.queue->Close();
    state.coordinator->RemoveStopCallback(state.stop_callback);
  }
  return error;
}

}  // namespace shardq::pipeline

#endif  // SHARDQ_SRC_PIPELINE_QUEUE_RUNNER_IMPL_H_
