// bench/scale: SessionDriver, one Session stream per simulated worker
// (coordinator.proto, rpc Session) with the callback API, over a few shared
// channels. A stream (WorkerStream) keeps one read outstanding for its whole
// life, writes one message at a time from a queue, and matches answers to
// requests in order; the driver opens a worker's stream on its first call,
// and opens another (naming the lease the worker holds) after one ended.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
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
#include "bench/scale/worker_driver.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_callback.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/rpc/protocol_version.h"

namespace shardq::scale {
namespace {

namespace v1 = ::shardq::v1;
using SteadyClock = std::chrono::steady_clock;

int64_t NanosSince(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - t).count();
}

absl::Status FromOp(const v1::OpStatus& op, absl::string_view what) {
  if (op.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(op.code()),
                      absl::StrCat(what, ": ", op.message()));
}

// The answer to one request (valid during the call only) and its round
// trip, or why none came (the stream ended).
using AnswerFn =
    std::function<void(absl::StatusOr<const v1::SessionResponse*> answer, int64_t latency_ns)>;
// Whether an unanswered message was written.
using WrittenFn = std::function<void(bool written)>;

class SessionDriver;

// One stream of one worker. Created by the driver, which deletes it only
// after its OnDone (in the driver's destructor). Thread-safe.
class WorkerStream final
    : public grpc::ClientBidiReactor<v1::SessionRequest, v1::SessionResponse> {
 public:
  WorkerStream(SessionDriver& driver, int worker, bool reopen, v1::SessionRequest open)
      : driver_(driver), worker_(worker), reopen_(reopen) {
    outgoing_.push_back(Outgoing{std::move(open), nullptr});
  }

  // Starts the call (the `open` first); before it, Send only queues.
  void Start(v1::Coordinator::Stub& stub) {
    stub.async()->Session(&ctx_, this);
    // Writes may be started from outside a reaction (the workers' timers)
    // until the stream no longer takes them; the hold keeps OnDone back.
    AddHold();
    StartRead(&response_);
    Pump();
    StartCall();
  }

  // Queues `request`; with `on_answer`, it gets the next request id and is
  // answered by exactly one call (its answer, or the stream's end). False
  // when the stream takes no more messages: nothing was queued.
  bool Send(v1::SessionRequest request, AnswerFn on_answer, WrittenFn written = nullptr) {
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) return false;
      if (on_answer != nullptr) {
        request.set_request_id(++last_request_id_);
        pending_.push_back(Pending{request.request_id(), std::move(on_answer),
                                   SteadyClock::now()});
      }
      outgoing_.push_back(Outgoing{std::move(request), std::move(written)});
    }
    Pump();
    return true;
  }

  // Half-closes after the queued messages: the coordinator then ends the
  // stream OK once its answers are written.
  void HalfClose() {
    {
      absl::MutexLock lock(&mu_);
      if (!accepting_) return;
      accepting_ = false;
      half_close_ = true;
    }
    Pump();
  }

  // Ends the stream (CANCELLED); not counted as dropped.
  void Cancel() {
    {
      absl::MutexLock lock(&mu_);
      if (done_) return;
      cancelled_ = true;
    }
    ctx_.TryCancel();
  }

  // Ends the stream after a message that breaks the protocol (no read is
  // started after it); counted as dropped.
  void Abort() {
    {
      absl::MutexLock lock(&mu_);
      read_ended_ = true;
      accepting_ = false;
    }
    ctx_.TryCancel();
    Pump();
  }

  bool done() const {
    absl::MutexLock lock(&mu_);
    return done_;
  }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnWritesDoneDone(bool ok) override { WriteFinished(ok); }
  void OnDone(const grpc::Status& status) override;

 private:
  struct Pending {
    uint64_t request_id;
    AnswerFn on_answer;
    SteadyClock::time_point sent;
  };
  struct Outgoing {
    v1::SessionRequest request;
    WrittenFn written;
  };

  // Starts the next write or the half-close when none is in flight, and
  // lets OnDone come once nothing more can be written. Called unlocked.
  void Pump() {
    const v1::SessionRequest* write = nullptr;
    bool writes_done = false, release = false;
    {
      absl::MutexLock lock(&mu_);
      if (writing_) return;
      if (!outgoing_.empty() && !read_ended_) {
        writing_ = true;
        current_ = std::move(outgoing_.front());
        outgoing_.pop_front();
        write = &current_.request;
      } else if (half_close_ && !half_closed_ && !read_ended_) {
        writing_ = half_closed_ = writes_done = true;
      } else if (held_ && (read_ended_ || half_closed_)) {
        held_ = false;
        release = true;
      }
    }
    if (write != nullptr) StartWrite(write);
    if (writes_done) StartWritesDone();
    if (release) RemoveHold();
  }

  void WriteFinished(bool ok) {
    WrittenFn written;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      written = std::move(current_.written);
      current_.written = nullptr;
      if (!ok) {
        // The stream is broken: no more writes; OnDone fails the rest.
        read_ended_ = true;
        accepting_ = false;
      }
    }
    if (written != nullptr) written(ok);
    Pump();
  }

  SessionDriver& driver_;
  const int worker_;
  const bool reopen_;
  grpc::ClientContext ctx_;
  v1::SessionResponse response_;  // the read in flight; read again after it is handled

  mutable absl::Mutex mu_;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;   // Send queues messages
  bool opened_ ABSL_GUARDED_BY(mu_) = false;     // `opened` was read
  bool writing_ ABSL_GUARDED_BY(mu_) = false;    // a write or the half-close in flight
  bool half_close_ ABSL_GUARDED_BY(mu_) = false;
  bool half_closed_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ended_ ABSL_GUARDED_BY(mu_) = false;  // the read failed: the stream is over
  bool held_ ABSL_GUARDED_BY(mu_) = true;          // AddHold not yet removed
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_request_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<Outgoing> outgoing_ ABSL_GUARDED_BY(mu_);
  Outgoing current_ ABSL_GUARDED_BY(mu_);  // the write in flight
};

class SessionDriver final : public WorkerDriver {
 public:
  explicit SessionDriver(const SessionDriverOptions& options)
      : options_(options), workers_(1) {
    for (int i = 0; i < options_.channels; ++i) {
      grpc::ChannelArguments args;
      // A distinct argument and a local subchannel pool: each channel gets a
      // TCP connection of its own rather than sharing one.
      args.SetInt("shardq.scale.channel", i);
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      stubs_.push_back(v1::Coordinator::NewStub(
          grpc::CreateCustomChannel(options_.address, grpc::InsecureChannelCredentials(), args)));
    }
  }

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
  void StreamOpened(int worker, bool reopen, const v1::SessionOpened& opened) {
    absl::MutexLock lock(&mu_);
    if (reopen) {
      ++counts_.reopened;
    } else {
      ++counts_.opened;
    }
    LostLocked(worker, opened.lost_lease_ids());
  }

  // Called by a stream for every message read after `opened`.
  void Pushed(int worker, const v1::SessionResponse& response) {
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
  void StreamEnded(int worker, bool cancelled, const grpc::Status& status) {
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
    if (answer.complete_results_size() != 1 ||
        answer.complete_results(0).lease_id() != lease.lease_id) {
      return absl::InternalError(absl::StrCat("session of ", WorkerName(worker), ": ",
                                              answer.complete_results_size(),
                                              " completion results for lease ", lease.lease_id));
    }
    const v1::CompleteResult& result = answer.complete_results(0);
    if (absl::Status s = FromOp(result.status(), absl::StrCat("complete lease ", lease.lease_id));
        !s.ok()) {
      return s;
    }
    absl::MutexLock lock(&mu_);
    WorkerSlot& slot = SlotLocked(worker);
    if (slot.held == lease.lease_id) slot.held = 0;
    return result.duplicate();
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
      v1::SessionRequest open;
      v1::SessionOpen* o = open.mutable_open();
      o->set_queue(options_.queue);
      o->set_worker(WorkerName(worker));
      o->mutable_version()->set_major(kProtocolMajor);
      o->mutable_version()->set_minor(kProtocolMinor);
      if (slot.held != 0) o->add_lease_ids(slot.held);
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

void WorkerStream::OnReadDone(bool ok) {
  if (!ok) {
    {
      absl::MutexLock lock(&mu_);
      read_ended_ = true;
      accepting_ = false;
    }
    Pump();  // releases the hold once no write is in flight
    return;
  }
  bool opened_now = false, out_of_order = false;
  std::optional<Pending> answered;
  {
    absl::MutexLock lock(&mu_);
    if (!opened_) {
      opened_ = opened_now = true;
      // Requests queued behind the open are timed from here.
      for (Pending& p : pending_) p.sent = SteadyClock::now();
    } else if (response_.request_id() != 0) {
      if (!pending_.empty() && pending_.front().request_id == response_.request_id()) {
        answered = std::move(pending_.front());
        pending_.pop_front();
      } else {
        out_of_order = true;
      }
    }
  }
  if ((opened_now && !response_.has_opened()) || out_of_order) {
    Abort();  // not the protocol: OnDone fails what is pending
    return;
  }
  if (opened_now) {
    driver_.StreamOpened(worker_, reopen_, response_.opened());
  } else {
    driver_.Pushed(worker_, response_);
    if (answered.has_value()) answered->on_answer(&response_, NanosSince(answered->sent));
  }
  StartRead(&response_);
}

void WorkerStream::OnWriteDone(bool ok) { WriteFinished(ok); }

void WorkerStream::OnDone(const grpc::Status& status) {
  std::deque<Pending> pending;
  std::deque<Outgoing> outgoing;
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
    accepting_ = false;
    pending.swap(pending_);
    outgoing.swap(outgoing_);
    cancelled = cancelled_;
  }
  const absl::Status ended =
      status.ok() ? absl::UnavailableError(
                        absl::StrCat("session of ", WorkerName(worker_), " ended before answering"))
                  : absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                 absl::StrCat("session of ", WorkerName(worker_), ": ",
                                              status.error_message()));
  for (Outgoing& o : outgoing) {
    if (o.written != nullptr) o.written(false);
  }
  for (Pending& p : pending) p.on_answer(ended, 0);
  driver_.StreamEnded(worker_, cancelled, status);  // last: the driver may now delete this
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
