#include "shardq/input_producer.h"

#include <algorithm>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/core/process.h"

namespace shardq {
namespace {

// The filling thread checks for shutdown at least this often while it waits
// for an item held elsewhere.
constexpr absl::Duration kTakeSlice = absl::Milliseconds(200);

}  // namespace

class InputProducer::State {
 public:
  State(WorkQueue* queue, int64_t capacity) : queue_(queue), capacity_(capacity) {}

  // The filling thread's loop.
  void Fill();

  WorkQueue* const queue_;
  const int64_t capacity_;
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // buffer, outstanding, stopping or end changed
  std::deque<WorkItem> buffer_ ABSL_GUARDED_BY(mu_);
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;  // handed out, not done
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status end_ ABSL_GUARDED_BY(mu_);  // set when the thread stopped
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  OwnerProcess owner_;  // see src/core/process.h
};

InputProducer::InputProducer(WorkQueue* queue, int64_t capacity)
    : queue_(queue),
      capacity_(std::max<int64_t>(1, std::min(capacity, queue->num_clients()))),
      state_(std::make_unique<State>(queue_, capacity_)) {
  State* state = state_.get();
  state->thread_ = std::thread([state] {
    NameThisThread("producer");
    state->Fill();
  });
}

InputProducer::~InputProducer() {
  State& st = *state_;
  if (!st.owner_.current()) {
    AbandonThread(st.thread_);  // inherited through fork(): see process.h
    return;
  }
  std::deque<WorkItem> unread;
  {
    absl::MutexLock lock(&st.mu_);
    st.stopping_ = true;
    st.changed_.SignalAll();
  }
  st.thread_.join();
  {
    absl::MutexLock lock(&st.mu_);
    unread.swap(st.buffer_);
  }
  for (const WorkItem& item : unread) queue_->Release(item).IgnoreError();
}

void InputProducer::State::Fill() {
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
  State& st = *state_;
  absl::MutexLock lock(&st.mu_);
  while (st.buffer_.empty() && !st.ended_) st.changed_.Wait(&st.mu_);
  if (!st.buffer_.empty()) {
    WorkItem item = std::move(st.buffer_.front());
    st.buffer_.pop_front();
    ++st.outstanding_;
    st.changed_.SignalAll();  // room for the filling thread
    return item;
  }
  if (st.end_.ok()) {
    return absl::CancelledError(
        absl::StrCat("input producer of queue '", queue_->name(), "' was stopped"));
  }
  return st.end_;
}

absl::Status InputProducer::ItemDone(const WorkItem& item) {
  absl::Status s = queue_->Complete(item);
  State& st = *state_;
  absl::MutexLock lock(&st.mu_);
  if (st.outstanding_ > 0) --st.outstanding_;
  st.changed_.SignalAll();
  return s;
}

void InputProducer::NoteProgress(const WorkItem& item, int64_t offset) {
  queue_->NoteProgress(item, offset);
}

void InputProducer::NoteReturned(const WorkItem& item, int64_t offset, int64_t in_order,
                                 int64_t returned) {
  queue_->NoteReturned(item, offset, in_order, returned);
}

void InputProducer::NoteLost(const WorkItem& item, int64_t records) {
  queue_->NoteLost(item, records);
}

absl::Status InputProducer::CheckOpen() const { return queue_->CheckOpen(); }

std::optional<WorkItem> InputProducer::PeekNextItem() {
  {
    absl::MutexLock lock(&state_->mu_);
    if (!state_->buffer_.empty()) return state_->buffer_.front();
  }
  return queue_->PeekNextItem();
}

int64_t InputProducer::size() const {
  absl::MutexLock lock(&state_->mu_);
  return static_cast<int64_t>(state_->buffer_.size());
}

}  // namespace shardq
