// Session streams spread over several completion queues
// (src/server/session_queues.h), against a real CoordinatorServer on
// 127.0.0.1: streams from several connections land on more than one queue,
// every stream and every unary call works whichever queue serves it, and
// shutdown ends the open streams. Nothing here is timed: waits are for
// messages, and every stream has a deadline so that a bug fails the test
// instead of hanging it.
#include "src/server/session_queues.h"

#include <chrono>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/rpc/protocol_version.h"
#include "src/server/grpc_service.h"

namespace shardq {
namespace {

std::unique_ptr<CoordinatorServer> StartServer(int session_queues, const std::string& token = "") {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.session_queues = session_queues;
  options.token = token;
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

// A channel with a connection of its own (no subchannel shared with the
// others), connected before it is returned, so that connections are made
// one after another.
std::unique_ptr<v1::Coordinator::Stub> ConnectedStub(const CoordinatorServer& server, int i) {
  grpc::ChannelArguments args;
  args.SetInt("shardq.test.channel", i);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials(), args);
  EXPECT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(30)));
  return v1::Coordinator::NewStub(channel);
}

void CreateQueue(v1::Coordinator::Stub& stub, const std::string& name, int items,
                 const std::string& token = "") {
  v1::CreateQueueRequest req;
  v1::QueueConfig* c = req.mutable_config();
  c->set_name(name);
  for (int i = 0; i < items; ++i) c->add_items(absl::StrCat("item-", i));
  c->set_num_epochs(1);
  c->set_shuffle(false);
  c->set_seed(1);
  c->set_seed_set(true);
  c->set_num_clients(1);
  c->set_lease_timeout_ms(60'000);
  c->set_split_disabled(true);
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", absl::StrCat("Bearer ", token));
  v1::QueueInfo info;
  grpc::Status status = stub.CreateQueue(&ctx, req, &info);
  ASSERT_TRUE(status.ok()) << status.error_message();
}

// One session stream, read and written in lock step.
class Stream {
 public:
  Stream(v1::Coordinator::Stub& stub, const std::string& token = "") {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    if (!token.empty()) ctx_.AddMetadata("authorization", absl::StrCat("Bearer ", token));
    stream_ = stub.Session(&ctx_);
  }

  // Opens the session; false when the stream ended instead.
  bool Open(const std::string& queue, const std::string& worker) {
    v1::SessionRequest req;
    req.set_request_id(1);
    req.mutable_open()->set_queue(queue);
    req.mutable_open()->set_worker(worker);
    req.mutable_open()->mutable_version()->set_major(kProtocolMajor);
    req.mutable_open()->mutable_version()->set_minor(kProtocolMinor);
    v1::SessionResponse resp;
    return stream_->Write(req) && stream_->Read(&resp) && resp.has_opened();
  }

  // Completes `complete` (0: none) and takes one item, waiting up to
  // `wait_ms`; the answer (a default one when the stream ended).
  v1::SessionResponse CompleteAndTake(uint64_t id, uint64_t complete, int64_t wait_ms = 0) {
    v1::SessionRequest req;
    req.set_request_id(id);
    if (complete != 0) req.add_complete_lease_ids(complete);
    req.set_take(1);
    req.set_take_wait_ms(wait_ms);
    v1::SessionResponse resp;
    if (!stream_->Write(req)) return resp;
    while (stream_->Read(&resp) && resp.request_id() == 0) {  // skip pushed proposals
    }
    return resp;
  }

  // Sends a take without reading its answer.
  void SendTake(uint64_t id, int64_t wait_ms) {
    v1::SessionRequest req;
    req.set_request_id(id);
    req.set_take(1);
    req.set_take_wait_ms(wait_ms);
    EXPECT_TRUE(stream_->Write(req));
  }

  // Half-closes (when `half_close`), reads what is left and returns the
  // stream's status.
  grpc::Status End(bool half_close = true) {
    if (half_close) stream_->WritesDone();
    v1::SessionResponse ignored;
    while (stream_->Read(&ignored)) {
    }
    return stream_->Finish();
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>> stream_;
};

TEST(SessionQueues, StreamsOfSeveralConnectionsAreServedOnMoreThanOneQueueAndAllCallsWork) {
  constexpr int kQueues = 4;
  constexpr int kChannels = 4 * kQueues;
  std::unique_ptr<CoordinatorServer> server = StartServer(kQueues);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) stubs.push_back(ConnectedStub(*server, i));
  CreateQueue(*stubs[0], "q", 4 * kChannels);

  // On every connection: a session that takes, completes and takes again,
  // then the unary calls a worker and a tool make.
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < kChannels; ++i) {
    const std::string worker = absl::StrCat("w", i);
    streams.push_back(std::make_unique<Stream>(*stubs[i]));
    Stream& stream = *streams.back();
    ASSERT_TRUE(stream.Open("q", worker)) << "channel " << i;
    v1::SessionResponse first = stream.CompleteAndTake(2, 0);
    ASSERT_EQ(first.items_size(), 1) << "channel " << i;
    v1::SessionResponse second = stream.CompleteAndTake(3, first.items(0).lease_id());
    ASSERT_EQ(second.complete_results_size(), 1) << "channel " << i;
    EXPECT_FALSE(second.complete_results(0).has_status()) << "channel " << i;
    ASSERT_EQ(second.items_size(), 1) << "channel " << i;

    const std::string unary_worker = absl::StrCat("u", i);
    v1::TakeRequest take;
    take.set_queue("q");
    take.set_worker(unary_worker);
    take.set_max_items(1);
    v1::TakeResponse taken;
    grpc::ClientContext take_ctx;
    ASSERT_TRUE(stubs[i]->Take(&take_ctx, take, &taken).ok()) << "channel " << i;
    ASSERT_EQ(taken.items_size(), 1) << "channel " << i;
    v1::HeartbeatRequest beat;
    beat.set_queue("q");
    beat.set_worker(unary_worker);
    beat.add_lease_ids(taken.items(0).lease_id());
    v1::HeartbeatResponse beat_resp;
    grpc::ClientContext beat_ctx;
    EXPECT_TRUE(stubs[i]->Heartbeat(&beat_ctx, beat, &beat_resp).ok()) << "channel " << i;
    v1::CompleteRequest complete;
    complete.set_queue("q");
    complete.set_worker(unary_worker);
    complete.set_lease_id(taken.items(0).lease_id());
    v1::CompleteResponse completed;
    grpc::ClientContext complete_ctx;
    EXPECT_TRUE(stubs[i]->Complete(&complete_ctx, complete, &completed).ok()) << "channel " << i;
    v1::StatusRequest status_req;
    status_req.set_queue("q");
    v1::StatusResponse status_resp;
    grpc::ClientContext status_ctx;
    ASSERT_TRUE(stubs[i]->Status(&status_ctx, status_req, &status_resp).ok()) << "channel " << i;
    EXPECT_EQ(status_resp.queues_size(), 1);
  }
  for (int i = 0; i < kChannels; ++i) {
    EXPECT_TRUE(streams[i]->End().ok()) << "channel " << i;
  }

  const std::vector<int64_t> per_queue = server->sessions_per_queue();
  ASSERT_EQ(per_queue.size(), static_cast<size_t>(kQueues));
  EXPECT_EQ(std::accumulate(per_queue.begin(), per_queue.end(), int64_t{0}), kChannels);
  int serving = 0;
  for (int64_t n : per_queue) serving += n > 0 ? 1 : 0;
  EXPECT_GE(serving, 2) << "every stream landed on one queue";
  absl::StatusOr<QueueStats> stats = server->coordinator()->Stats("q");
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->completed, 2 * kChannels);  // one per session, one per unary worker
}

TEST(SessionQueues, ATokenIsCheckedOnEveryQueue) {
  constexpr int kQueues = 3;
  std::unique_ptr<CoordinatorServer> server = StartServer(kQueues, "secret");
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (int i = 0; i < 4 * kQueues; ++i) stubs.push_back(ConnectedStub(*server, i));
  CreateQueue(*stubs[0], "q", 100, "secret");
  for (int i = 0; i < 4 * kQueues; ++i) {
    Stream refused(*stubs[i]);
    refused.Open("q", "w");
    EXPECT_EQ(refused.End().error_code(), grpc::StatusCode::UNAUTHENTICATED) << "channel " << i;
    Stream accepted(*stubs[i], "secret");
    EXPECT_TRUE(accepted.Open("q", absl::StrCat("w", i))) << "channel " << i;
    EXPECT_TRUE(accepted.End().ok()) << "channel " << i;
  }
  int serving = 0;
  for (int64_t n : server->sessions_per_queue()) serving += n > 0 ? 1 : 0;
  EXPECT_GE(serving, 2);
}

TEST(SessionQueues, ShutdownEndsOpenAndWaitingStreamsOnEveryQueue) {
  constexpr int kQueues = 4;
  std::unique_ptr<CoordinatorServer> server = StartServer(kQueues);
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs;
  for (int i = 0; i < 4 * kQueues; ++i) stubs.push_back(ConnectedStub(*server, i));
  CreateQueue(*stubs[0], "one", 1);
  // The first stream holds the only item; the others wait for one (the
  // queue has not ended: the holder could still release it).
  std::vector<std::unique_ptr<Stream>> streams;
  for (int i = 0; i < 4 * kQueues; ++i) {
    streams.push_back(std::make_unique<Stream>(*stubs[i]));
    ASSERT_TRUE(streams.back()->Open("one", absl::StrCat("w", i)));
    if (i == 0) {
      ASSERT_EQ(streams.back()->CompleteAndTake(2, 0).items_size(), 1);
    } else {
      streams.back()->SendTake(2, 50'000);
    }
  }
  server->Shutdown(absl::Seconds(5));
  for (int i = 0; i < 4 * kQueues; ++i) {
    EXPECT_EQ(streams[i]->End(false).error_code(), grpc::StatusCode::UNAVAILABLE)
        << "channel " << i;
  }
  server.reset();  // returns: every stream, queue and thread is gone
}

TEST(SessionQueues, ACountOutsideOneToSixtyFourIsRefused) {
  for (int count : {0, -1, 65}) {
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.session_queues = count;
    absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(server.status().message().find(absl::StrCat("session_queues (", count, ")")),
              absl::string_view::npos)
        << server.status();
  }
}

}  // namespace
}  // namespace shardq
