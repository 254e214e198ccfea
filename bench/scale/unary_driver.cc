// bench/scale: UnaryDriver, today's protocol (unary Take / Complete /
// Heartbeat) with the gRPC callback API over a few shared channels.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/scale/worker_driver.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/shardq/coordinator.grpc.pb.h"

namespace shardq::scale {

std::string WorkerName(int worker) { return absl::StrFormat("w%06d", worker); }

void WorkerDriver::CompleteAndTake(int worker, const Lease& lease, CompleteAndTakeDone done) {
  Complete(worker, lease, [this, worker, done = std::move(done)](absl::StatusOr<bool> completed) {
    if (!completed.ok()) {
      done(std::move(completed), absl::AbortedError("take not sent: the completion failed"));
      return;
    }
    Take(worker, [completed, done](absl::StatusOr<TakeReply> next) {
      done(completed, std::move(next));
    });
  });
}

namespace {

namespace v1 = ::shardq::v1;
using SteadyClock = std::chrono::steady_clock;

absl::Status FromGrpc(const grpc::Status& s, const char* rpc) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(rpc, ": ", s.error_message()));
}

// One RPC in flight: its context and messages live until the callback.
template <typename Req, typename Resp>
struct Call {
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
  SteadyClock::time_point sent;
};

class UnaryDriver final : public WorkerDriver {
 public:
  explicit UnaryDriver(const UnaryDriverOptions& options) : options_(options) {
    for (int i = 0; i < options_.channels; ++i) {
      grpc::ChannelArguments args;
      // A distinct argument and a local subchannel pool: each channel gets a
      // TCP connection of its own rather than sharing one.
      args.SetInt("shardq.scale.channel", i);
      args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
      args.SetMaxReceiveMessageSize(64 << 20);
      args.SetMaxSendMessageSize(64 << 20);
      auto channel = grpc::CreateCustomChannel(options_.address,
                                               grpc::InsecureChannelCredentials(), args);
      stubs_.push_back(v1::Coordinator::NewStub(channel));
    }
  }

  std::string Name() const override { return "unary"; }

  void Take(int worker, TakeDone done) override {
    auto* call = new Call<v1::TakeRequest, v1::TakeResponse>;
    call->req.set_queue(options_.queue);
    call->req.set_worker(WorkerName(worker));
    call->req.set_max_items(1);
    call->req.set_wait_ms(options_.take_wait_ms);
    Arm(call->ctx, options_.take_wait_ms);
    call->sent = SteadyClock::now();
    takes_.fetch_add(1, std::memory_order_relaxed);
    StubOf(worker)->async()->Take(
        &call->ctx, &call->req, &call->resp, [call, done = std::move(done)](grpc::Status s) {
          std::unique_ptr<Call<v1::TakeRequest, v1::TakeResponse>> owned(call);
          if (!s.ok()) {
            done(FromGrpc(s, "Take"));
            return;
          }
          TakeReply reply;
          reply.latency_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 SteadyClock::now() - call->sent)
                                 .count();
          reply.end_of_input = call->resp.end_of_input();
          if (call->resp.items_size() > 0) {
            const v1::WorkItem& item = call->resp.items(0);
            reply.item = Lease{item.epoch(), item.index(), item.lease_id()};
          }
          done(std::move(reply));
        });
  }

  void Complete(int worker, const Lease& lease, CompleteDone done) override {
    auto* call = new Call<v1::CompleteRequest, v1::CompleteResponse>;
    call->req.set_queue(options_.queue);
    call->req.set_worker(WorkerName(worker));
    call->req.set_lease_id(lease.lease_id);
    Arm(call->ctx, 0);
    completes_.fetch_add(1, std::memory_order_relaxed);
    StubOf(worker)->async()->Complete(
        &call->ctx, &call->req, &call->resp, [call, done = std::move(done)](grpc::Status s) {
          std::unique_ptr<Call<v1::CompleteRequest, v1::CompleteResponse>> owned(call);
          if (!s.ok()) {
            done(FromGrpc(s, "Complete"));
            return;
          }
          done(call->resp.duplicate());
        });
  }

  void ReportProgress(int worker, const Progress& progress, ProgressDone done) override {
    auto* call = new Call<v1::HeartbeatRequest, v1::HeartbeatResponse>;
    call->req.set_queue(options_.queue);
    call->req.set_worker(WorkerName(worker));
    call->req.add_lease_ids(progress.lease.lease_id);
    v1::LeaseProgress* p = call->req.add_progress();
    p->set_lease_id(progress.lease.lease_id);
    p->set_offset(progress.offset);
    call->req.set_wait_ms(options_.heartbeat_wait_ms);
    Arm(call->ctx, options_.heartbeat_wait_ms);
    heartbeats_.fetch_add(1, std::memory_order_relaxed);
    StubOf(worker)->async()->Heartbeat(
        &call->ctx, &call->req, &call->resp, [call, done = std::move(done)](grpc::Status s) {
          std::unique_ptr<Call<v1::HeartbeatRequest, v1::HeartbeatResponse>> owned(call);
          if (!s.ok()) {
            done(FromGrpc(s, "Heartbeat"));
            return;
          }
          done(static_cast<int64_t>(call->resp.lost_lease_ids_size()));
        });
  }

  std::vector<std::pair<std::string, int64_t>> CallCounts() const override {
    return {{"Take", takes_.load()},
            {"Complete", completes_.load()},
            {"Heartbeat", heartbeats_.load()}};
  }

 private:
  v1::Coordinator::Stub* StubOf(int worker) {
    return stubs_[static_cast<size_t>(worker) % stubs_.size()].get();
  }

  void Arm(grpc::ClientContext& ctx, int64_t wait_ms) const {
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(wait_ms + options_.call_timeout_ms));
  }

  const UnaryDriverOptions options_;
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  std::atomic<int64_t> takes_{0};
  std::atomic<int64_t> completes_{0};
  std::atomic<int64_t> heartbeats_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerDriver>> NewUnaryDriver(const UnaryDriverOptions& options) {
  if (options.channels < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unary driver: channels must be >= 1, got ", options.channels));
  }
  if (options.address.empty() || options.queue.empty()) {
    return absl::InvalidArgumentError("unary driver: address and queue must be set");
  }
  return std::unique_ptr<WorkerDriver>(new UnaryDriver(options));
}

}  // namespace shardq::scale
