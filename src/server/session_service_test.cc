// The Session stream against a real CoordinatorServer on 127.0.0.1, driven
// by a raw gRPC ClientReaderWriter: the wire contract of coordinator.proto
// ("Sessions"), version checks, liveness without heartbeats, pushed split
// proposals, waiting takes, durability, and unary clients on the same
// queue. Nothing here is timed: time moves by a FakeClock behind the
// server, and waits are for messages or conditions.
#include "src/server/session_service.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/rpc/protocol_version.h"
#include "src/server/grpc_service.h"

namespace shardq {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(30);

struct Server {
  std::unique_ptr<CoordinatorServer> server;
  std::unique_ptr<v1::Coordinator::Stub> stub;
  CoordinatorImpl* coordinator() { return server->coordinator(); }
};

Server StartServer(Clock* clock, const std::string& state_dir = "",
                   const std::string& token = "") {
  ServerOptions options;
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
void CreateQueue(Server& s, const std::string& name, int items, int num_clients = 1,
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
v1::TakeResponse UnaryTake(Server& s, const std::string& queue, const std::string& worker) {
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

QueueStats Stats(Server& s, const std::string& queue) {
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

TEST(Session, OpensAndAnswersACompletionAndTheNextTakeInOneMessage) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 3);
  RawSession session(s);
  v1::SessionResponse opened = session.Open("q", "w");
  ASSERT_TRUE(opened.has_opened());
  EXPECT_EQ(opened.request_id(), 1u);
  EXPECT_EQ(opened.opened().version().major(), kProtocolMajor);
  EXPECT_EQ(opened.opened().version().minor(), kProtocolMinor);
  EXPECT_EQ(opened.opened().queue().name(), "q");
  EXPECT_EQ(opened.opened().queue().num_items(), 3);
  EXPECT_EQ(s.coordinator()->SessionsOpen("q", "w"), 1);

  v1::SessionResponse first = session.Take(2);
  ASSERT_EQ(first.items_size(), 1);
  EXPECT_EQ(first.items(0).item(), "f0.txt?start=0&end=1000");
  for (int i = 1; i <= 2; ++i) {
    const uint64_t done = first.items(0).lease_id();
    v1::SessionResponse next = session.Take(2 + i, 0, {done});
    ASSERT_EQ(next.complete_results_size(), 1);
    EXPECT_EQ(next.complete_results(0).lease_id(), done);
    EXPECT_EQ(next.complete_results(0).status().code(), 0);
    EXPECT_FALSE(next.complete_results(0).duplicate());
    ASSERT_EQ(next.items_size(), 1);
    EXPECT_EQ(next.items(0).index(), i);
    first = next;
  }
  v1::SessionResponse last = session.Take(5, 0, {first.items(0).lease_id()});
  EXPECT_EQ(last.complete_results(0).status().code(), 0);
  EXPECT_TRUE(last.end_of_input());
  EXPECT_EQ(last.items_size(), 0);
  EXPECT_EQ(Stats(s, "q").completed, 3);
  EXPECT_TRUE(session.Finish().ok());
  EXPECT_EQ(s.coordinator()->SessionsOpen("q", "w"), 0);
}

TEST(Session, AFailedOperationIsAnsweredAndTheStreamGoesOn) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 2);
  RawSession session(s);
  session.Open("q", "w");
  v1::SessionRequest req;
  req.set_request_id(2);
  req.add_complete_lease_ids(123456789);  // never handed out
  v1::SessionRelease* release = req.add_releases();
  release->set_lease_id(987654321);
  v1::LeaseProgress* progress = req.add_progress();
  progress->set_lease_id(555);
  progress->set_offset(10);
  req.set_take(1);
  ASSERT_TRUE(session.Write(req));
  v1::SessionResponse resp = session.ReadAnswer(2);
  ASSERT_EQ(resp.complete_results_size(), 1);
  EXPECT_EQ(resp.complete_results(0).status().code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_NE(resp.complete_results(0).status().message().find("123456789"), std::string::npos);
  ASSERT_EQ(resp.release_results_size(), 1);
  EXPECT_EQ(resp.release_results(0).status().code(), static_cast<int>(absl::StatusCode::kNotFound));
  EXPECT_EQ(resp.progress_status().code(), static_cast<int>(absl::StatusCode::kNotFound));
  ASSERT_EQ(resp.items_size(), 1);  // the take after them still ran
  // num_clients is 1: a second take fails, and the stream still goes on.
  v1::SessionResponse refused = session.Take(3);
  EXPECT_EQ(refused.take_status().code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  v1::SessionResponse next = session.Take(4, 0, {resp.items(0).lease_id()});
  EXPECT_EQ(next.items_size(), 1);
  EXPECT_TRUE(session.Finish().ok());
  EXPECT_EQ(Stats(s, "q").refused_completions, 1);
}

TEST(Session, AnotherMajorVersionIsRefusedNamingBothVersions) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  RawSession session(s);
  session.Open("q", "w", {}, kProtocolMajor + 1, 3);
  EXPECT_TRUE(session.ended());
  grpc::Status status = session.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(status.error_message().find(absl::StrCat(kProtocolMajor + 1, ".3")),
            std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find(absl::StrCat(kProtocolMajor, ".", kProtocolMinor)),
            std::string::npos)
      << status.error_message();
  EXPECT_EQ(s.coordinator()->SessionsOpen("q", "w"), 0);
}

TEST(Session, AnotherMinorVersionIsServed) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  RawSession session(s);
  v1::SessionResponse opened = session.Open("q", "w", {}, kProtocolMajor, kProtocolMinor + 5);
  ASSERT_TRUE(opened.has_opened());
  EXPECT_EQ(opened.opened().version().minor(), kProtocolMinor);
  EXPECT_EQ(session.Take(2).items_size(), 1);
  EXPECT_TRUE(session.Finish().ok());
}

TEST(Session, HostileOpeningsEndTheStreamWithTheirError) {
  FakeClock clock;
  Server s = StartServer(&clock, "", "secret");
  {
    RawSession no_token(s);
    no_token.Open("q", "w");
    EXPECT_EQ(no_token.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    RawSession unknown_queue(s, "secret");
    unknown_queue.Open("nope", "w");
    grpc::Status status = unknown_queue.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(status.error_message().find("nope"), std::string::npos);
  }
  {
    RawSession no_open(s, "secret");
    v1::SessionRequest req;
    req.set_request_id(1);
    req.set_take(1);
    ASSERT_TRUE(no_open.Write(req));
    no_open.Read();
    EXPECT_TRUE(no_open.ended());
    EXPECT_EQ(no_open.Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST(Session, AStreamBrokenMidItemIsReopenedAndKeepsItsLease) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  uint64_t lease;
  {
    RawSession first(s);
    first.Open("q", "w");
    v1::SessionResponse taken = first.Take(2);
    ASSERT_EQ(taken.items_size(), 1);
    lease = taken.items(0).lease_id();
    first.Break();
  }
  AwaitCondition([&] { return s.coordinator()->SessionsOpen("q", "w") == 0; });
  clock.Advance(kTimeout / 2);  // gone, but for less than the lease timeout
  RawSession again(s);
  v1::SessionResponse opened = again.Open("q", "w", {lease, 42});
  ASSERT_TRUE(opened.has_opened());
  ASSERT_EQ(opened.opened().lost_lease_ids_size(), 1);
  EXPECT_EQ(opened.opened().lost_lease_ids(0), 42u);  // never held
  // Open, its lease never expires, whatever the time.
  clock.Advance(10 * kTimeout);
  EXPECT_EQ(UnaryTake(s, "q", "other").items_size(), 0);
  v1::SessionResponse done = again.Take(3, 0, {lease});
  EXPECT_EQ(done.complete_results(0).status().code(), 0);
  EXPECT_TRUE(done.end_of_input());
  EXPECT_EQ(Stats(s, "q").expired, 0);
  EXPECT_TRUE(again.Finish().ok());
}

TEST(Session, ASessionGonePastTheLeaseTimeoutLosesItsItemsToOthersCountedOnce) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 2);
  RawSession first(s);
  first.Open("q", "w1");
  v1::SessionResponse taken = first.Take(2);
  ASSERT_EQ(taken.items_size(), 1);
  const uint64_t lease = taken.items(0).lease_id();
  first.Break();
  AwaitCondition([&] { return s.coordinator()->SessionsOpen("q", "w1") == 0; });

  // Another worker takes the other item and then waits: w1's item is held.
  RawSession second(s);
  second.Open("q", "w2");
  v1::SessionResponse other = second.Take(2);
  ASSERT_EQ(other.items_size(), 1);
  clock.Advance(kTimeout - absl::Seconds(1));
  v1::SessionResponse nothing = second.Take(3, 0, {other.items(0).lease_id()});
  EXPECT_EQ(nothing.items_size(), 0);
  EXPECT_FALSE(nothing.end_of_input());
  // Past the timeout, w1's item goes to w2, which waits for it.
  v1::SessionRequest wait;
  wait.set_request_id(4);
  wait.set_take(1);
  wait.set_take_wait_ms(50'000);
  ASSERT_TRUE(second.Write(wait));
  clock.Advance(absl::Seconds(2));
  v1::SessionResponse released = second.ReadAnswer(4);  // the wait hub noticed the expiry
  ASSERT_EQ(released.items_size(), 1);
  EXPECT_EQ(released.items(0).index(), taken.items(0).index());

  // w1 comes back: its lease is reported lost, and its late completion is
  // the first, so it counts; w2's is then the duplicate.
  RawSession back(s);
  v1::SessionResponse opened = back.Open("q", "w1", {lease});
  ASSERT_EQ(opened.opened().lost_lease_ids_size(), 1);
  EXPECT_EQ(opened.opened().lost_lease_ids(0), lease);
  v1::SessionRequest late;
  late.set_request_id(2);
  late.add_complete_lease_ids(lease);
  ASSERT_TRUE(back.Write(late));
  v1::SessionResponse late_answer = back.ReadAnswer(2);
  EXPECT_EQ(late_answer.complete_results(0).status().code(), 0);
  EXPECT_FALSE(late_answer.complete_results(0).duplicate());
  v1::SessionResponse end = second.Take(5, 0, {released.items(0).lease_id()});
  EXPECT_TRUE(end.complete_results(0).duplicate());
  EXPECT_TRUE(end.end_of_input());
  QueueStats stats = Stats(s, "q");
  EXPECT_EQ(stats.completed, 2);
  EXPECT_EQ(stats.duplicates, 1);
  EXPECT_EQ(stats.expired, 1);
  EXPECT_TRUE(stats.finished);
  EXPECT_TRUE(back.Finish().ok());
  EXPECT_TRUE(second.Finish().ok());
}

TEST(Session, ASplitProposalIsPushedToTheSessionHoldingTheStragglersItem) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  RawSession holder(s);
  holder.Open("q", "slow");
  v1::SessionResponse taken = holder.Take(2);
  ASSERT_EQ(taken.items_size(), 1);
  const uint64_t lease = taken.items(0).lease_id();
  clock.Advance(absl::Seconds(10));
  v1::SessionRequest progress;
  progress.set_request_id(3);
  v1::LeaseProgress* p = progress.add_progress();
  p->set_lease_id(lease);
  p->set_offset(100);
  ASSERT_TRUE(holder.Write(progress));
  EXPECT_EQ(holder.ReadAnswer(3).progress_status().code(), 0);

  // An idle worker asks (a waiting session take): the proposal is pushed
  // to the holder's stream at once.
  RawSession idle(s);
  idle.Open("q", "idle");
  v1::SessionRequest wait;
  wait.set_request_id(2);
  wait.set_take(1);
  wait.set_take_wait_ms(50'000);
  ASSERT_TRUE(idle.Write(wait));
  v1::SessionResponse pushed = holder.Read();
  EXPECT_EQ(pushed.request_id(), 0u);
  ASSERT_EQ(pushed.splits_size(), 1);
  EXPECT_EQ(pushed.splits(0).lease_id(), lease);
  const int64_t point = pushed.splits(0).split_point();
  EXPECT_GT(point, 100);
  EXPECT_LT(point, 1000);
  // Sent again with any answer until answered.
  ASSERT_TRUE(holder.Write(progress));
  v1::SessionResponse again = holder.ReadAnswer(3);
  ASSERT_EQ(again.splits_size(), 1);
  EXPECT_EQ(again.splits(0).split_point(), point);
  // The answer: the idle worker's waiting take gets the rest at once.
  v1::SessionRequest answer;
  answer.set_request_id(4);
  v1::SplitAnswer* a = answer.add_split_answers();
  a->set_lease_id(lease);
  a->set_split_point(point);
  ASSERT_TRUE(holder.Write(answer));
  v1::SessionResponse answered = holder.ReadAnswer(4);
  ASSERT_EQ(answered.split_results_size(), 1);
  EXPECT_TRUE(answered.split_results(0).accepted());
  EXPECT_EQ(answered.splits_size(), 0);
  v1::SessionResponse rest = idle.ReadAnswer(2);
  ASSERT_EQ(rest.items_size(), 1);
  EXPECT_EQ(rest.items(0).item(), absl::StrCat("f0.txt?start=", point, "&end=1000"));
  EXPECT_EQ(holder.Take(5, 0, {lease}).complete_results(0).status().code(), 0);
  EXPECT_TRUE(idle.Take(3, 0, {rest.items(0).lease_id()}).end_of_input());
  EXPECT_TRUE(Stats(s, "q").finished);
  EXPECT_TRUE(holder.Finish().ok());
  EXPECT_TRUE(idle.Finish().ok());
}

TEST(Session, AnItemTakenAheadIsGivenBackWholeToAnIdleWorker) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 2, /*num_clients=*/2);
  RawSession busy(s);
  busy.Open("q", "busy");
  v1::SessionRequest two;
  two.set_request_id(2);
  two.set_take(2);
  ASSERT_TRUE(busy.Write(two));
  v1::SessionResponse taken = busy.ReadAnswer(2);
  ASSERT_EQ(taken.items_size(), 2);
  const v1::WorkItem ahead = taken.items(1);
  RawSession idle(s);
  idle.Open("q", "idle");
  v1::SessionRequest wait;
  wait.set_request_id(2);
  wait.set_take(1);
  wait.set_take_wait_ms(50'000);
  ASSERT_TRUE(idle.Write(wait));
  v1::SessionResponse pushed = busy.Read();
  ASSERT_EQ(pushed.splits_size(), 1);
  EXPECT_EQ(pushed.splits(0).lease_id(), ahead.lease_id());
  EXPECT_EQ(pushed.splits(0).split_point(), 0);  // its start: the whole item
  v1::SessionRequest give_back;
  give_back.set_request_id(3);
  v1::SplitAnswer* a = give_back.add_split_answers();
  a->set_lease_id(ahead.lease_id());
  a->set_split_point(0);
  ASSERT_TRUE(busy.Write(give_back));
  EXPECT_TRUE(busy.ReadAnswer(3).split_results(0).accepted());
  v1::SessionResponse got = idle.ReadAnswer(2);
  ASSERT_EQ(got.items_size(), 1);
  EXPECT_EQ(got.items(0).item(), ahead.item());
  QueueStats stats = Stats(s, "q");
  EXPECT_EQ(stats.released, 0);  // given back unstarted: not a release
  EXPECT_EQ(stats.given_back, 1);
  EXPECT_EQ(stats.splits, 0);
  EXPECT_TRUE(busy.Finish().ok());
  EXPECT_TRUE(idle.Finish().ok());
}

TEST(Session, AWaitingTakeIsAnsweredByAReleaseAndAHalfCloseAnswersTheRest) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 1);
  RawSession holder(s);
  holder.Open("q", "a");
  const uint64_t lease = holder.Take(2).items(0).lease_id();
  RawSession waiter(s);
  waiter.Open("q", "b");
  v1::SessionRequest wait;
  wait.set_request_id(2);
  wait.set_take(1);
  wait.set_take_wait_ms(50'000);
  ASSERT_TRUE(waiter.Write(wait));
  v1::SessionRequest release;
  release.set_request_id(3);
  release.add_releases()->set_lease_id(lease);
  ASSERT_TRUE(holder.Write(release));
  EXPECT_EQ(holder.ReadAnswer(3).release_results(0).status().code(), 0);
  v1::SessionResponse got = waiter.ReadAnswer(2);
  ASSERT_EQ(got.items_size(), 1);
  // The holder now waits in turn; its half-close answers that take with
  // no items, and the stream ends OK.
  wait.set_request_id(4);
  ASSERT_TRUE(holder.Write(wait));
  EXPECT_TRUE(holder.Finish().ok());
  EXPECT_TRUE(waiter.Finish().ok());
  EXPECT_EQ(Stats(s, "q").released, 1);
}

TEST(Session, UnaryAndSessionWorkersShareAQueueExactlyOnce) {
  FakeClock clock;
  Server s = StartServer(&clock);
  CreateQueue(s, "q", 6);
  RawSession session(s);
  session.Open("q", "session");
  uint64_t request = 2;
  uint64_t held = 0;
  int by_session = 0;
  int by_unary = 0;
  bool session_done = false;
  bool unary_done = false;
  while (!session_done || !unary_done) {
    if (!session_done) {
      v1::SessionResponse r =
          session.Take(request++, 0, held != 0 ? std::vector<uint64_t>{held} : std::vector<uint64_t>{});
      held = r.items_size() == 1 ? r.items(0).lease_id() : 0;
      by_session += r.items_size();
      session_done = r.end_of_input();
    }
    if (!unary_done) {
      v1::TakeResponse r = UnaryTake(s, "q", "unary");
      unary_done = r.end_of_input();
      if (r.items_size() == 1) {
        ++by_unary;
        v1::CompleteRequest complete;
        complete.set_queue("q");
        complete.set_worker("unary");
        complete.set_lease_id(r.items(0).lease_id());
        grpc::ClientContext ctx;
        v1::CompleteResponse resp;
        ASSERT_TRUE(s.stub->Complete(&ctx, complete, &resp).ok());
      }
    }
  }
  EXPECT_EQ(by_session + by_unary, 6);
  EXPECT_GT(by_session, 0);
  EXPECT_GT(by_unary, 0);
  QueueStats stats = Stats(s, "q");
  EXPECT_EQ(stats.completed, 6);
  EXPECT_EQ(stats.duplicates, 0);
  EXPECT_TRUE(stats.finished);
  EXPECT_TRUE(session.Finish().ok());
}

std::string FreshStateDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/session-state-", name, "-", ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(Session, DurableCompletionsAreAnsweredOnceStoredAndSurviveARestart) {
  const std::string dir = FreshStateDir("durable");
  uint64_t held;
  {
    Server s = StartServer(nullptr, dir);
    CreateQueue(s, "q", 3);
    RawSession session(s);
    session.Open("q", "w");
    uint64_t first = session.Take(2).items(0).lease_id();
    v1::SessionResponse next = session.Take(3, 0, {first});
    EXPECT_EQ(next.complete_results(0).status().code(), 0);
    ASSERT_EQ(next.items_size(), 1);
    held = next.items(0).lease_id();
    // Answered, so on disk: the journal's totals cover it.
    std::optional<Journal::Totals> totals = s.coordinator()->journal_totals();
    ASSERT_TRUE(totals.has_value());
    EXPECT_GE(totals->entries, 3);  // create, lease, complete (and the next lease)
    session.Break();
  }
  Server s = StartServer(nullptr, dir);
  QueueStats stats = Stats(s, "q");
  EXPECT_EQ(stats.completed, 1);
  RawSession session(s);
  v1::SessionResponse opened = session.Open("q", "w", {held});
  EXPECT_EQ(opened.opened().lost_lease_ids_size(), 0);  // the grant was stored
  v1::SessionResponse next = session.Take(2, 0, {held});
  EXPECT_EQ(next.complete_results(0).status().code(), 0);
  ASSERT_EQ(next.items_size(), 1);
  EXPECT_TRUE(session.Take(3, 0, {next.items(0).lease_id()}).end_of_input());
  EXPECT_EQ(Stats(s, "q").completed, 3);
  EXPECT_TRUE(session.Finish().ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardq
