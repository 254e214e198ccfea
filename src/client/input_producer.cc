#include "shardq/input_producer.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardq {
namespace {

// The filling thread checks for shutdown at least this often while it waits
// for an item held elsewhere.
constexpr absl::Duration kTakeSlice = absl::Milliseconds(200);

}  // namespace

InputProducer::InputProducer(WorkQueue* queue, int64_t capacity)
    : queue_(queue),
      capacity_(std::max<int64_t>(1, std::min(capacity, queue->num_clients()))) {
  thread_ = std::thread([this] { Fill(); });
}

InputProducer::~InputProducer() {
  if (!owner_.current()) {
    AbandonThread(thread_);  // inherited through fork(): see process.h
    return;
  }
  std::deque<WorkItem> unread;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  thread_.join();
  {
    absl::MutexLock lock(&mu_);
    unread.swap(buffer_);
  }
  for (const WorkItem& item : unread) queue_->Release(item).IgnoreError();
}

void InputProducer::Fill() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && static_cast<int64_t>(buffer_.size()) + outstanding_ >= capacity_) {
        changed_.Wait(&mu_);
      }
      if (stopping_) break;
    }
    absl::StatusOr<WorkItem> item = queue_->Take(kTakeSlice);
    absl::MutexLock lock(&mu_);
    if (item.ok()) {
      buffer_.push_back(*std::move(item));
      changed_.SignalAll();
      continue;
    }
    if (absl::IsDeadlineExceeded(item.status())) continue;
    end_ = item.status();  // OUT_OF_RANGE at the end, or the failure
    break;
  }
  absl::MutexLock lock(&mu_);
  ended_ = true;
  changed_.SignalAll();
}

absl::StatusOr<WorkItem> InputProducer::NextItem() {
  absl::MutexLock lock(&mu_);
  while (buffer_.empty() && !ended_) changed_.Wait(&mu_);
  if (!buffer_.empty()) {
    WorkItem item = std::move(buffer_.front());
    buffer_.pop_front();
    ++outstanding_;
    changed_.SignalAll();  // room for the filling thread
    return item;
  }
  if (end_.ok()) {
    return absl::CancelledError(
        absl::StrCat("input producer of queue '", queue_->name(), "' was stopped"));
  }
  return end_;
}

absl::Status InputProducer::ItemDone(const WorkItem& item) {
  absl::Status s = queue_->Complete(item);
  absl::MutexLock lock(&mu_);
  if (outstanding_ > 0) --outstanding_;
  changed_.SignalAll();
  return s;
}

int64_t InputProducer::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(buffer_.size());
}

}  // namespace shardq
