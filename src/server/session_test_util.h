// Test-only helpers of the Session stream tests (session_service_test.cc,
// session_service_recovery_test.cc): a real CoordinatorServer on
// 127.0.0.1, its queues, and a raw gRPC session stream.
#ifndef SHARDQ_SRC_SERVER_SESSION_TEST_UTIL_H_
#define SHARDQ_SRC_SERVER_SESSION_TEST_UTIL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/rpc/protocol_version.h"
#include "src/server/grpc_service.h"

namespace shardq::session_test {

constexpr absl::Duration kTimeout = absl::Seconds(30);

struct Server {
  std::unique_ptr<CoordinatorServer> server;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  CoordinatorImpl* coordinator() { return server->coordinator(); }
};

inline Server StartServer(Clock* clock, const std::string& state_dir = "",
                          const std::string& token = "",
                          int64_t max_sessions = ServerOptions().max_sessions) {
  ServerOptions options;
  options.max_sessions = max_sessions;
  options.listen = "127.0.0.1:0";
  options.clock = clock;
  options.state_dir = state_dir;
  options.token = token;
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  Server s;
  s.server = *std::move(server);
  s.stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", s.server->port()), grpc::InsecureChannelCredentials()));
  return s;
}

// Items "f<i>.txt?start=0&end=1000", in plan order.
inline void CreateQueue(Server& s, const std::string& name, int items, int num_clients = 1,
                 bool split = true) {
  v1::CreateQueueRequest req;
  v1::QueueConfig* c = req.mutable_config();
  c->set_name(name);
  for (int i = 0; i < items; ++i) c->add_items(absl::StrCat("f", i, ".txt?start=0&end=1000"));
  c->set_num_epochs(1);
  c->set_shuffle(false);
  c->set_seed(1);
  c->set_seed_set(true);
  c->set_num_clients(num_clients);
  c->set_lease_timeout_ms(absl::ToInt64Milliseconds(kTimeout));
  c->set_split_disabled(!split);
  c->set_split_min_residual(10);
  grpc::ClientContext ctx;
  v1::QueueInfo info;
  grpc::Status status = s.stub->CreateQueue(&ctx, req, &info);
  ASSERT_TRUE(status.ok()) << status.error_message();
}

// A raw session stream; every read is bounded by the call's deadline so
// that a bug fails the test instead of hanging it.
class RawSession {
 public:
  explicit RawSession(Server& s, const std::string& token = "") {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!token.empty()) ctx_.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    stream_ = s.stub->Session(&ctx_);
  }

  v1::SessionResponse Open(const std::string& queue, const std::string& worker,
                           std::vector<uint64_t> lease_ids = {}, int major = kProtocolMajor,
                           int minor = kProtocolMinor) {
    v1::SessionRequest req;
    req.set_request_id(1);
    v1::SessionOpen* open = req.mutable_open();
    open->set_queue(queue);
    open->set_worker(worker);
    open->mutable_version()->set_major(major);
    open->mutable_version()->set_minor(minor);
    for (uint64_t id : lease_ids) open->add_lease_ids(id);
    // A server that refuses the stream up front (no token) may have ended
    // it before this write; the status says why.
    if (!stream_->Write(req)) {
      ended_ = true;
      return v1::SessionResponse();
    }
    return Read();
  }

  bool Write(const v1::SessionRequest& req) { return stream_->Write(req); }

  // The next message (a default one when the stream ended).
  v1::SessionResponse Read() {
    v1::SessionResponse resp;
    ended_ = !stream_->Read(&resp);
    return resp;
  }

  // The answer to request `id`, skipping pushed messages (request_id 0).
  v1::SessionResponse ReadAnswer(uint64_t id) {
    while (true) {
      v1::SessionResponse resp = Read();
      if (ended_) {
        ADD_FAILURE() << "the stream ended before answering request " << id;
        return resp;
      }
      if (resp.request_id() == 0) {
        pushed_.push_back(resp);
        continue;
      }
      EXPECT_EQ(resp.request_id(), id);
      return resp;
    }
  }

  v1::SessionResponse Take(uint64_t id, int64_t wait_ms = 0,
                           std::vector<uint64_t> complete = {}) {
    v1::SessionRequest req;
    req.set_request_id(id);
    for (uint64_t lease : complete) req.add_complete_lease_ids(lease);
    req.set_take(1);
    req.set_take_wait_ms(wait_ms);
    EXPECT_TRUE(Write(req));
    return ReadAnswer(id);
  }

  grpc::Status Finish() {
    stream_->WritesDone();
    v1::SessionResponse ignored;
    while (stream_->Read(&ignored)) {
    }
    return stream_->Finish();
  }
  // Breaks the stream the way a dying network does.
  void Break() {
    ctx_.TryCancel();
    stream_->Finish().IgnoreError();
  }

  bool ended() const { return ended_; }
  std::vector<v1::SessionResponse>& pushed() { return pushed_; }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> stream_;
  bool ended_ = false;
  std::vector<v1::SessionResponse> pushed_;
};

// A unary take with no wait.
inline v1::TakeResponse UnaryTake(Server& s, const std::string& queue, const std::string& worker) {
  v1::TakeRequest req;
  req.set_queue(queue);
  req.set_worker(worker);
  req.set_max_items(1);
  grpc::ClientContext ctx;
  v1::TakeResponse resp;
  grpc::Status status = s.stub->Take(&ctx, req, &resp);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return resp;
}

inline QueueStats Stats(Server& s, const std::string& queue) {
  absl::StatusOr<QueueStats> stats = s.coordinator()->Stats(queue);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return *stats;
}

// Waits for a condition that an event on another thread makes true.
template <typename Condition>
void AwaitCondition(Condition condition) {
  for (int i = 0; i < 60'000 && !condition(); ++i) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_TRUE(condition());
}

}  // namespace shardq::session_test

#endif  // SHARDQ_SRC_SERVER_SESSION_TEST_UTIL_H_
