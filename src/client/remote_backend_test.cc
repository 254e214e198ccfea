#include "src/client/remote_backend.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "shardq/text_line_reader.h"
#include "shardq/work_queue.h"
#include "src/client/retry.h"
#include "src/client/work_queue_backend.h"
#include "src/core/pass_rule.h"
#include "src/rpc/convert.h"
#include "src/server/grpc_service.h"
#include "src/server/standby_server.h"

namespace shardq {
namespace {

// With `state_dir`, a durable coordinator: its Complete is answered by
// callback once the journal has stored it (see grpc_service.h).
std::unique_ptr<CoordinatorServer> StartServer(const std::string& token = "",
                                               const std::string& state_dir = "") {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.token = token;
  options.state_dir = state_dir;
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return *std::move(server);
}

std::shared_ptr<QueueBackend> Connect(int port, const std::string& token = "") {
  RemoteOptions options;
  options.address = absl::StrCat("127.0.0.1:", port);
  options.token = token;
  options.retry.total_budget = absl::Seconds(2);
  absl::StatusOr<std::shared_ptr<QueueBackend>> backend = ConnectRemote(options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return *backend;
}

// Creates queue `name` with the single item "only".
void CreateOneItemQueue(QueueBackend& backend, const std::string& name) {
  QueueConfig config;
  config.name = name;
  config.items = {"only"};
  ASSERT_TRUE(backend.CreateQueue(config).ok());
}

std::vector<std::string> MakeFiles(const std::string& tag, int files, int lines) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string path = absl::StrCat(testing::TempDir(), "/", tag, "-", f, ".txt");
    std::ofstream out(path);
    for (int l = 0; l < lines; ++l) out << tag << " " << f << " " << l << "\n";
    paths.push_back(path);
  }
  return paths;
}

std::string FreshStateDir(const std::string& name) {
  std::string dir = absl::StrCat(testing::TempDir(), "/remote-state-", name, "-", ::getpid());
  std::filesystem::remove_all(dir);
  return dir;
}

class RemoteBackendBothModes : public testing::TestWithParam<bool> {
 protected:
  std::string StateDir(const std::string& name) { return GetParam() ? FreshStateDir(name) : ""; }
};

INSTANTIATE_TEST_SUITE_P(InMemoryAndDurable, RemoteBackendBothModes, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) {
                           return info.param ? "Durable" : "InMemory";
                         });

TEST_P(RemoteBackendBothModes, WorkQueuesInManyThreadsReadEveryLineOncePerEpochOverGrpc) {
  std::unique_ptr<CoordinatorServer> server = StartServer("", StateDir("many"));
  std::vector<std::string> files = MakeFiles("remote", 4, 50);
  std::mutex mu;
  std::map<std::string, int> lines;
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      WorkQueueOptions o;
      o.works = files;
      o.num_epochs = 2;
      o.num_slices = 24;
      o.seed = 1;
      o.name = "remote";
      o.worker_id = absl::StrCat("w", t);
      absl::StatusOr<std::unique_ptr<WorkQueue>> q =
          WorkQueueFactory::Create(o, Connect(server->port()));
      ASSERT_TRUE(q.ok()) << q.status();
      TextLineReader reader;
      while (true) {
        absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(**q, 10);
        if (absl::IsOutOfRange(batch.status())) break;
        ASSERT_TRUE(batch.ok()) << batch.status();
        std::lock_guard<std::mutex> lock(mu);
        for (const Record& r : *batch) ++lines[r.value];
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(lines.size(), 200u);
  for (const auto& [line, n] : lines) EXPECT_EQ(n, 2) << line;
  absl::StatusOr<QueueStats> stats = server->coordinator()->Stats("remote");
  EXPECT_EQ(stats->completed, 48);
  EXPECT_EQ(stats->duplicates, 0);
}

TEST(RemoteBackend, ErrorsKeepTheirCodeAndMessageAcrossTheWire) {
  std::unique_ptr<CoordinatorServer> server = StartServer();
  std::shared_ptr<QueueBackend> backend = Connect(server->port());
  absl::Status s = backend->Stats("missing-queue").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("missing-queue"), std::string::npos);
}

TEST(RemoteBackend, EndOfInputIsOutOfRange) {
  std::unique_ptr<CoordinatorServer> server = StartServer();
  std::shared_ptr<QueueBackend> backend = Connect(server->port());
  CreateOneItemQueue(*backend, "eoi");
  absl::StatusOr<std::vector<WorkItem>> items = backend->Take("eoi", "w", 1, absl::Now());
  ASSERT_EQ(items->size(), 1u);
  ASSERT_TRUE(backend->Complete("eoi", "w", (*items)[0].lease_id, 0).ok());
  EXPECT_TRUE(absl::IsOutOfRange(backend->Take("eoi", "w", 1, absl::Now()).status()));
}

TEST(RemoteBackend, TheItemsKeptReadyTravelWithATake) {
  std::unique_ptr<CoordinatorServer> server = StartServer();
  std::shared_ptr<QueueBackend> backend = Connect(server->port());
  QueueConfig config;
  config.name = "ahead";
  config.items = {"a", "b", "c", "d", "e"};
  config.num_clients = 1;
  ASSERT_TRUE(backend->CreateQueue(config).ok());
  // Unary takes: num_clients alone, then one more per item kept ready.
  ASSERT_EQ(backend->Take("ahead", "u", 1, absl::Now())->size(), 1u);
  EXPECT_EQ(backend->Take("ahead", "u", 1, absl::Now()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::vector<WorkItem>> more =
      backend->Take("ahead", "u", 5, absl::Now(), /*ahead=*/2);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(more->size(), 2u);
  // Over a session: a WorkQueue with the defaults keeps one item ready.
  absl::StatusOr<std::unique_ptr<WorkQueue>> q = WorkQueueFactory::Attach("ahead", backend, "s");
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_TRUE((*q)->Take().ok());
  EXPECT_EQ((*q)->held(), 2);
  EXPECT_EQ((*q)->ready(), 1);
  EXPECT_EQ(server->coordinator()->Stats("ahead")->leased, 5);
}

TEST_P(RemoteBackendBothModes, MissingOrWrongTokenIsUnauthenticated) {
  std::unique_ptr<CoordinatorServer> server = StartServer("tok", StateDir("token"));
  EXPECT_EQ(Connect(server->port())->AllStats().status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Connect(server->port(), "nope")->AllStats().status().code(),
            absl::StatusCode::kUnauthenticated);
  std::shared_ptr<QueueBackend> good = Connect(server->port(), "tok");
  EXPECT_TRUE(good->AllStats().ok());
  // Complete too (a callback method on a durable server).
  CreateOneItemQueue(*good, "tokq");
  absl::StatusOr<std::vector<WorkItem>> items = good->Take("tokq", "w", 1, absl::Now());
  ASSERT_TRUE(items.ok()) << items.status();
  ASSERT_EQ(items->size(), 1u);
  const uint64_t lease = (*items)[0].lease_id;
  EXPECT_EQ(Connect(server->port(), "nope")->Complete("tokq", "w", lease, 0).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(*good->Complete("tokq", "w", lease, 0), CompleteOutcome::kCompleted);
  EXPECT_EQ(*good->Complete("tokq", "w", lease, 0), CompleteOutcome::kDuplicate);
  EXPECT_EQ(good->Complete("no-such-queue", "w", lease, 0).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(RemoteBackendBothModes, ATakeThatWaitsGetsTheItemAnotherWorkerReleases) {
  std::unique_ptr<CoordinatorServer> server = StartServer("", StateDir("wait"));
  std::shared_ptr<QueueBackend> a = Connect(server->port());
  std::shared_ptr<QueueBackend> b = Connect(server->port());
  CreateOneItemQueue(*a, "waitq");
  absl::StatusOr<std::vector<WorkItem>> held = a->Take("waitq", "a", 1, absl::Now());
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->size(), 1u);
  // b's take finds nothing and waits (on a thread of its own, server-side)
  // until a gives the item back.
  absl::StatusOr<std::vector<WorkItem>> got;
  std::thread waiter([&] { got = b->Take("waitq", "b", 1, absl::Now() + absl::Seconds(30)); });
  absl::SleepFor(absl::Milliseconds(200));
  ASSERT_TRUE(a->Release("waitq", "a", (*held)[0].lease_id).ok());
  waiter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].item, "only");
  EXPECT_EQ(*b->Complete("waitq", "b", (*got)[0].lease_id, 0), CompleteOutcome::kCompleted);
  EXPECT_TRUE(absl::IsOutOfRange(b->Take("waitq", "b", 1, absl::Now()).status()));
}

TEST_P(RemoteBackendBothModes, ShortWaitingSessionTakesOfManyWorkersAreAllAnswered) {
  // Workers whose takes wait in short polls (WorkQueue::SetTakePoll, as a
  // DataLoader worker's at the end of its pass) while another worker holds
  // the only item: every poll is answered by its deadline (generous bound),
  // none is left unanswered on its session.
  std::unique_ptr<CoordinatorServer> server = StartServer("", StateDir("polls"));
  std::shared_ptr<QueueBackend> admin = Connect(server->port());
  CreateOneItemQueue(*admin, "polls");
  absl::StatusOr<std::unique_ptr<WorkQueue>> holder =
      WorkQueueFactory::Attach("polls", Connect(server->port()), "holder");
  ASSERT_TRUE(holder.ok()) << holder.status();
  absl::StatusOr<WorkItem> held = (*holder)->Take();
  ASSERT_TRUE(held.ok()) << held.status();
  std::atomic<int64_t> slowest_ms{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<std::unique_ptr<WorkQueue>> q =
          WorkQueueFactory::Attach("polls", Connect(server->port()), absl::StrCat("w", t));
      ASSERT_TRUE(q.ok()) << q.status();
      (*q)->SetTakePoll(absl::Milliseconds(5 + 10 * t));
      for (int i = 0; i < 30; ++i) {
        const absl::Time start = absl::Now();
        absl::StatusOr<WorkItem> item = (*q)->Take(absl::Milliseconds(60));
        const int64_t ms = absl::ToInt64Milliseconds(absl::Now() - start);
        int64_t seen = slowest_ms.load();
        while (ms > seen && !slowest_ms.compare_exchange_weak(seen, ms)) {
        }
        if (!absl::IsDeadlineExceeded(item.status())) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LT(slowest_ms.load(), 20'000);
  EXPECT_TRUE((*holder)->Complete(*held).ok());
}

TEST(RemoteBackend, StatsCountAWorkersOpenSessionsUntilItIsGone) {
  std::unique_ptr<CoordinatorServer> server = StartServer();
  std::shared_ptr<QueueBackend> admin = Connect(server->port());
  CreateOneItemQueue(*admin, "live");
  absl::StatusOr<std::unique_ptr<WorkQueue>> q =
      WorkQueueFactory::Attach("live", Connect(server->port()), "w");
  ASSERT_TRUE(q.ok()) << q.status();
  absl::StatusOr<WorkItem> item = (*q)->Take();
  ASSERT_TRUE(item.ok()) << item.status();
  EXPECT_EQ(server->coordinator()->Stats("live")->workers["w"].sessions, 1);
  q->reset();  // closes its session (the lease stays until it expires)
  const absl::Time bound = absl::Now() + absl::Seconds(60);  // generous
  while (server->coordinator()->Stats("live")->workers["w"].sessions != 0 &&
         absl::Now() < bound) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  QueueStats stats = *server->coordinator()->Stats("live");
  EXPECT_EQ(stats.workers["w"].sessions, 0);
  EXPECT_EQ(stats.workers["w"].held + stats.pending, 1);
}

// The end-of-pass question of shardq.torch asked of the coordinator
// (PassOver) instead of over the full stats; both must agree.
TEST(RemoteBackend, PassOverIsAnsweredByTheCoordinatorAsTheRuleOverItsStats) {
  std::unique_ptr<CoordinatorServer> server = StartServer();
  std::shared_ptr<QueueBackend> admin = Connect(server->port());
  CreateOneItemQueue(*admin, "pass");
  absl::StatusOr<std::unique_ptr<WorkQueue>> asker =
      WorkQueueFactory::Attach("pass", Connect(server->port()), "rank0/w1");
  ASSERT_TRUE(asker.ok()) << asker.status();
  auto agrees = [&](const std::string& siblings) {
    absl::StatusOr<bool> over = (*asker)->OnlyOthersHoldTheRest(siblings);
    EXPECT_TRUE(over.ok()) << over.status();
    absl::StatusOr<QueueStats> stats = admin->Stats("pass");
    EXPECT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(*over, OnlySiblingsHoldTheRest(*stats, "rank0/w1", siblings)) << siblings;
    return over.value_or(false);
  };
  EXPECT_FALSE(agrees("rank0/"));  // pending: the item is there for the taking
  // Held by a worker of another rank without a session (a unary client, or
  // a dead one whose lease will expire): the asker waits to read it.
  std::shared_ptr<QueueBackend> holder = Connect(server->port());
  absl::StatusOr<std::vector<WorkItem>> held =
      holder->Take("pass", "rank1/w0", 1, absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->size(), 1u);
  EXPECT_FALSE(agrees("rank0/"));
  EXPECT_TRUE(agrees("rank1/"));  // as its sibling the asker would not wait
  // The holder opens a session: a live worker of another rank holds the rest.
  class NoListener final : public SessionListener {
    void OnSplitProposals(const std::vector<SplitProposal>&) override {}
    void OnLostLeases(const std::vector<uint64_t>&) override {}
  } listener;
  absl::StatusOr<bool> opened = holder->BeginSession("pass", "rank1/w0", &listener);
  ASSERT_TRUE(opened.ok()) << opened.status();
  ASSERT_TRUE(*opened);
  EXPECT_TRUE(agrees("rank0/"));
  holder->EndSession("pass", "rank1/w0");
  const absl::Time bound = absl::Now() + absl::Seconds(60);  // generous
  while (server->coordinator()->Stats("pass")->workers["rank1/w0"].sessions != 0 &&
         absl::Now() < bound) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_FALSE(agrees("rank0/"));  // gone again, its lease not yet expired
}

// An older coordinator has no PassOver: the client asks its Status and
// applies the rule itself, and stops asking PassOver after the first
// UNIMPLEMENTED.
TEST(RemoteBackend, PassOverOfACoordinatorWithoutItIsTheRuleOverItsStats) {
  class OlderCoordinator final : public v1::Coordinator::Service {
   public:
    std::atomic<int> status_calls{0};
    std::atomic<int64_t> holder_sessions{0};
    grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest* req,
                        v1::StatusResponse* resp) override {
      ++status_calls;
      QueueStats stats;
      stats.name = req->queue();
      stats.num_items = 1;
      stats.num_epochs = 1;
      stats.leased = 1;
      stats.workers["other/w0"].held = 1;
      stats.workers["other/w0"].sessions = holder_sessions.load();
      ToProto(stats, resp->add_queues());
      return grpc::Status::OK;
    }
  };
  OlderCoordinator service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  std::shared_ptr<QueueBackend> backend = Connect(port);
  absl::StatusOr<bool> over = backend->PassOver("q", "job/w1", "job/");
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_FALSE(*over);  // held by a worker without a session, not a sibling
  service.holder_sessions = 1;
  over = backend->PassOver("q", "job/w1", "job/");
  ASSERT_TRUE(over.ok()) << over.status();
  EXPECT_TRUE(*over);  // now a live worker holds it
  EXPECT_EQ(service.status_calls.load(), 2);
  server->Shutdown();
}

TEST_P(RemoteBackendBothModes, ShutdownAnswersATakeThatIsStillWaiting) {
  std::unique_ptr<CoordinatorServer> server = StartServer("", StateDir("shutdown"));
  std::shared_ptr<QueueBackend> a = Connect(server->port());
  CreateOneItemQueue(*a, "stopq");
  ASSERT_EQ(a->Take("stopq", "a", 1, absl::Now())->size(), 1u);
  std::thread waiter([&] {
    // Answered (empty or an error) when the server stops, not after 60 s.
    a->Take("stopq", "b", 1, absl::Now() + absl::Seconds(60)).IgnoreError();
  });
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  server->Shutdown();
  server.reset();  // waits for the waiting take's thread
  waiter.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST(RemoteBackend, AForkedChildDropsAServerWithAWaitingTakeWithoutHanging) {
  // A child forked while a take waits (as a DataLoader forks its workers)
  // has the server object but none of its threads: destroying it there
  // must not wait for them.
  std::unique_ptr<CoordinatorServer> server = StartServer();
  std::shared_ptr<QueueBackend> a = Connect(server->port());
  CreateOneItemQueue(*a, "forkq");
  ASSERT_EQ(a->Take("forkq", "a", 1, absl::Now())->size(), 1u);
  std::thread waiter(
      [&] { a->Take("forkq", "b", 1, absl::Now() + absl::Seconds(60)).IgnoreError(); });
  absl::SleepFor(absl::Milliseconds(200));  // the take now waits server-side
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);  // a hang ends the child with SIGALRM
    server.reset();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  server->Shutdown();
  waiter.join();
}

TEST(RemoteBackend, UnreachableCoordinatorIsUnavailableAfterTheConnectTimeout) {
  RemoteOptions options;
  options.address = "127.0.0.1:1";  // nothing listens on port 1
  options.connect_timeout = absl::Milliseconds(300);
  std::shared_ptr<QueueBackend> backend = *ConnectRemote(options);
  absl::Status s = backend->AllStats().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("no answer from the coordinator at 127.0.0.1:1 within"),
            std::string::npos) << s;
  // The last connection error, not only "unavailable".
  EXPECT_NE(s.message().find("refused"), std::string::npos) << s;
}

TEST(RemoteBackend, AStandbyNamedAloneIsRefusedAtOnceNamingTheLeader) {
  // A standby of a highly available job: connected, every call refused,
  // naming the leader. Waiting would not change who leads: the first
  // answer ends the call (a connect timeout this long would fail the test
  // by its own timeout).
  ServerOptions server_options;
  server_options.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<StandbyServer>> standby =
      StandbyServer::Start(server_options, "train");
  ASSERT_TRUE(standby.ok()) << standby.status();
  (*standby)->SetLeader("127.0.0.1:9", "10.0.0.1:7077", 4);
  RemoteOptions options;
  options.address = absl::StrCat("127.0.0.1:", (*standby)->port());
  options.connect_timeout = absl::Minutes(30);
  std::shared_ptr<QueueBackend> backend = *ConnectRemote(options);
  absl::Status s = backend->AllStats().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(absl::StrCat("the coordinator at ", options.address,
                                          " is a standby")),
            std::string::npos) << s;
  EXPECT_NE(s.message().find("give the leader's address 10.0.0.1:7077"), std::string::npos) << s;
  EXPECT_NE(s.message().find("not leader: job 'train' is led by 10.0.0.1:7077 (term 4)"),
            std::string::npos) << s;
}

TEST(RemoteBackend, AWaitForTheFirstAnswerSaysSoOnStderr) {
  RemoteOptions options;
  options.address = "127.0.0.1:1";
  // Generous: the note is due after 1 s, the call ends after 3 s.
  options.connect_timeout = absl::Seconds(3);
  std::shared_ptr<QueueBackend> backend = *ConnectRemote(options);
  testing::internal::CaptureStderr();
  absl::Status s = backend->AllStats().status();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(err.find("waiting for the coordinator at 127.0.0.1:1 ("), std::string::npos) << err;
  EXPECT_NE(err.find("), retrying"), std::string::npos) << err;
}

TEST(RemoteBackend, ConnectTimeoutMustBePositive) {
  RemoteOptions options;
  options.address = "127.0.0.1:1";
  options.connect_timeout = absl::ZeroDuration();
  EXPECT_EQ(ConnectRemote(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RemoteBackend, AfterTheFirstAnswerCallsRideThroughAnOutageLongerThanTheConnectTimeout) {
  std::unique_ptr<CoordinatorServer> server = StartServer();
  const int port = server->port();
  RemoteOptions options;
  options.address = absl::StrCat("127.0.0.1:", port);
  options.connect_timeout = absl::Milliseconds(200);
  options.retry.total_budget = absl::Seconds(60);
  std::shared_ptr<QueueBackend> backend = *ConnectRemote(options);
  ASSERT_TRUE(backend->AllStats().ok());  // first answer
  server->Shutdown();
  server.reset();
  absl::StatusOr<std::vector<QueueStats>> during;
  std::thread caller([&] { during = backend->AllStats(); });
  absl::SleepFor(absl::Seconds(1));  // away 5x the connect timeout
  ServerOptions again;
  again.listen = absl::StrCat("127.0.0.1:", port);
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> restarted = CoordinatorServer::Start(again);
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  caller.join();
  EXPECT_TRUE(during.ok()) << during.status();
}

std::atomic<bool> interrupt_now{false};
bool TestInterrupt() { return interrupt_now.load(); }

TEST(RemoteBackend, AnInterruptEndsTheWaitForTheCoordinator) {
  RemoteOptions options;
  options.address = "127.0.0.1:1";
  options.connect_timeout = absl::Minutes(10);
  std::shared_ptr<QueueBackend> backend = *ConnectRemote(options);
  SetInterruptCheck(&TestInterrupt);
  interrupt_now = true;
  absl::Status s = backend->AllStats().status();
  SetInterruptCheck(nullptr);
  interrupt_now = false;
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_NE(s.message().find("interrupted"), std::string::npos) << s;
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s;
}

TEST(CallWithRetry, AnInterruptEndsTheBackoffWithCancelled) {
  RetryPolicy policy;
  policy.initial_backoff = absl::Seconds(30);
  SetInterruptCheck(&TestInterrupt);
  interrupt_now = true;
  int calls = 0;
  absl::Status s = CallWithRetry(policy, "down", [&] {
    ++calls;
    return absl::UnavailableError("down");
  });
  SetInterruptCheck(nullptr);
  interrupt_now = false;
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
}

TEST(CallWithRetry, AStopFlagSetDuringTheCallEndsTheRetries) {
  // A call that began before its owner started closing (BeginShutdown)
  // stops at its next failed attempt instead of waiting out the budget.
  std::atomic<bool> stop{false};
  RetryPolicy policy;
  policy.initial_backoff = absl::Milliseconds(1);
  policy.max_backoff = absl::Milliseconds(1);
  policy.stop = &stop;
  int calls = 0;
  absl::Status s = CallWithRetry(policy, "down", [&] {
    if (++calls == 3) stop.store(true);
    return absl::UnavailableError("down");
  });
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

TEST(CallWithRetry, RetriesOnlyUnavailableAbortedAndCancelled) {
  RetryPolicy policy;
  policy.initial_backoff = absl::Milliseconds(1);
  int calls = 0;
  absl::Status s = CallWithRetry(policy, "flaky", [&] {
    ++calls;
    return calls < 3 ? absl::UnavailableError("down") : absl::OkStatus();
  });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 3);
  calls = 0;
  s = CallWithRetry(policy, "bad", [&] {
    ++calls;
    return absl::InvalidArgumentError("no");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  calls = 0;
  absl::StatusOr<int> v = CallWithRetry(policy, "value", [&]() -> absl::StatusOr<int> {
    if (++calls == 1) return absl::AbortedError("conflict");
    return 7;
  });
  EXPECT_EQ(*v, 7);
  // What a client sees of a coordinator that stopped under its call.
  calls = 0;
  s = CallWithRetry(policy, "stopped", [&] {
    return ++calls == 1 ? absl::CancelledError("CANCELLED") : absl::OkStatus();
  });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace shardq
