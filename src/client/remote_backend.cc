// The remote backend: each QueueBackend verb as a request to the
// coordinator, sent as a unary call (coordinator_calls.h: waits, retries)
// or, for a worker with an open session, over that session
// (session_client.h); and ConnectRemote, which makes the channels.
#include "src/client/remote_backend.h"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/client/coordinator_address.h"
#include "src/client/coordinator_calls.h"
#include "src/client/coordinator_channels.h"
#include "src/client/session_client.h"
#include "src/log/log.h"
#include "src/rpc/convert.h"
#include "src/rpc/grpc_fork.h"

namespace shardq {
namespace {

constexpr absl::Duration kCallTimeout = CoordinatorCalls::kCallTimeout;
// A Take waits server-side at most this long before the client re-issues it
// (so a dead connection is noticed).
constexpr absl::Duration kLongPoll = absl::Seconds(10);

using Stub = CoordinatorCalls::Stub;

class RemoteBackend final : public QueueBackend {
 public:
  RemoteBackend(RemoteOptions options, std::shared_ptr<CoordinatorChannels> channels)
      : options_(std::move(options)),
        channels_(std::move(channels)),
        spec_(channels_->address().spec),
        calls_(options_, channels_) {}

  absl::StatusOr<QueueInfo> CreateQueue(const QueueConfig& config) override {
    v1::CreateQueueRequest req;
    ToProto(config, req.mutable_config());
    v1::QueueInfo resp;
    absl::Status s = calls_.Unary("CreateQueue", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.CreateQueue(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  absl::StatusOr<QueueInfo> GetQueue(absl::string_view queue) override {
    v1::GetQueueRequest req;
    req.set_queue(std::string(queue));
    v1::QueueInfo resp;
    absl::Status s = calls_.Unary("GetQueue", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.GetQueue(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  absl::StatusOr<std::vector<WorkItem>> Take(absl::string_view queue,
                                             absl::string_view worker,
                                             int64_t max_items, absl::Time deadline,
                                             int64_t ahead) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->Take(max_items, deadline, ahead);
    }
    v1::TakeRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_max_items(max_items);
    req.set_ahead(ahead);
    const absl::Duration wait =
        std::clamp(deadline - absl::Now(), absl::ZeroDuration(), kLongPoll);
    req.set_wait_ms(absl::ToInt64Milliseconds(wait));
    v1::TakeResponse resp;
    absl::Status s = calls_.Unary(
        "Take",
        [&](Stub& stub, grpc::ClientContext* ctx) { return stub.Take(ctx, req, &resp); },
        wait + kCallTimeout);
    if (!s.ok()) return s;
    if (resp.end_of_input()) {
      return absl::OutOfRangeError(absl::StrCat("queue '", queue, "': end of input"));
    }
    std::vector<WorkItem> items;
    for (const v1::WorkItem& item : resp.items()) items.push_back(FromProto(item));
    return items;
  }

  // Complete, Release, Fail and AcceptSplit go through the worker's session
  // unless a take of its own waits there for an item: their answers would
  // queue behind that take's (SessionClient::TakeWaiting), so they take the
  // unary RPC, whose effect is the same.
  absl::StatusOr<CompleteOutcome> Complete(absl::string_view queue,
                                           absl::string_view worker,
                                           uint64_t lease_id, int64_t records) override {
    std::shared_ptr<SessionClient> session = SessionOf(queue, worker);
    if (session != nullptr && !session->TakeWaiting()) return session->Complete(lease_id, records);
    v1::CompleteRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_lease_id(lease_id);
    req.set_records(records);
    v1::CompleteResponse resp;
    absl::Status s = calls_.Unary("Complete", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Complete(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    if (session != nullptr) session->ForgetLease(lease_id);
    return resp.duplicate() ? CompleteOutcome::kDuplicate : CompleteOutcome::kCompleted;
  }

  absl::Status Release(absl::string_view queue, absl::string_view worker,
                       uint64_t lease_id) override {
    std::shared_ptr<SessionClient> session = SessionOf(queue, worker);
    if (session != nullptr && !session->TakeWaiting()) return session->Release(lease_id);
    v1::ReleaseRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_lease_id(lease_id);
    v1::ReleaseResponse resp;
    absl::Status s = calls_.Unary("Release", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Release(ctx, req, &resp);
    });
    if (s.ok() && session != nullptr) session->ForgetLease(lease_id);
    return s;
  }

  absl::StatusOr<bool> Fail(absl::string_view queue, absl::string_view worker,
                            uint64_t lease_id, absl::string_view reason) override {
    std::shared_ptr<SessionClient> session = SessionOf(queue, worker);
    if (session != nullptr && !session->TakeWaiting()) return session->Fail(lease_id, reason);
    v1::ReleaseRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_lease_id(lease_id);
    req.set_failed(true);
    req.set_reason(std::string(reason));
    v1::ReleaseResponse resp;
    absl::Status s = calls_.Unary("Release", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Release(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    if (session != nullptr) session->ForgetLease(lease_id);
    return resp.item_failed();
  }

  absl::StatusOr<HeartbeatReply> Heartbeat(
      absl::string_view queue, absl::string_view worker,
      const std::vector<uint64_t>& lease_ids,
      const std::vector<std::pair<uint64_t, int64_t>>& progress,
      absl::Duration wait) override {
    v1::HeartbeatRequest req;
    wait = std::clamp(wait, absl::ZeroDuration(), kLongPoll);
    req.set_wait_ms(absl::ToInt64Milliseconds(wait));
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.mutable_lease_ids()->Add(lease_ids.begin(), lease_ids.end());
    for (const auto& [lease, offset] : progress) {
      v1::LeaseProgress* p = req.add_progress();
      p->set_lease_id(lease);
      p->set_offset(offset);
    }
    v1::HeartbeatResponse resp;
    absl::Status s = calls_.Unary(
        "Heartbeat",
        [&](Stub& stub, grpc::ClientContext* ctx) { return stub.Heartbeat(ctx, req, &resp); },
        wait + kCallTimeout);
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  absl::StatusOr<bool> AcceptSplit(absl::string_view queue, absl::string_view worker,
                                   uint64_t lease_id, int64_t split_point) override {
    std::shared_ptr<SessionClient> session = SessionOf(queue, worker);
    if (session != nullptr && !session->TakeWaiting()) {
      return session->AcceptSplit(lease_id, split_point);
    }
    v1::AcceptSplitRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    req.set_lease_id(lease_id);
    req.set_split_point(split_point);
    v1::AcceptSplitResponse resp;
    absl::Status s = calls_.Unary("AcceptSplit", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.AcceptSplit(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return resp.accepted();
  }

  absl::StatusOr<QueueStats> Stats(absl::string_view queue) override {
    v1::StatusRequest req;
    req.set_queue(std::string(queue));
    v1::StatusResponse resp;
    absl::Status s = calls_.Unary("Status", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Status(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    NoteLeadership(resp);
    if (resp.queues_size() != 1) {
      return absl::InternalError(absl::StrCat("status of queue '", queue, "' returned ",
                                              resp.queues_size(), " queues"));
    }
    return FromProto(resp.queues(0));
  }

  absl::StatusOr<bool> PassOver(absl::string_view queue, absl::string_view worker,
                                absl::string_view siblings) override {
    if (!no_pass_over_.load()) {
      v1::PassOverRequest req;
      req.set_queue(std::string(queue));
      req.set_worker(std::string(worker));
      req.set_siblings(std::string(siblings));
      v1::PassOverResponse resp;
      absl::Status s = calls_.Unary("PassOver", [&](Stub& stub, grpc::ClientContext* ctx) {
        return stub.PassOver(ctx, req, &resp);
      });
      if (s.ok()) return resp.over();
      if (!absl::IsUnimplemented(s)) return s;
      no_pass_over_.store(true);  // an older coordinator: ask its stats from now on
    }
    return QueueBackend::PassOver(queue, worker, siblings);
  }

  absl::Status ReportProgress(
      absl::string_view queue, absl::string_view worker,
      const std::vector<std::pair<uint64_t, int64_t>>& progress) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->ReportProgress(progress);
    }
    v1::ReportProgressRequest req;
    req.set_queue(std::string(queue));
    req.set_worker(std::string(worker));
    for (const auto& [lease, offset] : progress) {
      v1::LeaseProgress* p = req.add_progress();
      p->set_lease_id(lease);
      p->set_offset(offset);
    }
    v1::ReportProgressResponse resp;
    return calls_.Unary("ReportProgress", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.ReportProgress(ctx, req, &resp);
    });
  }

  // Retried like every call: a report carries the participant's whole
  // state, so repeating one changes nothing.
  absl::StatusOr<StepTally> AgreeSteps(absl::string_view queue,
                                       const StepReport& report) override {
    v1::AgreeStepsRequest req;
    ToProto(report, &req);
    req.set_queue(std::string(queue));
    v1::AgreeStepsResponse resp;
    absl::Status s = calls_.Unary("AgreeSteps", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.AgreeSteps(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  absl::StatusOr<journal::Checkpoint> ExportCheckpoint(absl::string_view queue) override {
    v1::ExportCheckpointRequest req;
    req.set_queue(std::string(queue));
    v1::ExportCheckpointResponse resp;
    absl::Status s = calls_.Unary("ExportCheckpoint", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.ExportCheckpoint(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    journal::Checkpoint checkpoint;
    if (!checkpoint.ParseFromString(resp.checkpoint())) {
      return absl::DataLossError("the coordinator sent an unreadable checkpoint");
    }
    return checkpoint;
  }

  absl::StatusOr<QueueInfo> RestoreCheckpoint(const journal::Checkpoint& checkpoint,
                                              const std::string& name) override {
    v1::RestoreCheckpointRequest req;
    checkpoint.SerializeToString(req.mutable_checkpoint());
    req.set_name(name);
    v1::QueueInfo resp;
    absl::Status s = calls_.Unary("RestoreCheckpoint", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.RestoreCheckpoint(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    return FromProto(resp);
  }

  CompleteAndTakeReply CompleteAndTake(absl::string_view queue, absl::string_view worker,
                                       uint64_t lease_id, int64_t records, int64_t max_items,
                                       absl::Time deadline, int64_t ahead) override {
    if (std::shared_ptr<SessionClient> session = SessionOf(queue, worker)) {
      return session->CompleteAndTake(lease_id, records, max_items, deadline, ahead);
    }
    return QueueBackend::CompleteAndTake(queue, worker, lease_id, records, max_items,
                                         deadline, ahead);
  }

  absl::StatusOr<bool> BeginSession(absl::string_view queue, absl::string_view worker,
                                    SessionListener* listener) override {
    if (!options_.use_sessions || no_sessions_.load() || !calls_.in_owner_process()) {
      return false;
    }
    if (!calls_.contacted()) {
      // The first contact waits for the coordinator as every unary call
      // does (notes on stderr, the connect timeout, Ctrl-C).
      if (absl::Status s = GetQueue(queue).status(); !s.ok()) return s;
    }
    SessionOptions session_options;
    session_options.queue = std::string(queue);
    session_options.worker = std::string(worker);
    session_options.token = options_.token;
    session_options.address = spec_;
    session_options.open_timeout = options_.connect_timeout;
    session_options.retry = options_.retry;
    absl::StatusOr<std::unique_ptr<SessionClient>> session =
        SessionClient::Open(channels_, std::move(session_options), listener);
    if (absl::IsUnimplemented(session.status())) {
      no_sessions_.store(true);
      // Once per process: every worker of it would say the same.
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        SHARDQ_LOG_WARN(
            "the coordinator at {} has no worker sessions (an older shardq serve?); using "
            "unary calls and heartbeats",
            spec_);
      }
      return false;
    }
    if (!session.ok()) return session.status();
    calls_.MarkContacted();
    if (calls_.shutting_down()) (*session)->BeginShutdown();
    absl::MutexLock lock(&sessions_mu_);
    sessions_[SessionKey(queue, worker)] = std::shared_ptr<SessionClient>(*std::move(session));
    session_count_.store(static_cast<int64_t>(sessions_.size()));
    return true;
  }

  void EndSession(absl::string_view queue, absl::string_view worker) override {
    std::shared_ptr<SessionClient> session;
    {
      absl::MutexLock lock(&sessions_mu_);
      auto it = sessions_.find(SessionKey(queue, worker));
      if (it == sessions_.end()) return;
      session = std::move(it->second);
      sessions_.erase(it);
      session_count_.store(static_cast<int64_t>(sessions_.size()));
    }
    // Closed here (or by the last call still using it), outside the lock.
  }

  bool Remote() const override { return true; }

  void BeginShutdown() override {
    calls_.BeginShutdown();
    absl::MutexLock lock(&sessions_mu_);
    for (auto& [key, session] : sessions_) session->BeginShutdown();
  }

  absl::StatusOr<std::vector<QueueStats>> AllStats() override {
    v1::StatusRequest req;
    v1::StatusResponse resp;
    absl::Status s = calls_.Unary("Status", [&](Stub& stub, grpc::ClientContext* ctx) {
      return stub.Status(ctx, req, &resp);
    });
    if (!s.ok()) return s;
    NoteLeadership(resp);
    std::vector<QueueStats> out;
    for (const v1::QueueStatus& q : resp.queues()) out.push_back(FromProto(q));
    return out;
  }

  std::optional<Leadership> LastLeadership() const override {
    absl::MutexLock lock(&leadership_mu_);
    return leadership_;
  }

  std::string LastStatusPage() const override {
    absl::MutexLock lock(&leadership_mu_);
    return status_page_;
  }

 private:
  void NoteLeadership(const v1::StatusResponse& resp) {
    absl::MutexLock lock(&leadership_mu_);
    status_page_ = resp.status_page();
    if (resp.has_leadership()) leadership_ = FromProto(resp.leadership());
  }

  static std::string SessionKey(absl::string_view queue, absl::string_view worker) {
    return absl::StrCat(queue.size(), ":", queue, worker);
  }

  // The open session of (queue, worker), or null: use the unary calls.
  // (None in a fork child: the unary path refuses the call there.)
  std::shared_ptr<SessionClient> SessionOf(absl::string_view queue, absl::string_view worker) {
    if (session_count_.load(std::memory_order_relaxed) == 0 || !calls_.in_owner_process()) {
      return nullptr;
    }
    absl::MutexLock lock(&sessions_mu_);
    auto it = sessions_.find(SessionKey(queue, worker));
    return it == sessions_.end() ? nullptr : it->second;
  }

  const RemoteOptions options_;
  const std::shared_ptr<CoordinatorChannels> channels_;
  const std::string spec_;  // the address as given, for messages
  // The unary calls; also whether the coordinator answered once, whether
  // the backend is closing and whether this is a fork child that inherited
  // it (which refuses every call: the channels run on its parent's gRPC
  // threads, src/rpc/grpc_fork.h).
  CoordinatorCalls calls_;
  // Set when the coordinator answered a session with UNIMPLEMENTED.
  std::atomic<bool> no_sessions_{false};
  std::atomic<bool> no_pass_over_{false};  // the coordinator has no PassOver RPC
  absl::Mutex sessions_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<SessionClient>> sessions_
      ABSL_GUARDED_BY(sessions_mu_);
  std::atomic<int64_t> session_count_{0};
  mutable absl::Mutex leadership_mu_;
  std::optional<Leadership> leadership_ ABSL_GUARDED_BY(leadership_mu_);
  std::string status_page_ ABSL_GUARDED_BY(leadership_mu_);
};

}  // namespace

absl::StatusOr<std::shared_ptr<QueueBackend>> ConnectRemote(const RemoteOptions& options) {
  absl::StatusOr<CoordinatorAddress> address = ParseCoordinatorAddress(options.address);
  if (!address.ok()) return address.status();
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "connect timeout must be > 0, got ", absl::FormatDuration(options.connect_timeout)));
  }
  // None is made in a fork child that cannot use gRPC (src/rpc/grpc_fork.h),
  // and this comes first: making the credentials initializes gRPC, which
  // can hang in such a child on a lock a parent thread held at the fork.
  if (absl::Status usable = CheckGrpcUsable(); !usable.ok()) return usable;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (!options.tls_ca_file.empty()) {
    std::ifstream in(options.tls_ca_file, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read TLS CA file '", options.tls_ca_file, "'"));
    }
    std::ostringstream pem;
    pem << in.rdbuf();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = pem.str();
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  absl::StatusOr<std::unique_ptr<LeaderResolver>> resolver =
      LeaderResolver::Create(*std::move(address));
  if (!resolver.ok()) return resolver.status();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  // Reconnect quickly after a coordinator restart.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  // Each channel counts as live gRPC state while it lives.
  auto channels = std::make_shared<CoordinatorChannels>(
      *std::move(resolver), [credentials, args](const std::string& target) {
        return CreateForkAwareChannel(target, credentials, args);
      });
  return std::shared_ptr<QueueBackend>(
      std::make_shared<RemoteBackend>(options, std::move(channels)));
}

}  // namespace shardq
