// The client side of worker sessions against a scripted fake coordinator
// (so that broken streams and pushed messages happen exactly when a test
// says), and take-ahead over it.
#include "src/client/session_client.h"

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "shardq/work_queue.h"
#include "src/client/coordinator_address.h"
#include "src/client/coordinator_channels.h"
#include "src/client/remote_backend.h"
#include "src/client/standby_testing.h"
#include "src/client/work_queue_backend.h"
#include "src/rpc/protocol_version.h"

namespace shardq {
namespace {

using v1::SessionRequest;
using v1::SessionResponse;
using ServerStream = grpc::ServerReaderWriter<SessionResponse, SessionRequest>;

// A coordinator of one queue whose items are "item-N?start=0&end=100",
// granted in order with lease id N. Sessions answer every request at once
// (completions, releases, splits accepted), unless a test scripts otherwise.
class FakeCoordinator final : public v1::Coordinator::Service {
 public:
  // Script knobs, set before the calls they affect.
  std::atomic<bool> sessions_unimplemented{false};
  std::atomic<int> protocol_major{kProtocolMajor};
  // The stream ends (UNAVAILABLE) on receiving this request (1-based count
  // over all streams), without answering it.
  std::atomic<int> break_on_request{0};
  // Answer requests in pairs, second first (request_id matching).
  std::atomic<bool> answer_pairs_reversed{false};
  std::atomic<bool> accept_splits{true};
  // As the real coordinator with a take waiting for an item: the answer of
  // a session take with a wait, and every answer after it, wait until
  // AnswerWithheld().
  std::atomic<bool> hold_waiting_takes{false};
  std::vector<uint64_t> lost_on_open;  // set before the open it affects

  grpc::Status GetQueue(grpc::ServerContext*, const v1::GetQueueRequest* req,
                        v1::QueueInfo* resp) override {
    FillInfo(req->queue(), resp);
    return grpc::Status::OK;
  }
  grpc::Status CreateQueue(grpc::ServerContext*, const v1::CreateQueueRequest* req,
                           v1::QueueInfo* resp) override {
    FillInfo(req->config().name(), resp);
    return grpc::Status::OK;
  }
  grpc::Status Take(grpc::ServerContext*, const v1::TakeRequest* req,
                    v1::TakeResponse* resp) override {
    ++unary_takes;
    Grant(req->max_items(), resp->mutable_items());
    return grpc::Status::OK;
  }
  grpc::Status Complete(grpc::ServerContext*, const v1::CompleteRequest*,
                        v1::CompleteResponse*) override {
    ++unary_completes;
    return grpc::Status::OK;
  }
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest*,
                       v1::ReleaseResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest*,
                         v1::HeartbeatResponse*) override {
    return grpc::Status::OK;
  }

  grpc::Status Session(grpc::ServerContext* ctx, ServerStream* stream) override {
    if (sessions_unimplemented.load()) return grpc::Status(grpc::UNIMPLEMENTED, "no sessions");
    SessionRequest open;
    if (!stream->Read(&open)) return grpc::Status::OK;
    SessionResponse opened;
    opened.mutable_opened()->mutable_version()->set_major(protocol_major.load());
    FillInfo(open.open().queue(), opened.mutable_opened()->mutable_queue());
    {
      absl::MutexLock lock(&mu_);
      opens_.push_back(open.open());
      for (uint64_t id : lost_on_open) opened.mutable_opened()->add_lost_lease_ids(id);
      lost_on_open.clear();
      stream_ = stream;
      if (!stream->Write(opened)) return grpc::Status::OK;
    }
    std::deque<SessionResponse> held_back;
    SessionRequest req;
    while (stream->Read(&req)) {
      {
        absl::MutexLock lock(&mu_);
        requests_.push_back(req);
        if (static_cast<int>(requests_.size()) == break_on_request.load()) {
          stream_ = nullptr;
          return grpc::Status(grpc::UNAVAILABLE, "scripted break");
        }
      }
      SessionResponse answer = Answer(req);
      {
        absl::MutexLock lock(&mu_);
        withholding_ = withholding_ ||
                       (hold_waiting_takes.load() && req.take() > 0 && req.take_wait_ms() > 0);
        if (withholding_) {
          withheld_.push_back(std::move(answer));
          continue;
        }
      }
      held_back.push_back(std::move(answer));
      if (answer_pairs_reversed.load() && held_back.size() < 2) continue;
      absl::MutexLock lock(&mu_);
      while (!held_back.empty()) {
        stream->Write(held_back.back());
        held_back.pop_back();
      }
    }
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
    return grpc::Status::OK;
  }

  // Pushes `response` (request_id 0) on the open stream; false when none.
  bool Push(const SessionResponse& response) {
    absl::MutexLock lock(&mu_);
    return stream_ != nullptr && stream_->Write(response);
  }
  // Writes the answers withheld (hold_waiting_takes), in request order.
  void AnswerWithheld() {
    absl::MutexLock lock(&mu_);
    withholding_ = false;
    for (const SessionResponse& r : withheld_) {
      if (stream_ != nullptr) stream_->Write(r);
    }
    withheld_.clear();
  }
  std::vector<v1::SessionOpen> opens() {
    absl::MutexLock lock(&mu_);
    return opens_;
  }
  std::vector<SessionRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

  std::atomic<int> unary_takes{0};
  std::atomic<int> unary_completes{0};

 private:
  void FillInfo(const std::string& name, v1::QueueInfo* info) {
    info->set_name(name);
    info->set_num_items(1000);
    info->set_num_epochs(1);
    info->set_num_clients(4);
    info->set_lease_timeout_ms(30000);
  }
  void Grant(int64_t n, google::protobuf::RepeatedPtrField<v1::WorkItem>* items) {
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t id = next_lease_.fetch_add(1);
      v1::WorkItem* item = items->Add();
      item->set_item(absl::StrCat("item-", id, "?start=0&end=100"));
      item->set_index(static_cast<int64_t>(id));
      item->set_lease_id(id);
    }
  }
  SessionResponse Answer(const SessionRequest& req) {
    SessionResponse r;
    r.set_request_id(req.request_id());
    for (const v1::SplitAnswer& a : req.split_answers()) {
      v1::SplitResult* s = r.add_split_results();
      s->set_lease_id(a.lease_id());
      s->set_accepted(accept_splits.load() && a.split_point() >= 0);
    }
    for (uint64_t id : req.complete_lease_ids()) r.add_complete_results()->set_lease_id(id);
    for (const v1::SessionRelease& rel : req.releases()) {
      r.add_release_results()->set_lease_id(rel.lease_id());
    }
    if (req.take() > 0) Grant(req.take(), r.mutable_items());
    return r;
  }

  std::atomic<uint64_t> next_lease_{1};
  absl::Mutex mu_;
  ServerStream* stream_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::vector<v1::SessionOpen> opens_ ABSL_GUARDED_BY(mu_);
  std::vector<SessionRequest> requests_ ABSL_GUARDED_BY(mu_);
  bool withholding_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<SessionResponse> withheld_ ABSL_GUARDED_BY(mu_);
};

struct FakeServer {
  FakeServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~FakeServer() { server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1))); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port); }

  FakeCoordinator service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

// Records what the session pushes.
class RecordingListener final : public SessionListener {
 public:
  void OnSplitProposals(const std::vector<SplitProposal>& proposals) override {
    absl::MutexLock lock(&mu_);
    for (const SplitProposal& p : proposals) splits_.push_back(p);
  }
  void OnLostLeases(const std::vector<uint64_t>& lease_ids) override {
    absl::MutexLock lock(&mu_);
    lost_.insert(lost_.end(), lease_ids.begin(), lease_ids.end());
  }
  // Waits (generously) for the first proposal.
  std::vector<SplitProposal> AwaitSplits() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](std::vector<SplitProposal>* s) { return !s->empty(); },
                             &splits_),
                         absl::Seconds(30));
    return splits_;
  }
  std::vector<uint64_t> lost() {
    absl::MutexLock lock(&mu_);
    return lost_;
  }

 private:
  absl::Mutex mu_;
  std::vector<SplitProposal> splits_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> lost_ ABSL_GUARDED_BY(mu_);
};

std::shared_ptr<grpc::Channel> ChannelTo(const FakeServer& server) {
  return grpc::CreateChannel(server.address(), grpc::InsecureChannelCredentials());
}

SessionOptions Options(const FakeServer& server) {
  SessionOptions o;
  o.queue = "q";
  o.worker = "w";
  o.address = server.address();
  o.open_timeout = absl::Seconds(30);
  o.retry.total_budget = absl::Seconds(30);
  return o;
}

TEST(SessionClient, OpenSendsQueueWorkerAndProtocolVersion) {
  FakeServer server;
  auto session = SessionClient::Open(ChannelTo(server), Options(server), nullptr);
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_EQ(server.service.opens().size(), 1u);
  const v1::SessionOpen open = server.service.opens()[0];
  EXPECT_EQ(open.queue(), "q");
  EXPECT_EQ(open.worker(), "w");
  EXPECT_EQ(open.version().major(), kProtocolMajor);
  EXPECT_EQ(open.version().minor(), kProtocolMinor);
  EXPECT_EQ(open.lease_ids_size(), 0);
  EXPECT_EQ((*session)->queue_info().num_clients, 4);
}

TEST(SessionClient, AnswersReachTheirCallersByRequestIdEvenOutOfOrder) {
  FakeServer server;
  server.service.answer_pairs_reversed = true;
  auto session = SessionClient::Open(ChannelTo(server), Options(server), nullptr);
  ASSERT_TRUE(session.ok()) << session.status();
  // Rounds of two calls in flight at once, each pair answered second-first:
  // every caller must get the answer for its own lease.
  int right = 0;
  for (int round = 0; round < 20; ++round) {
    absl::StatusOr<CompleteOutcome> outcomes[2];
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, t] {
        outcomes[t] = (*session)->Complete(static_cast<uint64_t>(100 * round + t + 1), 0);
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& outcome : outcomes) {
      EXPECT_TRUE(outcome.ok()) << outcome.status();
      if (outcome.ok() && *outcome == CompleteOutcome::kCompleted) ++right;
    }
  }
  EXPECT_EQ(right, 40);
}

TEST(SessionClient, CompletionAndTakeTravelInOneRequest) {
  FakeServer server;
  auto session = SessionClient::Open(ChannelTo(server), Options(server), nullptr);
  ASSERT_TRUE(session.ok());
  absl::StatusOr<std::vector<WorkItem>> first = (*session)->Take(1, absl::Now());
  ASSERT_TRUE(first.ok() && first->size() == 1u);
  CompleteAndTakeReply reply =
      (*session)->CompleteAndTake((*first)[0].lease_id, 0, 2, absl::Now());
  ASSERT_TRUE(reply.completed.ok()) << reply.completed.status();
  ASSERT_TRUE(reply.taken.ok());
  EXPECT_EQ(reply.taken->size(), 2u);
  const std::vector<SessionRequest> requests = server.service.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].complete_lease_ids_size(), 1);
  EXPECT_EQ(requests[1].take(), 2);
  // The session knows what the worker holds: the two new leases.
  std::vector<uint64_t> held = (*session)->HeldLeases();
  std::sort(held.begin(), held.end());
  EXPECT_EQ(held, (std::vector<uint64_t>{(*reply.taken)[0].lease_id,
                                         (*reply.taken)[1].lease_id}));
}

TEST(SessionClient, BrokenStreamIsReopenedWithTheHeldLeasesAndTheCallIsSentAgain) {
  FakeServer server;
  auto session = SessionClient::Open(ChannelTo(server), Options(server), nullptr);
  ASSERT_TRUE(session.ok());
  absl::StatusOr<std::vector<WorkItem>> items = (*session)->Take(2, absl::Now());
  ASSERT_TRUE(items.ok() && items->size() == 2u);
  // The completion's request breaks the stream before it is answered.
  server.service.break_on_request = 2;
  absl::StatusOr<CompleteOutcome> outcome = (*session)->Complete((*items)[0].lease_id, 0);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ((*session)->streams_opened(), 2);
  const std::vector<v1::SessionOpen> opens = server.service.opens();
  ASSERT_EQ(opens.size(), 2u);
  std::vector<uint64_t> reopened(opens[1].lease_ids().begin(), opens[1].lease_ids().end());
  std::sort(reopened.begin(), reopened.end());
  EXPECT_EQ(reopened, (std::vector<uint64_t>{(*items)[0].lease_id, (*items)[1].lease_id}));
  // Sent twice: once on the broken stream, once on the new one.
  const std::vector<SessionRequest> requests = server.service.requests();
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[2].complete_lease_ids(0), (*items)[0].lease_id);
  // The other lease is still held, and only it.
  EXPECT_EQ((*session)->HeldLeases(), (std::vector<uint64_t>{(*items)[1].lease_id}));
}

TEST(SessionClient, LeasesLostWhileTheStreamWasGoneReachTheListener) {
  FakeServer server;
  RecordingListener listener;
  auto session = SessionClient::Open(ChannelTo(server), Options(server), &listener);
  ASSERT_TRUE(session.ok());
  absl::StatusOr<std::vector<WorkItem>> items = (*session)->Take(2, absl::Now());
  ASSERT_TRUE(items.ok() && items->size() == 2u);
  server.service.lost_on_open = {(*items)[0].lease_id};
  server.service.break_on_request = 2;
  ASSERT_TRUE((*session)->ReportProgress({{(*items)[1].lease_id, 10}}).ok());
  EXPECT_EQ(listener.lost(), (std::vector<uint64_t>{(*items)[0].lease_id}));
  EXPECT_EQ((*session)->HeldLeases(), (std::vector<uint64_t>{(*items)[1].lease_id}));
}

TEST(SessionClient, PushedProposalReachesTheListener) {
  FakeServer server;
  RecordingListener listener;
  auto session = SessionClient::Open(ChannelTo(server), Options(server), &listener);
  ASSERT_TRUE(session.ok());
  SessionResponse push;
  v1::SplitProposal* p = push.add_splits();
  p->set_lease_id(7);
  p->set_split_point(50);
  p->set_min_residual(3);
  ASSERT_TRUE(server.service.Push(push));
  const std::vector<SplitProposal> got = listener.AwaitSplits();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].lease_id, 7u);
  EXPECT_EQ(got[0].split_point, 50);
  EXPECT_EQ(got[0].min_residual, 3);
}

TEST(SessionClient, DifferentMajorVersionIsRefusedNamingBothVersions) {
  FakeServer server;
  server.service.protocol_major = kProtocolMajor + 1;
  auto session = SessionClient::Open(ChannelTo(server), Options(server), nullptr);
  ASSERT_EQ(session.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(session.status().message().find(absl::StrCat(kProtocolMajor + 1, ".")),
            std::string::npos)
      << session.status();
  EXPECT_NE(session.status().message().find(absl::StrCat(kProtocolMajor, ".", kProtocolMinor)),
            std::string::npos)
      << session.status();
}

// Issue 18: the coordinators of a list, one a standby that names the
// leader. Opens and re-opens find the leader through it, and the re-open
// names the lease the worker holds.
TEST(SessionClient, ReopenThroughAStandbyReachesTheLeaderKeepingLeases) {
  FakeServer leader;
  std::unique_ptr<StandbyServer> standby = StartStandby(leader.address());
  ASSERT_NE(standby, nullptr);
  absl::StatusOr<CoordinatorAddress> list =
      ParseCoordinatorAddress(absl::StrCat(AddressOf(*standby), ",", leader.address()));
  ASSERT_TRUE(list.ok()) << list.status();
  auto channels = std::make_shared<CoordinatorChannels>(
      std::make_unique<LeaderResolver>(*list, nullptr), [](const std::string& address) {
        return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
      });
  auto session = SessionClient::Open(channels, Options(leader), nullptr);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_EQ(standby->calls(), 1);
  absl::StatusOr<std::vector<WorkItem>> held = (*session)->Take(1, absl::Now());
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->size(), 1u);
  // The stream breaks; the re-open tries the next of the list (the
  // standby), which sends it back to the leader.
  leader.service.break_on_request = 2;
  absl::StatusOr<std::vector<WorkItem>> next = (*session)->Take(1, absl::Now());
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(standby->calls(), 2);
  const std::vector<v1::SessionOpen> opens = leader.service.opens();
  ASSERT_EQ(opens.size(), 2u);
  EXPECT_TRUE(opens[1].reopen());
  EXPECT_THAT(opens[1].lease_ids(), testing::Contains((*held)[0].lease_id));
}

TEST(SessionClient, CoordinatorWithoutSessionsIsUnimplemented) {
  FakeServer server;
  server.service.sessions_unimplemented = true;
  auto session = SessionClient::Open(ChannelTo(server), Options(server), nullptr);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kUnimplemented);
}

std::shared_ptr<QueueBackend> RemoteTo(const FakeServer& server, bool use_sessions = true) {
  RemoteOptions o;
  o.address = server.address();
  o.use_sessions = use_sessions;
  o.retry.total_budget = absl::Seconds(30);
  absl::StatusOr<std::shared_ptr<QueueBackend>> backend = ConnectRemote(o);
  EXPECT_TRUE(backend.ok());
  return *backend;
}

TEST(RemoteSessions, CoordinatorWithoutSessionsGetsUnaryCalls) {
  FakeServer server;
  server.service.sessions_unimplemented = true;
  auto queue = WorkQueueFactory::Attach("q", RemoteTo(server), "w");
  ASSERT_TRUE(queue.ok()) << queue.status();
  absl::StatusOr<WorkItem> item = (*queue)->Take();
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_TRUE((*queue)->Complete(*item).ok());
  EXPECT_GE(server.service.unary_takes.load(), 1);
  EXPECT_TRUE(server.service.requests().empty());
}

TEST(RemoteSessions, WorkQueueCompletesAndTakesInOneMessage) {
  FakeServer server;
  auto queue = WorkQueueFactory::Attach("q", RemoteTo(server), "w");
  ASSERT_TRUE(queue.ok()) << queue.status();
  std::unique_ptr<ItemStream> stream = (*queue)->InputDataset();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(stream->Next().ok());
  EXPECT_EQ(server.service.unary_takes.load(), 0);
  EXPECT_EQ(server.service.unary_completes.load(), 0);
  // The first take asks for the item and one ahead; every later item came
  // ready, refilled by the completion of the one before.
  const std::vector<SessionRequest> requests = server.service.requests();
  ASSERT_EQ(requests.size(), 5u);
  EXPECT_EQ(requests[0].take(), 2);
  for (size_t i = 1; i < requests.size(); ++i) {
    EXPECT_EQ(requests[i].complete_lease_ids_size(), 1) << i;
    EXPECT_EQ(requests[i].take(), 1) << i;
  }
}

TEST(RemoteSessions, ACompletionIsNotAnsweredBehindTheWorkersOwnWaitingTake) {
  // The coordinator answers a session's requests in order: sent on the
  // session, a completion would wait for the item the take before it waits
  // for (a pipeline's consumer thread completing while its fetcher waits).
  FakeServer server;
  std::shared_ptr<QueueBackend> backend = RemoteTo(server);
  RecordingListener listener;
  ASSERT_TRUE(backend->BeginSession("q", "w", &listener).ok());
  absl::StatusOr<std::vector<WorkItem>> held = backend->Take("q", "w", 1, absl::Now());
  ASSERT_TRUE(held.ok() && held->size() == 1) << held.status();
  server.service.hold_waiting_takes = true;
  absl::StatusOr<std::vector<WorkItem>> waited;
  std::thread taker([&] { waited = backend->Take("q", "w", 1, absl::Now() + absl::Hours(1)); });
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (server.service.requests().size() < 2 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(server.service.requests().size(), 2u);
  EXPECT_TRUE(backend->Complete("q", "w", (*held)[0].lease_id, 100).ok());
  EXPECT_EQ(server.service.unary_completes.load(), 1);
  EXPECT_EQ(server.service.requests().size(), 2u);  // nothing more on the session
  server.service.AnswerWithheld();
  taker.join();
  ASSERT_TRUE(waited.ok()) << waited.status();
  EXPECT_EQ(waited->size(), 1u);
  // Without a waiting take, completions go on the session again.
  EXPECT_TRUE(backend->Complete("q", "w", (*waited)[0].lease_id, 100).ok());
  EXPECT_EQ(server.service.unary_completes.load(), 1);
  backend->EndSession("q", "w");
}

TEST(RemoteSessions, SessionsOffUsesUnaryCalls) {
  FakeServer server;
  auto queue = WorkQueueFactory::Attach("q", RemoteTo(server, /*use_sessions=*/false), "w");
  ASSERT_TRUE(queue.ok());
  ASSERT_TRUE((*queue)->Take().ok());
  EXPECT_EQ(server.service.unary_takes.load(), 1);
  EXPECT_TRUE(server.service.opens().empty());
}

TEST(TakeAhead, ReadyItemNotStartedIsGivenBackWholeOnAProposal) {
  FakeServer server;
  auto queue = WorkQueueFactory::Attach("q", RemoteTo(server), "w");
  ASSERT_TRUE(queue.ok());
  absl::StatusOr<WorkItem> reading = (*queue)->Take();
  ASSERT_TRUE(reading.ok());
  ASSERT_EQ((*queue)->ready(), 1);
  ASSERT_EQ((*queue)->held(), 2);
  const uint64_t ready_lease = reading->lease_id + 1;
  SessionResponse push;
  v1::SplitProposal* p = push.add_splits();
  p->set_lease_id(ready_lease);
  p->set_split_point(50);
  p->set_min_residual(1);
  ASSERT_TRUE(server.service.Push(push));
  // Answered with the item's start, which ends the lease: nothing else is
  // sent for it (a completion would complete an item nobody read).
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while ((*queue)->held() != 1 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ((*queue)->held(), 1);
  EXPECT_EQ((*queue)->ready(), 0);
  bool answered_at_start = false, completed = false;
  for (const SessionRequest& r : server.service.requests()) {
    for (const v1::SplitAnswer& a : r.split_answers()) {
      answered_at_start =
          answered_at_start || (a.lease_id() == ready_lease && a.split_point() == 0);
    }
    for (uint64_t id : r.complete_lease_ids()) completed = completed || id == ready_lease;
  }
  EXPECT_TRUE(answered_at_start);
  EXPECT_FALSE(completed);
}

TEST(TakeAhead, ARefusedGiveBackKeepsTheItemReady) {
  FakeServer server;
  server.service.accept_splits = false;
  auto queue = WorkQueueFactory::Attach("q", RemoteTo(server), "w");
  ASSERT_TRUE(queue.ok());
  absl::StatusOr<WorkItem> reading = (*queue)->Take();
  ASSERT_TRUE(reading.ok());
  const uint64_t ready_lease = reading->lease_id + 1;
  SessionResponse push;
  push.add_splits()->set_lease_id(ready_lease);
  ASSERT_TRUE(server.service.Push(push));
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  auto answered = [&] {
    for (const SessionRequest& r : server.service.requests()) {
      if (r.split_answers_size() > 0) return true;
    }
    return false;
  };
  while (!answered() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_TRUE(answered());
  // Out of the ready list while its answer was in flight; back once refused.
  while ((*queue)->ready() != 1 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ((*queue)->ready(), 1);
  // The next take hands out that item, without a round trip.
  const size_t before = server.service.requests().size();
  absl::StatusOr<WorkItem> next = (*queue)->Take();
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->lease_id, ready_lease);
  EXPECT_EQ(server.service.requests().size(), before);
}

}  // namespace
}  // namespace shardq
