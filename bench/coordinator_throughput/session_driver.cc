// bench/coordinator_throughput: the session drivers (session_driver.h):
// the callback one (CallbackRow), and the blocking one (StreamSession),
// kept for comparison.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/common/session_stream.h"
#include "bench/coordinator_throughput/session_driver.h"
#include "proto/shardq/coordinator.grpc.pb.h"

namespace shardq::throughput {
namespace {

namespace v1 = ::shardq::v1;
using bench::FromOp;

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

// The completion of `taken` in `answer`: an error unless the coordinator
// counted it as the item's first.
absl::Status CheckFirstCompletion(const v1::SessionResponse& answer, const Taken& taken,
                                  absl::string_view worker) {
  absl::StatusOr<bool> duplicate = bench::CompletionOf(
      answer, taken.lease_id, absl::StrCat("'", worker, "' (", ItemName(taken.index), ")"));
  if (!duplicate.ok()) return duplicate.status();
  if (*duplicate) {
    return absl::InternalError(absl::StrCat("shardq counted the completion of ",
                                            ItemName(taken.index), " as a duplicate"));
  }
  return absl::OkStatus();
}

// One client: one stream at a time, opened by Open(queue) and closed (half-
// close, then the server's OK) by the next Open or the destructor.
class StreamSession final : public ClientSession {
 public:
  // A channel with a TCP connection of its own, like a Redis client's.
  StreamSession(const std::string& address, std::string worker)
      : worker_(std::move(worker)), stub_(std::move(bench::OwnConnectionStubs(address, 1)[0])) {}

  ~StreamSession() override { Close().IgnoreError(); }

  absl::Status Open(const std::string& queue) override {
    if (absl::Status s = Close(); !s.ok()) return s;
    ctx_ = std::make_unique<grpc::ClientContext>();
    stream_ = stub_->Session(ctx_.get());
    queue_ = queue;
    request_ = bench::SessionOpenRequest(queue, worker_);
    if (!stream_->Write(request_)) return EndedEarly("writing `open`");
    if (!stream_->Read(&response_)) return EndedEarly("waiting for `opened`");
    if (!response_.has_opened()) {
      return absl::InternalError(absl::StrCat("session of '", worker_, "' on queue '", queue,
                                              "': the first answer carries no `opened`"));
    }
    return absl::OkStatus();
  }

  absl::Status Take(const std::string& queue, std::vector<Taken>* out) override {
    out->clear();
    if (stream_ == nullptr || queue != queue_) {
      return absl::FailedPreconditionError(
          absl::StrCat("session of '", worker_, "': Take on queue '", queue,
                       "' without a stream opened on it"));
    }
    while (true) {
      request_.Clear();
      request_.set_request_id(++last_request_id_);
      const std::optional<Taken> completing = std::exchange(completing_, std::nullopt);
      if (completing.has_value()) request_.add_complete_lease_ids(completing->lease_id);
      for (uint64_t lease_id : splits_to_refuse_) {
        v1::SplitAnswer* answer = request_.add_split_answers();
        answer->set_lease_id(lease_id);
        answer->set_split_point(-1);
      }
      splits_to_refuse_.clear();
      request_.set_take(1);
      request_.set_take_wait_ms(kSessionTakeWaitMs);
      if (!stream_->Write(request_)) return EndedEarly("writing a request");
      if (absl::Status s = ReadAnswer(request_.request_id()); !s.ok()) return s;
      if (completing.has_value()) {
        if (absl::Status s = CheckCompleted(*completing); !s.ok()) return s;
      }
      if (absl::Status s = FromOp(response_.take_status(), "take"); !s.ok()) return s;
      if (response_.end_of_input()) return absl::OkStatus();  // drained
      if (response_.items_size() == 0) continue;              // nothing yet: ask again
      for (const v1::WorkItem& item : response_.items()) {
        Taken taken;
        taken.index = item.index();
        taken.lease_id = item.lease_id();
        out->push_back(std::move(taken));
      }
      return absl::OkStatus();
    }
  }

  absl::Status Complete(const std::string& queue, const Taken& taken) override {
    if (completing_.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("session of '", worker_, "': a second completion before the next take"));
    }
    completing_ = taken;
    return absl::OkStatus();
  }

  bool CompletesWithNextTake() const override { return true; }

 private:
  // Reads until the answer to `request_id`; pushed messages (request_id 0)
  // before it are taken note of.
  absl::Status ReadAnswer(uint64_t request_id) {
    while (true) {
      if (!stream_->Read(&response_)) return EndedEarly("waiting for an answer");
      if (response_.request_id() == request_id) break;
      if (response_.request_id() != 0) {
        return absl::InternalError(absl::StrCat("session of '", worker_, "': answer to request ",
                                                response_.request_id(), " while waiting for ",
                                                request_id));
      }
      if (response_.lost_lease_ids_size() > 0) {
        return absl::InternalError(absl::StrCat("session of '", worker_, "' lost lease ",
                                                response_.lost_lease_ids(0)));
      }
      for (const v1::SplitProposal& split : response_.splits()) {
        splits_to_refuse_.push_back(split.lease_id());
      }
    }
    if (response_.lost_lease_ids_size() > 0) {
      return absl::InternalError(
          absl::StrCat("session of '", worker_, "' lost lease ", response_.lost_lease_ids(0)));
    }
    for (const v1::SplitProposal& split : response_.splits()) {
      splits_to_refuse_.push_back(split.lease_id());
    }
    return absl::OkStatus();
  }

  absl::Status CheckCompleted(const Taken& taken) const {
    return CheckFirstCompletion(response_, taken, worker_);
  }

  // The stream ended while `doing`: its status, or an error if it was OK.
  absl::Status EndedEarly(absl::string_view doing) {
    const grpc::Status s = stream_->Finish();
    stream_.reset();
    const std::string what =
        absl::StrCat("session of '", worker_, "' on queue '", queue_, "' ended ", doing);
    if (!s.ok()) return FromGrpc(s, what);
    return absl::InternalError(absl::StrCat(what, " (status OK)"));
  }

  // Half-closes the stream and waits for the server to end it; an error
  // unless it ends OK with no completion left unsent.
  absl::Status Close() {
    if (stream_ == nullptr) return absl::OkStatus();
    absl::Status status;
    if (completing_.has_value()) {
      status = absl::FailedPreconditionError(
          absl::StrCat("session of '", worker_, "' closed with the completion of ",
                       ItemName(completing_->index), " unsent"));
      completing_.reset();
    }
    stream_->WritesDone();
    while (stream_->Read(&response_)) {
    }
    const grpc::Status s = stream_->Finish();
    stream_.reset();
    if (status.ok()) status = FromGrpc(s, absl::StrCat("closing the session of '", worker_, "'"));
    return status;
  }

  const std::string worker_;
  const std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> stream_;
  std::string queue_;
  uint64_t last_request_id_ = 0;
  std::optional<Taken> completing_;        // sent with the next take
  std::vector<uint64_t> splits_to_refuse_;  // proposals, answered with the next take
  v1::SessionRequest request_;              // reused: no allocation per item
  v1::SessionResponse response_;
};

class SessionSystem final : public System {
 public:
  SessionSystem(std::string address, std::unique_ptr<System> control)
      : address_(std::move(address)), control_(std::move(control)) {}

  absl::Status CreateQueue(const std::string& queue, int64_t num_items) override {
    return control_->CreateQueue(queue, num_items);
  }

  absl::StatusOr<std::unique_ptr<ClientSession>> Connect(const std::string& worker) override {
    return std::unique_ptr<ClientSession>(std::make_unique<StreamSession>(address_, worker));
  }

  absl::StatusOr<std::string> CheckDrained(const std::string& queue, int64_t num_items) override {
    return control_->CheckDrained(queue, num_items);
  }

 private:
  const std::string address_;
  const std::unique_ptr<System> control_;
};

// ---------------------------------------------------------------------------
// The callback driver: one row's clients, each a SessionStream whose
// answers drive it (the next request is sent from the previous answer's
// callback, on a gRPC thread). A client's Client is touched by one callback
// at a time (one request in flight, and a stream's calls never overlap);
// its phase, status and streams, and what Run waits for, are under mu_.
class CallbackRow final : public bench::SessionStreamListener {
 public:
  CallbackRow(const std::string& address, int channels, const RowClients& row,
              std::vector<ClientResult>& results)
      : row_(row),
        results_(results),
        stubs_(bench::OwnConnectionStubs(address, channels)),
        clients_(static_cast<size_t>(row.clients)),
        shared_(static_cast<size_t>(row.clients)) {
    for (int i = 0; i < row.clients; ++i) {
      clients_[i].name = absl::StrCat(row.label, "-c", row.clients, "-worker-", i);
    }
  }

  // Runs the row (see System::RunClients); returns once every stream ended.
  absl::StatusOr<RowClock> Run() {
    for (int i = 0; i < row_.clients; ++i) {
      OpenStream(i, row_.warmup_queue);
      SendTake(i);
    }
    // Warm-up drained and the measured queue's streams opened (or failed).
    Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ready_ == row_.clients; });
    const bool failed = HasFailed();
    const double cpu_start = ProcessCpuSeconds();
    const SteadyClock::time_point start = SteadyClock::now();
    if (!failed) {
      for (int i = 0; i < row_.clients; ++i) {
        clients_[i].measured = true;
        SendTake(i);
      }
      Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return drained_ == row_.clients; });
    }
    // Every client half-closed its stream on seeing the queue drained, and
    // the coordinator ends each OK; a failure cancelled them all.
    Await([this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return live_ == 0; });
    stubs_.clear();
    absl::MutexLock lock(&mu_);
    for (int i = 0; i < row_.clients; ++i) results_[i].status = shared_[i].status;
    if (!first_error_.ok()) return first_error_;
    RowClock clock;
    clock.seconds = std::chrono::duration<double>(last_drained_ - start).count();
    clock.client_cpu_seconds = cpu_at_last_drained_ - cpu_start;
    return clock;
  }

  void StreamOpened(int worker, bool reopen, const v1::SessionOpened& opened) override {
    absl::MutexLock lock(&mu_);
    Shared& shared = shared_[worker];
    if (shared.phase != Phase::kOpening) return;  // the warm-up stream
    shared.phase = Phase::kReady;
    ++ready_;
  }

  void Pushed(int worker, const v1::SessionResponse& response) override {
    if (response.lost_lease_ids_size() > 0) {
      return Fail(worker, absl::InternalError(absl::StrCat("session of '", clients_[worker].name,
                                                           "' lost lease ",
                                                           response.lost_lease_ids(0))));
    }
    if (response.splits_size() == 0) return;
    // The bench's items are not split: refuse, so none stays pending.
    v1::SessionRequest refusal;
    for (const v1::SplitProposal& split : response.splits()) {
      v1::SplitAnswer* answer = refusal.add_split_answers();
      answer->set_lease_id(split.lease_id());
      answer->set_split_point(-1);
    }
    StreamOf(worker)->Send(std::move(refusal), nullptr);
  }

  void StreamEnded(int worker, bool cancelled, const grpc::Status& status) override {
    Phase phase;
    {
      absl::MutexLock lock(&mu_);
      Shared& shared = shared_[worker];
      phase = shared.phase;
      if (phase == Phase::kWarmupDrained && status.ok()) shared.phase = Phase::kOpening;
      if (phase == Phase::kDrained && status.ok()) shared.phase = Phase::kClosed;
    }
    const std::string& name = clients_[worker].name;
    if (phase == Phase::kWarmupDrained && status.ok()) {
      // The warm-up stream is over: open the measured queue's, and wait.
      OpenStream(worker, row_.queue);
    } else if (!(phase == Phase::kDrained && status.ok()) && phase != Phase::kFailed) {
      Fail(worker, status.ok()
                       ? absl::InternalError(absl::StrCat(
                             "session of '", name, "' ended OK before the queue was drained"))
                       : absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                      absl::StrCat("session of '", name, "': ",
                                                   status.error_message())));
    }
    absl::MutexLock lock(&mu_);
    --live_;  // last: Run may return now
  }

 private:
  using SteadyClock = std::chrono::steady_clock;
  enum class Phase {
    kWarmup,         // draining the warm-up queue
    kWarmupDrained,  // half-closed: its end opens the measured queue's stream
    kOpening,        // the measured queue's stream waits for `opened`
    kReady,          // opened; the row starts once every client is
    kDrained,        // saw the measured queue drained; half-closed
    kClosed,         // its stream ended OK
    kFailed,
  };
  // A client's state in its callbacks.
  struct Client {
    std::string name;
    bool measured = false;            // on the clock: results are recorded
    std::optional<Taken> completing;  // sent with the next take
  };
  // A client's state that Run and failures see.
  struct Shared {
    Phase phase = Phase::kWarmup;
    absl::Status status;
    std::vector<std::unique_ptr<bench::SessionStream>> streams;  // the last is current
  };

  template <typename Pred>
  void Await(Pred pred) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&pred));
  }

  bool HasFailed() {
    absl::MutexLock lock(&mu_);
    return !first_error_.ok();
  }

  bench::SessionStream* StreamOf(int i) {
    absl::MutexLock lock(&mu_);
    return shared_[i].streams.back().get();
  }

  void OpenStream(int i, const std::string& queue) {
    bench::SessionStream* stream;
    {
      absl::MutexLock lock(&mu_);
      std::vector<std::unique_ptr<bench::SessionStream>>& streams = shared_[i].streams;
      streams.push_back(std::make_unique<bench::SessionStream>(
          *this, i, false, bench::SessionOpenRequest(queue, clients_[i].name)));
      stream = streams.back().get();
      ++live_;
    }
    stream->Start(*stubs_[static_cast<size_t>(i) % stubs_.size()]);
  }

  // One request: the completion of the item held, if any, and a take.
  void SendTake(int i) {
    Client& c = clients_[i];
    v1::SessionRequest request;
    if (c.completing.has_value()) request.add_complete_lease_ids(c.completing->lease_id);
    request.set_take(1);
    request.set_take_wait_ms(kSessionTakeWaitMs);
    const bool sent = StreamOf(i)->Send(
        std::move(request),
        [this, i](absl::StatusOr<const v1::SessionResponse*> answer, int64_t latency_ns) {
          Answered(i, answer, latency_ns);
        });
    if (!sent) {
      Fail(i, absl::UnavailableError(
                  absl::StrCat("session of '", c.name, "': the stream took no more requests")));
    }
  }

  void Answered(int i, const absl::StatusOr<const v1::SessionResponse*>& answer,
                int64_t latency_ns) {
    Client& c = clients_[i];
    if (!answer.ok()) return Fail(i, answer.status());
    absl::StatusOr<AfterAnswer> next =
        ApplyTakeAnswer(**answer, latency_ns, c.name, c.measured, &c.completing, &results_[i]);
    if (!next.ok()) return Fail(i, next.status());
    if (*next == AfterAnswer::kDrained) return Drained(i);
    SendTake(i);
  }

  // The client saw its queue drained: its stream is half-closed, and ends
  // OK once the coordinator has written its answers.
  void Drained(int i) {
    bench::SessionStream* stream;
    {
      absl::MutexLock lock(&mu_);
      Shared& shared = shared_[i];
      if (shared.phase == Phase::kFailed) return;
      if (clients_[i].measured) {
        shared.phase = Phase::kDrained;
        ++drained_;
        last_drained_ = SteadyClock::now();
        if (drained_ == row_.clients) cpu_at_last_drained_ = ProcessCpuSeconds();
      } else {
        shared.phase = Phase::kWarmupDrained;
      }
      stream = shared.streams.back().get();
    }
    stream->HalfClose();
  }

  // The client's first error ends it: it counts as ready and drained (Run
  // waits for no more of it). The row's first error cancels every stream.
  void Fail(int i, absl::Status status) {
    std::vector<bench::SessionStream*> to_cancel;
    {
      absl::MutexLock lock(&mu_);
      Shared& shared = shared_[i];
      if (!shared.status.ok()) return;
      const Phase phase = shared.phase;
      if (phase == Phase::kClosed) return;
      if (phase != Phase::kReady && phase != Phase::kDrained) ++ready_;
      if (phase != Phase::kDrained) {
        ++drained_;
        last_drained_ = SteadyClock::now();
      }
      shared.phase = Phase::kFailed;
      shared.status = status;
      if (first_error_.ok()) {
        first_error_ = absl::Status(status.code(),
                                    absl::StrCat(row_.label, " client ", i, ": ", status.message()));
        for (Shared& s : shared_) {
          if (!s.streams.empty()) to_cancel.push_back(s.streams.back().get());
        }
      }
    }
    for (bench::SessionStream* stream : to_cancel) stream->Cancel();
  }

  const RowClients row_;
  std::vector<ClientResult>& results_;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  std::vector<Client> clients_;

  absl::Mutex mu_;
  std::vector<Shared> shared_ ABSL_GUARDED_BY(mu_);
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  int ready_ ABSL_GUARDED_BY(mu_) = 0;    // clients ready (or failed) for the measured queue
  int drained_ ABSL_GUARDED_BY(mu_) = 0;  // clients that saw it drained (or failed)
  int live_ ABSL_GUARDED_BY(mu_) = 0;     // streams started and not yet ended
  SteadyClock::time_point last_drained_ ABSL_GUARDED_BY(mu_);
  double cpu_at_last_drained_ ABSL_GUARDED_BY(mu_) = 0;  // ProcessCpuSeconds()
};

class CallbackSessionSystem final : public System {
 public:
  CallbackSessionSystem(std::string address, int channels, std::unique_ptr<System> control)
      : address_(std::move(address)), channels_(channels), control_(std::move(control)) {}

  absl::Status CreateQueue(const std::string& queue, int64_t num_items) override {
    return control_->CreateQueue(queue, num_items);
  }

  absl::StatusOr<std::unique_ptr<ClientSession>> Connect(const std::string& worker) override {
    return absl::UnimplementedError("the callback session driver runs its own clients");
  }

  bool RunsOwnClients() const override { return true; }

  absl::StatusOr<RowClock> RunClients(const RowClients& row,
                                      std::vector<ClientResult>* results) override {
    const int channels = channels_ == 0 ? row.clients : std::min(channels_, row.clients);
    // Kept until this system goes: a stream's last call (StreamEnded) may
    // still be returning, on a gRPC thread, when Run sees it ended.
    rows_.push_back(std::make_unique<CallbackRow>(address_, channels, row, *results));
    return rows_.back()->Run();
  }

  absl::StatusOr<std::string> CheckDrained(const std::string& queue, int64_t num_items) override {
    return control_->CheckDrained(queue, num_items);
  }

 private:
  const std::string address_;
  const int channels_;
  const std::unique_ptr<System> control_;
  std::vector<std::unique_ptr<CallbackRow>> rows_;
};

}  // namespace

absl::StatusOr<AfterAnswer> ApplyTakeAnswer(const v1::SessionResponse& answer,
                                            int64_t latency_ns, absl::string_view worker,
                                            bool measured, std::optional<Taken>* completing,
                                            ClientResult* result) {
  if (completing->has_value()) {
    if (absl::Status s = CheckFirstCompletion(answer, **completing, worker); !s.ok()) return s;
    completing->reset();
    if (measured) {
      result->complete_latency.Record(latency_ns);
      ++result->completed;
    }
  }
  if (absl::Status s = FromOp(answer.take_status(), "take"); !s.ok()) return s;
  if (answer.end_of_input()) return AfterAnswer::kDrained;
  if (answer.items_size() == 0) return AfterAnswer::kTakeAgain;  // nothing yet
  if (answer.items_size() != 1) {
    return absl::InternalError(absl::StrCat("session of '", worker, "': ", answer.items_size(),
                                            " items for a take of 1"));
  }
  Taken taken;
  taken.index = answer.items(0).index();
  taken.lease_id = answer.items(0).lease_id();
  if (measured) {
    result->take_latency.Record(latency_ns);
    ++result->takes;
    result->taken.push_back(taken.index);
  }
  *completing = std::move(taken);
  return AfterAnswer::kTakeAgain;
}

std::unique_ptr<System> NewBlockingSessionSystem(std::string address,
                                                 std::unique_ptr<System> control) {
  return std::make_unique<SessionSystem>(std::move(address), std::move(control));
}

std::unique_ptr<System> NewCallbackSessionSystem(std::string address, int channels,
                                                 std::unique_ptr<System> control) {
  return std::make_unique<CallbackSessionSystem>(std::move(address), channels,
                                                 std::move(control));
}

}  // namespace shardq::throughput
