// bench/coordinator_throughput: the completion-queue session driver
// (session_driver.h, NewCompletionQueueSessionSystem). One thread runs a
// row: it owns one grpc::CompletionQueue, starts every client's Session
// stream on it (gRPC's async API) and handles every event itself, so that
// a message read and the next one written cost the client no thread
// hand-off. The protocol, the checks and the results are the callback
// driver's (session_driver.cc): one item in flight a client, the
// completion and the next take in one message, every completion checked.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/common/session_stream.h"
#include "bench/coordinator_throughput/session_driver.h"
#include "grpcpp/grpcpp.h"
#include "proto/shardq/coordinator.grpc.pb.h"

namespace shardq::throughput {
namespace {

namespace v1 = ::shardq::v1;
using SteadyClock = std::chrono::steady_clock;

// What a completion-queue event finished; a client's events are tagged
// with the address of one of its Op structs.
enum class OpKind { kStart, kRead, kWrite, kWritesDone, kFinish };

class CqRow {
 public:
  CqRow(const std::string& address, int channels, const RowClients& row,
        std::vector<ClientResult>& results)
      : row_(row),
        results_(results),
        stubs_(bench::OwnConnectionStubs(address, channels)),
        clients_(static_cast<size_t>(row.clients)) {
    for (int i = 0; i < row.clients; ++i) {
      Client& c = clients_[static_cast<size_t>(i)];
      c.index = i;
      c.name = absl::StrCat(row.label, "-c", row.clients, "-worker-", i);
      for (int k = 0; k < kOps; ++k) c.ops[k] = Op{&c, static_cast<OpKind>(k)};
    }
  }

  ~CqRow() {
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  // Runs the row (see System::RunClients) on the calling thread.
  absl::StatusOr<RowClock> Run() {
    for (Client& c : clients_) Open(c, row_.warmup_queue);
    // Warm-up drained and the measured queue's streams opened (or failed).
    Pump([this] { return ready_ == row_.clients; });
    const double cpu_start = ProcessCpuSeconds();
    const SteadyClock::time_point start = SteadyClock::now();
    if (first_error_.ok()) {
      for (Client& c : clients_) {
        c.measured = true;
        SendTake(c);
      }
      Pump([this] { return drained_ == row_.clients; });
    }
    Pump([this] { return live_ == 0; });
    for (int i = 0; i < row_.clients; ++i) results_[i].status = clients_[i].status;
    if (!first_error_.ok()) return first_error_;
    RowClock clock;
    clock.seconds = std::chrono::duration<double>(last_drained_ - start).count();
    clock.client_cpu_seconds = cpu_at_last_drained_ - cpu_start;
    return clock;
  }

 private:
  static constexpr int kOps = 5;
  enum class Phase { kWarmup, kWarmupDrained, kOpening, kReady, kDrained, kClosed, kFailed };
  struct Client;
  struct Op {
    Client* client = nullptr;
    OpKind kind = OpKind::kStart;
  };
  struct Client {
    int index = 0;
    std::string name;
    Phase phase = Phase::kWarmup;
    absl::Status status;
    bool measured = false;
    std::optional<Taken> completing;  // sent with the next take
    // The stream in use (one at a time: the warm-up queue's, then the
    // measured queue's).
    std::unique_ptr<grpc::ClientContext> ctx;
    std::unique_ptr<grpc::ClientAsyncReaderWriter<v1::SessionRequest, v1::SessionResponse>>
        stream;
    v1::SessionResponse response;  // the read in flight
    grpc::Status finish;
    bool opened = false;           // `opened` was read on this stream
    bool finished = false;         // its status is in (Finish's event)
    bool writing = false;          // a write or the half-close in flight
    bool half_close = false;       // half-close once the writes are out
    std::deque<v1::SessionRequest> outgoing;
    v1::SessionRequest current;    // the write in flight
    uint64_t last_request_id = 0;
    uint64_t awaited_id = 0;       // the request in flight (0: none)
    SteadyClock::time_point sent;  // when it was queued
    Op ops[kOps];
  };

  // Handles events until `done()` holds.
  template <typename Done>
  void Pump(Done done) {
    while (!done()) {
      void* tag = nullptr;
      bool ok = false;
      if (!cq_.Next(&tag, &ok)) return;  // shut down (not reached while streams live)
      Handle(*static_cast<Op*>(tag), ok);
    }
  }

  void Open(Client& c, const std::string& queue) {
    c.ctx = std::make_unique<grpc::ClientContext>();
    c.opened = false;
    c.finished = false;
    c.writing = false;
    c.half_close = false;
    c.outgoing.clear();
    c.awaited_id = 0;
    c.stream = stubs_[static_cast<size_t>(c.index) % stubs_.size()]->PrepareAsyncSession(
        c.ctx.get(), &cq_);
    c.outgoing.push_back(bench::SessionOpenRequest(queue, c.name));
    ++live_;
    c.stream->StartCall(&c.ops[static_cast<int>(OpKind::kStart)]);
  }

  void Handle(Op& op, bool ok) {
    Client& c = *op.client;
    switch (op.kind) {
      case OpKind::kStart:
        if (!ok) return Finish(c);
        c.stream->Read(&c.response, &c.ops[static_cast<int>(OpKind::kRead)]);
        return Write(c);
      case OpKind::kRead:
        if (!ok) return Finish(c);
        return ReadDone(c);
      case OpKind::kWrite:
      case OpKind::kWritesDone:
        c.writing = false;
        // The stream's status came in while this write was out: it ends
        // now that nothing of it is pending (the next stream reuses the
        // client's tags).
        if (c.finished) return Ended(c);
        // A failed write: the read fails too, and its Finish ends the stream.
        if (ok) Write(c);
        return;
      case OpKind::kFinish:
        c.finished = true;
        if (c.writing) return;  // ended by the write's event
        return Ended(c);
    }
  }

  // Starts the next write, or the half-close, when none is in flight.
  void Write(Client& c) {
    if (c.writing) return;
    if (!c.outgoing.empty()) {
      c.current = std::move(c.outgoing.front());
      c.outgoing.pop_front();
      c.writing = true;
      c.stream->Write(c.current, &c.ops[static_cast<int>(OpKind::kWrite)]);
    } else if (c.half_close) {
      c.half_close = false;
      c.writing = true;
      c.stream->WritesDone(&c.ops[static_cast<int>(OpKind::kWritesDone)]);
    }
  }

  // The read ended (the server ended the stream, or it broke): asks for
  // the stream's status.
  void Finish(Client& c) {
    c.stream->Finish(&c.finish, &c.ops[static_cast<int>(OpKind::kFinish)]);
  }

  void ReadDone(Client& c) {
    const v1::SessionResponse& response = c.response;
    if (!c.opened) {
      c.opened = true;
      if (!response.has_opened()) {
        Fail(c, absl::InternalError(absl::StrCat("session of '", c.name,
                                                 "': the first message is not `opened`")));
      } else if (c.phase == Phase::kOpening) {
        c.phase = Phase::kReady;
        ++ready_;
      } else if (c.phase == Phase::kWarmup) {
        SendTake(c);
      }
    } else {
      Pushed(c, response);
      if (response.request_id() != 0) {
        if (response.request_id() != c.awaited_id) {
          Fail(c, absl::InternalError(absl::StrCat("session of '", c.name,
                                                   "': an answer to request ",
                                                   response.request_id(), ", awaited ",
                                                   c.awaited_id)));
        } else {
          c.awaited_id = 0;
          const int64_t latency_ns =
              std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - c.sent)
                  .count();
          Answered(c, response, latency_ns);
        }
      }
    }
    c.stream->Read(&c.response, &c.ops[static_cast<int>(OpKind::kRead)]);
  }

  // Lost leases fail the client; split proposals are refused (the bench's
  // items are not split).
  void Pushed(Client& c, const v1::SessionResponse& response) {
    if (response.lost_lease_ids_size() > 0) {
      return Fail(c, absl::InternalError(absl::StrCat("session of '", c.name, "' lost lease ",
                                                      response.lost_lease_ids(0))));
    }
    if (response.splits_size() == 0) return;
    v1::SessionRequest refusal;
    for (const v1::SplitProposal& split : response.splits()) {
      v1::SplitAnswer* answer = refusal.add_split_answers();
      answer->set_lease_id(split.lease_id());
      answer->set_split_point(-1);
    }
    Send(c, std::move(refusal));
  }

  void Send(Client& c, v1::SessionRequest request) {
    c.outgoing.push_back(std::move(request));
    Write(c);
  }

  // One request: the completion of the item held, if any, and a take.
  void SendTake(Client& c) {
    if (c.phase == Phase::kFailed) return;
    v1::SessionRequest request;
    if (c.completing.has_value()) request.add_complete_lease_ids(c.completing->lease_id);
    request.set_take(1);
    request.set_take_wait_ms(kSessionTakeWaitMs);
    request.set_request_id(++c.last_request_id);
    c.awaited_id = request.request_id();
    c.sent = SteadyClock::now();
    Send(c, std::move(request));
  }

  void Answered(Client& c, const v1::SessionResponse& response, int64_t latency_ns) {
    absl::StatusOr<AfterAnswer> next =
        ApplyTakeAnswer(response, latency_ns, c.name, c.measured, &c.completing,
                        &results_[static_cast<size_t>(c.index)]);
    if (!next.ok()) return Fail(c, next.status());
    if (*next == AfterAnswer::kDrained) return Drained(c);
    SendTake(c);
  }

  // The client saw its queue drained: it half-closes, and the coordinator
  // ends the stream OK once its answers are written.
  void Drained(Client& c) {
    if (c.phase == Phase::kFailed) return;
    if (c.measured) {
      c.phase = Phase::kDrained;
      ++drained_;
      last_drained_ = SteadyClock::now();
      if (drained_ == row_.clients) cpu_at_last_drained_ = ProcessCpuSeconds();
    } else {
      c.phase = Phase::kWarmupDrained;
    }
    c.half_close = true;
    Write(c);
  }

  // The stream's status is in: the warm-up stream's end opens the measured
  // queue's; any other end but the drained one's fails the client.
  void Ended(Client& c) {
    --live_;
    const Phase phase = c.phase;
    if (phase == Phase::kWarmupDrained && c.finish.ok()) {
      c.phase = Phase::kOpening;
      return Open(c, row_.queue);
    }
    if (phase == Phase::kDrained && c.finish.ok()) {
      c.phase = Phase::kClosed;
      return;
    }
    if (phase == Phase::kFailed) return;
    Fail(c, c.finish.ok()
                ? absl::InternalError(absl::StrCat("session of '", c.name,
                                                   "' ended OK before the queue was drained"))
                : absl::Status(static_cast<absl::StatusCode>(c.finish.error_code()),
                               absl::StrCat("session of '", c.name,
                                            "': ", c.finish.error_message())));
  }

  // A client's first error ends it: it counts as ready and drained (Run
  // waits for no more of it). The row's first error cancels every stream.
  void Fail(Client& c, absl::Status status) {
    if (!c.status.ok() || c.phase == Phase::kClosed) return;
    if (c.phase != Phase::kReady && c.phase != Phase::kDrained) ++ready_;
    if (c.phase != Phase::kDrained) {
      ++drained_;
      last_drained_ = SteadyClock::now();
    }
    c.phase = Phase::kFailed;
    c.status = status;
    if (!first_error_.ok()) return;
    first_error_ = absl::Status(status.code(), absl::StrCat(row_.label, " client ", c.index,
                                                            ": ", status.message()));
    for (Client& other : clients_) {
      if (other.ctx != nullptr) other.ctx->TryCancel();
    }
  }

  const RowClients row_;
  std::vector<ClientResult>& results_;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  grpc::CompletionQueue cq_;
  std::vector<Client> clients_;  // not resized: Ops point into it
  absl::Status first_error_;
  int ready_ = 0;    // clients ready (or failed) for the measured queue
  int drained_ = 0;  // clients that saw it drained (or failed)
  int live_ = 0;     // streams started whose Finish has not come
  SteadyClock::time_point last_drained_;
  double cpu_at_last_drained_ = 0;  // ProcessCpuSeconds()
};

class CompletionQueueSessionSystem final : public System {
 public:
  CompletionQueueSessionSystem(std::string address, int channels,
                               std::unique_ptr<System> control)
      : address_(std::move(address)), channels_(channels), control_(std::move(control)) {}

  absl::Status CreateQueue(const std::string& queue, int64_t num_items) override {
    return control_->CreateQueue(queue, num_items);
  }

  absl::StatusOr<std::unique_ptr<ClientSession>> Connect(const std::string& worker) override {
    return absl::UnimplementedError("the completion-queue session driver runs its own clients");
  }

  bool RunsOwnClients() const override { return true; }

  absl::StatusOr<RowClock> RunClients(const RowClients& row,
                                      std::vector<ClientResult>* results) override {
    const int channels = channels_ == 0 ? row.clients : std::min(channels_, row.clients);
    CqRow run(address_, channels, row, *results);
    return run.Run();
  }

  absl::StatusOr<std::string> CheckDrained(const std::string& queue, int64_t num_items) override {
    return control_->CheckDrained(queue, num_items);
  }

 private:
  const std::string address_;
  const int channels_;
  const std::unique_ptr<System> control_;
};

}  // namespace

std::unique_ptr<System> NewCompletionQueueSessionSystem(std::string address, int channels,
                                                        std::unique_ptr<System> control) {
  return std::make_unique<CompletionQueueSessionSystem>(std::move(address), channels,
                                                        std::move(control));
}

}  // namespace shardq::throughput
