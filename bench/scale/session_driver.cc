// bench/scale: SessionDriver, one Session stream per simulated worker
// (coordinator.proto, rpc Session) with the callback API, over a few shared
// channels. A stream is bench/common's SessionStream (one read outstanding,
// one write at a time, answers matched to requests in order); the driver
// opens a worker's stream on its first call, and opens another (naming the
// lease the worker holds) after one ended.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/common/session_stream.h"
#include "bench/scale/worker_driver.h"
#include "proto/shardq/coordinator.grpc.pb.h"

namespace shardq::scale {
namespace {

namespace v1 = ::shardq::v1;
using bench::FromOp;
using AnswerFn = bench::SessionAnswerFn;
using WrittenFn = bench::SessionWrittenFn;
using WorkerStream = bench::SessionStream;

class SessionDriver final : public WorkerDriver, public bench::SessionStreamListener {
 public:
  explicit SessionDriver(const SessionDriverOptions& options)
      : options_(options),
        stubs_(bench::OwnConnectionStubs(options_.address, options_.channels)),
        workers_(1) {}

  ~SessionDriver() override {
    CloseStreams(std::chrono::milliseconds(0));
    absl::MutexLock lock(&mu_);
    streams_.clear();
  }

  std::string Name() const override { return "session"; }

  void Take(int worker, TakeDone done) override {
    v1::SessionRequest request;
    request.set_take(1);
    request.set_take_wait_ms(options_.take_wait_ms);
    takes_.fetch_add(1, std::memory_order_relaxed);
    Send(worker, std::move(request),
         [this, worker, done = std::move(done)](
             absl::StatusOr<const v1::SessionResponse*> answer, int64_t latency_ns) {
           if (!answer.ok()) return done(answer.status());
           done(TakeOf(worker, **answer, latency_ns));
         });
  }

  void Complete(int worker, const Lease& lease, CompleteDone done) override {
    v1::SessionRequest request;
    request.add_complete_lease_ids(lease.lease_id);
    completes_.fetch_add(1, std::memory_order_relaxed);
    Send(worker, std::move(request),
         [this, worker, lease, done = std::move(done)](
             absl::StatusOr<const v1::SessionResponse*> answer, int64_t) {
           if (!answer.ok()) return done(answer.status());
           done(CompletionOf(worker, **answer, lease));
         });
  }

  void CompleteAndTake(int worker, const Lease& lease, CompleteAndTakeDone done) override {
    v1::SessionRequest request;
    request.add_complete_lease_ids(lease.lease_id);
    request.set_take(1);
    request.set_take_wait_ms(options_.take_wait_ms);
    complete_and_takes_.fetch_add(1, std::memory_order_relaxed);
    Send(worker, std::move(request),
         [this, worker, lease, done = std::move(done)](
             absl::StatusOr<const v1::SessionResponse*> answer, int64_t latency_ns) {
           if (!answer.ok()) return done(answer.status(), answer.status());
           absl::StatusOr<bool> completed = CompletionOf(worker, **answer, lease);
           if (!completed.ok()) {
             return done(completed, absl::AbortedError("no take: the completion failed"));
           }
           done(completed, TakeOf(worker, **answer, latency_ns));
         });
  }

  void ReportProgress(int worker, const Progress& progress, ProgressDone done) override {
    v1::SessionRequest request;
    v1::LeaseProgress* p = request.add_progress();
    p->set_lease_id(progress.lease.lease_id);
    p->set_offset(progress.offset);
    progress_.fetch_add(1, std::memory_order_relaxed);
    // request_id 0: applied, not answered.
    SendUnanswered(worker, std::move(request), [done = std::move(done)](bool written) {
      if (!written) return done(absl::UnavailableError("progress: the session stream ended"));
      done(int64_t{0});
    });
  }

  std::vector<std::pair<std::string, int64_t>> CallCounts() const override {
    return {{"open", opens_.load()},
            {"complete+take", complete_and_takes_.load()},
            {"take", takes_.load()},
            {"complete", completes_.load()},
            {"progress", progress_.load()}};
  }

  std::optional<StreamCounts> CloseStreams(std::chrono::milliseconds wait) override {
    const absl::Time deadline = absl::Now() + absl::FromChrono(wait);
    std::vector<WorkerStream*> streams;
    const absl::Condition all_done(+[](int64_t* live) { return *live == 0; }, &live_);
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(all_done, deadline);
      for (const std::unique_ptr<WorkerStream>& s : streams_) streams.push_back(s.get());
    }
    for (WorkerStream* s : streams) s->Cancel();
    absl::MutexLock lock(&mu_);
    mu_.Await(all_done);
    return counts_;
  }

  // Called by a stream: `opened` was read (its lost leases are counted).
  void StreamOpened(int worker, bool reopen, const v1::SessionOpened& opened) override {
    absl::MutexLock lock(&mu_);
    if (reopen) {
      ++counts_.reopened;
    } else {
      ++counts_.opened;
    }
    LostLocked(worker, opened.lost_lease_ids());
  }

  // Called by a stream for every message read after `opened`.
  void Pushed(int worker, const v1::SessionResponse& response) override {
    if (response.lost_lease_ids_size() > 0) {
      absl::MutexLock lock(&mu_);
      LostLocked(worker, response.lost_lease_ids());
    }
    if (response.splits_size() > 0) {
      // The bench's items are not split: refuse, so none stays pending.
      v1::SessionRequest refusal;
      for (const v1::SplitProposal& split : response.splits()) {
        v1::SplitAnswer* answer = refusal.add_split_answers();
        answer->set_lease_id(split.lease_id());
        answer->set_split_point(-1);
      }
      SendUnanswered(worker, std::move(refusal), nullptr);
    }
  }

  // Called by a stream's OnDone, last.
  void StreamEnded(int worker, bool cancelled, const grpc::Status& status) override {
    absl::MutexLock lock(&mu_);
    --live_;
    if (status.ok()) {
      ++counts_.ended_ok;
    } else if (cancelled) {
      ++counts_.cancelled;
    } else {
      ++counts_.dropped;
      if (counts_.first_drop.empty()) {
        counts_.first_drop = absl::StrCat(WorkerName(worker), ": ", status.error_code(), " ",
                                          status.error_message());
      }
    }
  }

 private:
  struct WorkerSlot {
    WorkerStream* stream = nullptr;  // the current one; owned by streams_
    uint64_t held = 0;               // the lease held, named when re-opening
  };

  void LostLocked(int worker, const google::protobuf::RepeatedField<uint64_t>& ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    counts_.lost_leases += ids.size();
    WorkerSlot& slot = SlotLocked(worker);
    for (uint64_t id : ids) {
      if (id == slot.held) slot.held = 0;
    }
  }

  WorkerSlot& SlotLocked(int worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (static_cast<size_t>(worker) >= workers_.size()) {
      workers_.resize(std::max(workers_.size() * 2, static_cast<size_t>(worker) + 1));
    }
    return workers_[static_cast<size_t>(worker)];
  }

  absl::StatusOr<bool> CompletionOf(int worker, const v1::SessionResponse& answer,
                                    const Lease& lease) {
    absl::StatusOr<bool> duplicate =
        bench::CompletionOf(answer, lease.lease_id, WorkerName(worker));
    if (!duplicate.ok()) return duplicate;
    absl::MutexLock lock(&mu_);
    WorkerSlot& slot = SlotLocked(worker);
    if (slot.held == lease.lease_id) slot.held = 0;
    return duplicate;
  }

  absl::StatusOr<TakeReply> TakeOf(int worker, const v1::SessionResponse& answer,
                                   int64_t latency_ns) {
    if (absl::Status s = FromOp(answer.take_status(), "take"); !s.ok()) return s;
    TakeReply reply;
    reply.latency_ns = latency_ns;
    reply.end_of_input = answer.end_of_input();
    if (answer.items_size() > 0) {
      const v1::WorkItem& item = answer.items(0);
      reply.item = Lease{item.epoch(), item.index(), item.lease_id()};
    }
    WorkerStream* finished = nullptr;
    {
      absl::MutexLock lock(&mu_);
      WorkerSlot& slot = SlotLocked(worker);
      if (reply.item.has_value()) slot.held = reply.item->lease_id;
      if (reply.end_of_input) finished = slot.stream;
    }
    // The worker is done: its stream ends OK once the answer is out.
    if (finished != nullptr) finished->HalfClose();
    return reply;
  }

  void Send(int worker, v1::SessionRequest request, AnswerFn on_answer) {
    // A stream that ended between the look-up and the send: open another.
    for (int attempt = 0; attempt < 3; ++attempt) {
      WorkerStream* stream = StreamOf(worker);
      if (stream->Send(request, on_answer)) return;
    }
    on_answer(absl::UnavailableError(
                  absl::StrCat("session of ", WorkerName(worker), ": no stream took the request")),
              0);
  }

  void SendUnanswered(int worker, v1::SessionRequest request, WrittenFn written) {
    WorkerStream* stream = StreamOf(worker);
    if (!stream->Send(std::move(request), nullptr, written) && written != nullptr) written(false);
  }

  // The worker's stream, opened (and started) here when it has none or its
  // last one takes no more messages.
  WorkerStream* StreamOf(int worker);

  const SessionDriverOptions options_;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  std::atomic<int64_t> opens_{0}, takes_{0}, completes_{0}, complete_and_takes_{0}, progress_{0};

  absl::Mutex mu_;
  std::vector<WorkerSlot> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<WorkerStream>> streams_ ABSL_GUARDED_BY(mu_);
  int64_t live_ ABSL_GUARDED_BY(mu_) = 0;  // streams started and not yet done
  StreamCounts counts_ ABSL_GUARDED_BY(mu_);
};

WorkerStream* SessionDriver::StreamOf(int worker) {
  WorkerStream* started = nullptr;
  {
    absl::MutexLock lock(&mu_);
    WorkerSlot& slot = SlotLocked(worker);
    // A stream that no longer takes messages but is not done yet stays:
    // Send says so, and the worker retries after its OnDone.
    if (slot.stream == nullptr || slot.stream->done()) {
      std::vector<uint64_t> held;
      if (slot.held != 0) held.push_back(slot.held);
      v1::SessionRequest open = bench::SessionOpenRequest(options_.queue, WorkerName(worker), held);
      const bool reopen = slot.stream != nullptr;
      streams_.push_back(std::make_unique<WorkerStream>(*this, worker, reopen, std::move(open)));
      slot.stream = started = streams_.back().get();
      ++live_;
      opens_.fetch_add(1, std::memory_order_relaxed);
    }
    if (started == nullptr) return slot.stream;
  }
  started->Start(*stubs_[static_cast<size_t>(worker) % stubs_.size()]);
  return started;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerDriver>> NewSessionDriver(
    const SessionDriverOptions& options) {
  if (options.channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("session driver: channels must be >= 1, got ", options.channels));
  }
  if (options.address.empty() || options.queue.empty()) {
    return absl::InvalidArgumentError("session driver: address and queue must be set");
  }
  return std::unique_ptr<WorkerDriver>(new SessionDriver(options));
}

}  // namespace shardq::scale
