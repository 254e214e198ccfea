#include "shardq/pipeline/coordinator.h"

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "shardq/pipeline/internal/queue_internal.h"
#include "src/core/process.h"

namespace shardq::pipeline {

ThreadCoordinator::~ThreadCoordinator() {
  RequestStop();
  Join().IgnoreError();
}

void ThreadCoordinator::RequestStop(absl::Status error) {
  std::vector<StopCallbackId> callbacks;
  {
    absl::MutexLock lock(&mu_);
    const bool keep = !error.ok() && error_.ok() &&
                      !absl::IsOutOfRange(error) &&
                      !(stop_requested_ && absl::IsCancelled(error));
    if (keep) error_ = std::move(error);
    if (stop_requested_) return;
    stop_requested_ = true;
    stop_requested_cv_.SignalAll();
    for (const auto& [id, callback] : stop_callbacks_) callbacks.push_back(id);
  }
  for (StopCallbackId id : callbacks) RunStopCallback(id);
}

void ThreadCoordinator::RunStopCallback(StopCallbackId id) {
  std::function<void()> callback;
  {
    absl::MutexLock lock(&mu_);
    auto it = stop_callbacks_.find(id);
    if (it == stop_callbacks_.end()) return;  // removed meanwhile
    callback = std::move(it->second);
    stop_callbacks_.erase(it);
    running_callback_ = id;
  }
  callback();
  absl::MutexLock lock(&mu_);
  running_callback_ = kNoCallback;
  callback_finished_cv_.SignalAll();
}

bool ThreadCoordinator::ShouldStop() const {
  absl::MutexLock lock(&mu_);
  return stop_requested_;
}

bool ThreadCoordinator::WaitForStop(absl::Duration timeout) const {
  const absl::Time deadline = internal::DeadlineAfter(timeout);
  absl::MutexLock lock(&mu_);
  while (!stop_requested_) {
    if (stop_requested_cv_.WaitWithDeadline(&mu_, deadline)) break;
  }
  return stop_requested_;
}

absl::Status ThreadCoordinator::error() const {
  absl::MutexLock lock(&mu_);
  return error_;
}

void ThreadCoordinator::Launch(std::string name,
                               std::function<absl::Status()> body) {
  absl::MutexLock lock(&mu_);
  const int64_t number = next_thread_number_++;
  running_threads_.emplace(number, name);
  // Started under mu_ so that a concurrent Join sees either both the
  // running entry and the std::thread, or neither.
  threads_.emplace_back([this, number, name = std::move(name), body = std::move(body)] {
    NameThisThread(name);
    absl::Status status = body();
    if (!status.ok()) RequestStop(std::move(status));
    absl::MutexLock lock(&mu_);
    running_threads_.erase(number);
    if (running_threads_.empty()) threads_finished_cv_.SignalAll();
  });
}

absl::Status ThreadCoordinator::Join(absl::Duration timeout) {
  const absl::Time deadline = internal::DeadlineAfter(timeout);
  std::vector<std::thread> finished;
  {
    absl::MutexLock lock(&mu_);
    while (!running_threads_.empty()) {
      if (threads_finished_cv_.WaitWithDeadline(&mu_, deadline)) break;
    }
    if (!running_threads_.empty()) {
      std::vector<std::string> names;
      for (const auto& [number, name] : running_threads_) {
        names.push_back(name);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "ThreadCoordinator::Join timed out after ",
          absl::FormatDuration(timeout), " with ", names.size(),
          " threads still running: ", absl::StrJoin(names, ", "),
          stop_requested_ ? "" : " (no stop was requested)"));
    }
    finished.swap(threads_);
  }
  // Every body has returned; these joins only reap the threads.
  for (std::thread& thread : finished) thread.join();
  return error();
}

ThreadCoordinator::StopCallbackId ThreadCoordinator::AddStopCallback(
    std::function<void()> callback) {
  StopCallbackId id;
  {
    absl::MutexLock lock(&mu_);
    id = next_callback_id_++;
    if (!stop_requested_) {
      stop_callbacks_.emplace(id, std::move(callback));
      return id;
    }
  }
  callback();
  return id;
}

void ThreadCoordinator::RemoveStopCallback(StopCallbackId id) {
  absl::MutexLock lock(&mu_);
  stop_callbacks_.erase(id);
  while (running_callback_ == id) callback_finished_cv_.Wait(&mu_);
}

}  // namespace shardq::pipeline
