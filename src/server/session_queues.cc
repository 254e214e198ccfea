#include "src/server/session_queues.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/core/process.h"

namespace shardq {

// One completion queue, drained by one thread: every tag of the streams
// whose calls were requested on it completes there, one at a time.
class SessionQueue {
 public:
  SessionQueue(SessionQueues* owner, std::unique_ptr<grpc::ServerCompletionQueue> cq)
      : owner_(owner), cq_(std::move(cq)) {}

  grpc::ServerCompletionQueue* cq() const { return cq_.get(); }
  // Posts one more request for a call on this queue.
  void PostRequest() { owner_->Post(this); }

  // The thread's loop: until the queue is shut down and empty.
  void Drain() {
    void* tag = nullptr;
    bool ok = false;
    while (cq_->Next(&tag, &ok)) {
      SessionStream::Tag* t = static_cast<SessionStream::Tag*>(tag);
      t->stream->Complete(t->op, ok);
    }
  }

  std::atomic<int64_t> sessions{0};  // calls that arrived here

 private:
  SessionQueues* const owner_;
  const std::unique_ptr<grpc::ServerCompletionQueue> cq_;
};

SessionStream::SessionStream() = default;
SessionStream::~SessionStream() = default;

void SessionStream::StartRead(v1::SessionRequest* request) {
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  io_.Read(request, &read_);
}

void SessionStream::StartWrite(const v1::SessionResponse* response) {
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  io_.Write(*response, &write_);
}

void SessionStream::Finish(const grpc::Status& status) {
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  io_.Finish(status, &finish_);
}

void SessionStream::Complete(Op op, bool ok) {
  switch (op) {
    case Op::kAccepted:
      if (!ok) {  // the server shut down before a call came: no call at all
        {
          absl::MutexLock lock(&mu_);
          on_done_called_ = true;
        }
        OnDone();
        return;
      }
      queue_->sessions.fetch_add(1, std::memory_order_relaxed);
      queue_->PostRequest();  // the next call's request, first
      OnStarted();
      break;
    case Op::kRead: {
      {
        absl::MutexLock lock(&mu_);
        --in_flight_;
      }
      OnReadDone(ok);
      break;
    }
    case Op::kWrite: {
      {
        absl::MutexLock lock(&mu_);
        --in_flight_;
      }
      OnWriteDone(ok);
      break;
    }
    case Op::kFinish: {
      absl::MutexLock lock(&mu_);
      --in_flight_;
      finished_ = true;
      break;
    }
    case Op::kDone:
      // Valid only now that the done notification came.
      if (ctx_.IsCancelled()) OnCancel();
      {
        absl::MutexLock lock(&mu_);
        call_ended_ = true;
      }
      break;
  }
  MaybeDone();
}

void SessionStream::MaybeDone() {
  {
    absl::MutexLock lock(&mu_);
    if (on_done_called_ || !call_ended_ || !finished_ || in_flight_ > 0) return;
    on_done_called_ = true;
  }
  OnDone();  // may delete this stream: the last thing done
}

SessionQueues::SessionQueues(grpc::ServerBuilder& builder, int count, RequestFn request,
                             NewStreamFn new_stream)
    : request_(std::move(request)), new_stream_(std::move(new_stream)) {
  for (int i = 0; i < count; ++i) {
    queues_.push_back(std::make_unique<SessionQueue>(this, builder.AddCompletionQueue()));
  }
}

SessionQueues::~SessionQueues() {
  for (const std::unique_ptr<SessionQueue>& queue : queues_) queue->cq()->Shutdown();
  if (threads_.empty()) {
    // Never started (the server did not start): drain here.
    for (const std::unique_ptr<SessionQueue>& queue : queues_) queue->Drain();
  }
  for (std::thread& thread : threads_) thread.join();
}

void SessionQueues::Start() {
  for (const std::unique_ptr<SessionQueue>& queue : queues_) {
    for (int i = 0; i < kPostedRequests; ++i) Post(queue.get());
  }
  for (size_t i = 0; i < queues_.size(); ++i) {
    threads_.emplace_back([q = queues_[i].get(), i] {
      NameThisThread(absl::StrCat("session-cq", i));
      q->Drain();
    });
  }
}

void SessionQueues::Post(SessionQueue* queue) {
  SessionStream* stream = new_stream_();
  stream->queue_ = queue;
  stream->ctx_.AsyncNotifyWhenDone(&stream->done_);
  request_(&stream->ctx_, &stream->io_, queue->cq(), &stream->accepted_);
}

std::vector<int64_t> SessionQueues::sessions_per_queue() const {
  std::vector<int64_t> out;
  for (const std::unique_ptr<SessionQueue>& queue : queues_) {
    out.push_back(queue->sessions.load(std::memory_order_relaxed));
  }
  return out;
}

}  // namespace shardq
