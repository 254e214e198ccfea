// bench/coordinator_throughput: take+complete pairs per second and take
// latency (p50/p99) of `shardq serve` next to Redis used as a reliable work
// queue (LMOVE pending -> processing on take, LREM on completion), in one
// run, measured by this one driver.
//
// Fairness: for both systems every client has one connection (a gRPC
// channel for shardq, a hiredis context for Redis; the session row's
// drivers may share a few channels, --session-channels), the queue
// holds the same number of items, and each client takes one item, completes
// it, and loops until the queue is drained. Redis and unary shardq clients
// are one thread each; the session row's clients are streams that one thread
// of the driver drives on one completion queue (--session-driver cq, the
// default: each answer read and the next request written by that thread,
// no hand-off), or multiplexed on gRPC's callback threads (callback), or one
// thread each (blocking).
// shardq's like-for-like row is "session" (session_driver.h): one Session
// stream per client, the completion and the next take in one message. "1
// item" is the unary Take then Complete (two RPCs per pair); "batched" asks
// for up to 8 items per unary take (a shardq feature, the queue's
// num_clients = 8) and completes them one by one; it is labelled as such and
// is not the apples-to-apples row.
//
// Measurement: each client first drains a small warm-up queue (connection
// set-up, server threads, allocators; not measured), then waits at a start
// gate; the clock runs from the gate's opening until the last client has
// seen the queue drained. Each client records take latencies in its own
// histogram (no shared state, no lock in the loop); they are merged after
// the row is over. Every item must be taken and completed exactly
// once, checked on the driver side (per-item counts) and on the server side
// (shardq's queue stats; Redis's pending and processing lists both empty).
//
// With --fsync-probe DIR it also measures, once per repeat, what one
// journal commit per completion would allow: a lone writer appending a
// completion to a fresh Journal in DIR and waiting for it to be durable,
// over and over (SQLite + fdatasync on DIR's filesystem, the same code the
// durable server commits with). The durable table is then read against it:
// group commit is what lifts a durable server above that rate, and at one
// client nothing can (each completion waits for its own commit).
//
// With --shardq-etcd ADDR (the leader of a `shardq serve --etcd` job) the
// same session and batched rows run against the etcd store, interleaved
// with the others, and the durable table reads them against the SQLite
// store's (etcd / SQLite): a completion is answered once the etcd
// transaction that holds it is committed by the etcd cluster's quorum, and
// a grant once stored (grants_wait_for_store).
//
// The servers are started and stopped by ./run; this program only connects.
#include <hiredis/hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/coordinator_throughput/harness.h"
#include "bench/coordinator_throughput/session_driver.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/client/backend.h"
#include "src/client/remote_backend.h"
#include "src/core/queue_state.h"
#include "src/store/journal.h"
#include "src/log/mutex_mode.h"

namespace shardq {
namespace {

using throughput::ClientResult;
using throughput::ClientSession;
using throughput::ItemIndex;
using throughput::ItemName;
using throughput::LatencyHistogram;
using throughput::RowClients;
using throughput::RowClock;
using throughput::System;
using throughput::Taken;
using SteadyClock = std::chrono::steady_clock;

int64_t NanosSince(SteadyClock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start)
      .count();
}

// ---------------------------------------------------------------------------
// shardq: the internal remote client (src/client/remote_backend.h).

class ShardqSession final : public ClientSession {
 public:
  ShardqSession(std::shared_ptr<QueueBackend> backend, std::string worker, int64_t batch)
      : backend_(std::move(backend)), worker_(std::move(worker)), batch_(batch) {}

  absl::Status Take(const std::string& queue, std::vector<Taken>* out) override {
    out->clear();
    while (true) {
      absl::StatusOr<std::vector<WorkItem>> items =
          backend_->Take(queue, worker_, batch_, absl::Now() + absl::Seconds(30));
      if (absl::IsOutOfRange(items.status())) return absl::OkStatus();  // drained
      if (!items.ok()) return items.status();
      if (items->empty()) continue;  // long-poll ended with nothing: ask again
      for (WorkItem& item : *items) {
        Taken taken;
        taken.index = item.index;
        taken.lease_id = item.lease_id;
        out->push_back(std::move(taken));
      }
      return absl::OkStatus();
    }
  }

  absl::Status Complete(const std::string& queue, const Taken& taken) override {
    absl::StatusOr<CompleteOutcome> outcome = backend_->Complete(queue, worker_, taken.lease_id, 0);
    if (!outcome.ok()) return outcome.status();
    if (*outcome != CompleteOutcome::kCompleted) {
      return absl::InternalError(absl::StrCat("shardq counted the completion of ",
                                              ItemName(taken.index), " as a duplicate"));
    }
    return absl::OkStatus();
  }

 private:
  const std::shared_ptr<QueueBackend> backend_;
  const std::string worker_;
  const int64_t batch_;
};

// Diagnostic only (--diagnose-connections): the same two RPCs through a bare
// generated stub whose channel has its own TCP connection. ConnectRemote's
// channels all share one connection per process (gRPC's global subchannel
// pool), unlike one Redis connection per client; this session shows what
// that costs. No retries, no token: a bench against a local coordinator.
class OwnConnectionSession final : public ClientSession {
 public:
  OwnConnectionSession(const std::string& address, std::string worker, int64_t batch)
      : worker_(std::move(worker)), batch_(batch) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
  }

  absl::Status Take(const std::string& queue, std::vector<Taken>* out) override {
    out->clear();
    v1::TakeRequest req;
    req.set_queue(queue);
    req.set_worker(worker_);
    req.set_max_items(batch_);
    req.set_wait_ms(10'000);
    while (true) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      v1::TakeResponse resp;
      const grpc::Status s = stub_->Take(&ctx, req, &resp);
      if (!s.ok()) return absl::UnavailableError(absl::StrCat("Take: ", s.error_message()));
      if (resp.end_of_input()) return absl::OkStatus();
      if (resp.items_size() == 0) continue;
      for (const v1::WorkItem& item : resp.items()) {
        Taken taken;
        taken.index = item.index();
        taken.lease_id = item.lease_id();
        out->push_back(std::move(taken));
      }
      return absl::OkStatus();
    }
  }

  absl::Status Complete(const std::string& queue, const Taken& taken) override {
    v1::CompleteRequest req;
    req.set_queue(queue);
    req.set_worker(worker_);
    req.set_lease_id(taken.lease_id);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::CompleteResponse resp;
    const grpc::Status s = stub_->Complete(&ctx, req, &resp);
    if (!s.ok()) return absl::UnavailableError(absl::StrCat("Complete: ", s.error_message()));
    if (resp.duplicate()) {
      return absl::InternalError(absl::StrCat("shardq counted the completion of ",
                                              ItemName(taken.index), " as a duplicate"));
    }
    return absl::OkStatus();
  }

 private:
  const std::string worker_;
  const int64_t batch_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

RemoteOptions OptionsFor(const std::string& address) {
  RemoteOptions options;
  options.address = address;
  return options;
}

class ShardqSystem final : public System {
 public:
  // `batch`: items asked for per take, and the queue's num_clients.
  // `own_connection`: clients use OwnConnectionSession (diagnostic) rather
  // than ConnectRemote.
  static absl::StatusOr<std::unique_ptr<ShardqSystem>> Create(const std::string& address,
                                                              int64_t batch,
                                                              bool own_connection = false) {
    absl::StatusOr<std::shared_ptr<QueueBackend>> control = ConnectRemote(OptionsFor(address));
    if (!control.ok()) return control.status();
    return std::unique_ptr<ShardqSystem>(
        new ShardqSystem(address, batch, own_connection, *std::move(control)));
  }

  absl::Status CreateQueue(const std::string& queue, int64_t num_items) override {
    QueueConfig config;
    config.name = queue;
    config.items.reserve(num_items);
    for (int64_t i = 0; i < num_items; ++i) config.items.push_back(ItemName(i));
    config.num_epochs = 1;
    config.shuffle = false;  // FIFO, like the Redis list
    config.seed = 1;
    config.num_clients = batch_;
    // Long enough that no lease expires during the bench.
    config.lease_timeout = absl::Seconds(60);
    absl::StatusOr<QueueInfo> info = control_->CreateQueue(config);
    if (!info.ok()) return info.status();
    if (!info->created) {
      return absl::AlreadyExistsError(absl::StrCat("shardq queue '", queue, "' already existed"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<ClientSession>> Connect(const std::string& worker) override {
    if (own_connection_) {
      return std::unique_ptr<ClientSession>(
          std::make_unique<OwnConnectionSession>(address_, worker, batch_));
    }
    // A channel per client thread, like one Redis connection per client.
    absl::StatusOr<std::shared_ptr<QueueBackend>> backend = ConnectRemote(OptionsFor(address_));
    if (!backend.ok()) return backend.status();
    return std::unique_ptr<ClientSession>(
        std::make_unique<ShardqSession>(*std::move(backend), worker, batch_));
  }

  absl::StatusOr<std::string> CheckDrained(const std::string& queue, int64_t num_items) override {
    absl::StatusOr<QueueStats> stats = control_->Stats(queue);
    if (!stats.ok()) return stats.status();
    const std::string seen = absl::StrFormat(
        "coordinator stats: completed %d, taken %d, pending %d, leased %d, expired %d, "
        "released %d, duplicates %d, finished %s",
        stats->completed, stats->taken, stats->pending, stats->leased, stats->expired,
        stats->released, stats->duplicates, stats->finished ? "yes" : "no");
    if (stats->completed != num_items || stats->taken != num_items || stats->pending != 0 ||
        stats->leased != 0 || stats->expired != 0 || stats->released != 0 ||
        stats->duplicates != 0 || !stats->finished) {
      return absl::InternalError(absl::StrCat("shardq queue '", queue, "' of ", num_items,
                                              " items is not cleanly drained: ", seen));
    }
    return seen;
  }

 private:
  ShardqSystem(std::string address, int64_t batch, bool own_connection,
               std::shared_ptr<QueueBackend> control)
      : address_(std::move(address)),
        batch_(batch),
        own_connection_(own_connection),
        control_(std::move(control)) {}

  const std::string address_;
  const int64_t batch_;
  const bool own_connection_;
  const std::shared_ptr<QueueBackend> control_;
};

// ---------------------------------------------------------------------------
// Redis as a reliable work queue: <queue>:pending holds the items; a take is
// LMOVE pending -> processing (atomic, so a crashed client's item stays in
// processing for a reaper), a completion is LREM from processing.

struct RedisReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;
struct RedisContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using RedisContextPtr = std::unique_ptr<redisContext, RedisContextDeleter>;

absl::StatusOr<RedisContextPtr> RedisConnect(const std::string& host, int port) {
  const timeval timeout{5, 0};
  RedisContextPtr c(redisConnectWithTimeout(host.c_str(), port, timeout));
  if (c == nullptr) return absl::ResourceExhaustedError("redisConnect: out of memory");
  if (c->err != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to redis at ", host, ":", port, ": ", c->errstr));
  }
  return c;
}

// Runs one command given as arguments (binary safe); an error reply or a
// connection error is an error status.
absl::StatusOr<RedisReplyPtr> RedisCall(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<size_t> argvlen;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    argvlen.push_back(a.size());
  }
  RedisReplyPtr reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(args.size()), argv.data(), argvlen.data())));
  if (reply == nullptr) {
    return absl::UnavailableError(absl::StrCat("redis ", args[0], ": ", c->errstr));
  }
  if (reply->type == REDIS_REPLY_ERROR) {
    return absl::InternalError(absl::StrCat("redis ", args[0], ": ", reply->str));
  }
  return reply;
}

absl::StatusOr<int64_t> RedisInteger(redisContext* c, const std::vector<std::string>& args) {
  absl::StatusOr<RedisReplyPtr> reply = RedisCall(c, args);
  if (!reply.ok()) return reply.status();
  if ((*reply)->type != REDIS_REPLY_INTEGER) {
    return absl::InternalError(absl::StrCat("redis ", args[0], ": not an integer reply"));
  }
  return static_cast<int64_t>((*reply)->integer);
}

class RedisSession final : public ClientSession {
 public:
  explicit RedisSession(RedisContextPtr c) : c_(std::move(c)) {}

  absl::Status Take(const std::string& queue, std::vector<Taken>* out) override {
    out->clear();
    absl::StatusOr<RedisReplyPtr> reply =
        RedisCall(c_.get(), {"LMOVE", queue + ":pending", queue + ":processing", "LEFT", "RIGHT"});
    if (!reply.ok()) return reply.status();
    if ((*reply)->type == REDIS_REPLY_NIL) return absl::OkStatus();  // drained
    if ((*reply)->type != REDIS_REPLY_STRING) {
      return absl::InternalError("redis LMOVE: not a string reply");
    }
    Taken taken;
    taken.item.assign((*reply)->str, (*reply)->len);
    absl::StatusOr<int64_t> index = ItemIndex(taken.item);
    if (!index.ok()) return index.status();
    taken.index = *index;
    out->push_back(std::move(taken));
    return absl::OkStatus();
  }

  absl::Status Complete(const std::string& queue, const Taken& taken) override {
    absl::StatusOr<int64_t> removed =
        RedisInteger(c_.get(), {"LREM", queue + ":processing", "1", taken.item});
    if (!removed.ok()) return removed.status();
    if (*removed != 1) {
      return absl::InternalError(
          absl::StrCat("redis LREM of ", taken.item, " removed ", *removed, " entries"));
    }
    return absl::OkStatus();
  }

 private:
  RedisContextPtr c_;
};

class RedisSystem final : public System {
 public:
  static absl::StatusOr<std::unique_ptr<RedisSystem>> Create(const std::string& host, int port) {
    absl::StatusOr<RedisContextPtr> control = RedisConnect(host, port);
    if (!control.ok()) return control.status();
    return std::unique_ptr<RedisSystem>(new RedisSystem(host, port, *std::move(control)));
  }

  absl::Status CreateQueue(const std::string& queue, int64_t num_items) override {
    absl::StatusOr<int64_t> deleted =
        RedisInteger(control_.get(), {"DEL", queue + ":pending", queue + ":processing"});
    if (!deleted.ok()) return deleted.status();
    constexpr int64_t kPerPush = 1000;
    for (int64_t start = 0; start < num_items; start += kPerPush) {
      std::vector<std::string> args = {"RPUSH", queue + ":pending"};
      for (int64_t i = start; i < std::min(num_items, start + kPerPush); ++i) {
        args.push_back(ItemName(i));
      }
      absl::StatusOr<int64_t> length = RedisInteger(control_.get(), args);
      if (!length.ok()) return length.status();
    }
    absl::StatusOr<int64_t> length = RedisInteger(control_.get(), {"LLEN", queue + ":pending"});
    if (!length.ok()) return length.status();
    if (*length != num_items) {
      return absl::InternalError(absl::StrCat("redis list ", queue, ":pending holds ", *length,
                                              " items, expected ", num_items));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<ClientSession>> Connect(const std::string& worker) override {
    absl::StatusOr<RedisContextPtr> c = RedisConnect(host_, port_);
    if (!c.ok()) return c.status();
    return std::unique_ptr<ClientSession>(std::make_unique<RedisSession>(*std::move(c)));
  }

  absl::StatusOr<std::string> CheckDrained(const std::string& queue, int64_t num_items) override {
    absl::StatusOr<int64_t> pending = RedisInteger(control_.get(), {"LLEN", queue + ":pending"});
    if (!pending.ok()) return pending.status();
    absl::StatusOr<int64_t> processing =
        RedisInteger(control_.get(), {"LLEN", queue + ":processing"});
    if (!processing.ok()) return processing.status();
    const std::string seen =
        absl::StrFormat("redis: LLEN pending %d, LLEN processing %d", *pending, *processing);
    if (*pending != 0 || *processing != 0) {
      return absl::InternalError(absl::StrCat("redis queue '", queue, "' is not drained: ", seen));
    }
    return seen;
  }

  // "7.0.15", from INFO server.
  std::string Version() {
    absl::StatusOr<RedisReplyPtr> reply = RedisCall(control_.get(), {"INFO", "server"});
    if (!reply.ok() || (*reply)->type != REDIS_REPLY_STRING) {
      return "unknown";
    }
    for (absl::string_view line :
         absl::StrSplit(absl::string_view((*reply)->str, (*reply)->len), "\r\n")) {
      if (absl::ConsumePrefix(&line, "redis_version:")) return std::string(line);
    }
    return "unknown";
  }

 private:
  RedisSystem(std::string host, int port, RedisContextPtr control)
      : host_(std::move(host)), port_(port), control_(std::move(control)) {}

  const std::string host_;
  const int port_;
  RedisContextPtr control_;  // used by the main thread only
};

// ---------------------------------------------------------------------------
// The harness.

// Opens once every client is ready; then every waiter proceeds.
class StartGate {
 public:
  explicit StartGate(int parties) : waiting_for_(parties) {}

  // Called by each client thread when ready; returns when the gate opens.
  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (--waiting_for_ == 0) all_ready_.notify_all();
    opened_.wait(lock, [this] { return open_; });
  }
  void WaitUntilAllArrived() {
    std::unique_lock<std::mutex> lock(mu_);
    all_ready_.wait(lock, [this] { return waiting_for_ == 0; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    opened_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable all_ready_;
  std::condition_variable opened_;
  int waiting_for_;
  bool open_ = false;
};

// Takes and completes items of `queue` until it is drained. With `result`,
// records every take that leased something and every completion; without,
// it is a warm-up.
// A session's completion rides in the next take: that take's round trip is
// also the completion's latency.
absl::Status Drain(ClientSession& session, const std::string& queue, ClientResult* result) {
  std::vector<Taken> batch;
  bool completion_rides = false;
  while (true) {
    const SteadyClock::time_point start = SteadyClock::now();
    if (absl::Status s = session.Take(queue, &batch); !s.ok()) return s;
    const int64_t nanos = NanosSince(start);
    if (completion_rides && result != nullptr) result->complete_latency.Record(nanos);
    completion_rides = session.CompletesWithNextTake();
    if (batch.empty()) return absl::OkStatus();  // drained: not a lease, not timed
    if (result != nullptr) {
      result->take_latency.Record(nanos);
      ++result->takes;
    }
    for (const Taken& taken : batch) {
      const SteadyClock::time_point complete_start = SteadyClock::now();
      if (absl::Status s = session.Complete(queue, taken); !s.ok()) return s;
      if (result != nullptr) {
        if (!completion_rides) result->complete_latency.Record(NanosSince(complete_start));
        result->taken.push_back(taken.index);
        ++result->completed;
      }
    }
  }
}

// Runs one harness thread per client of `system` (Connect): each drains its
// share of `warmup_queue` (not measured), then all drain `queue` together on
// the clock into results[i]. Returns the seconds from the start gate until
// the last thread saw `queue` drained.
RowClock RunClientThreads(System& system, const std::string& label, int clients,
                        const std::string& warmup_queue, const std::string& queue,
                        std::vector<ClientResult>& results) {
  // Closed (a session stream half-closed and ended) after the clock stops.
  std::vector<std::unique_ptr<ClientSession>> sessions(clients);
  StartGate gate(clients);
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      ClientResult& result = results[i];
      absl::StatusOr<std::unique_ptr<ClientSession>> connected =
          system.Connect(absl::StrCat(label, "-c", clients, "-worker-", i));
      if (connected.ok()) {
        sessions[i] = *std::move(connected);
        result.status = sessions[i]->Open(warmup_queue);
        if (result.status.ok()) result.status = Drain(*sessions[i], warmup_queue, nullptr);
        if (result.status.ok()) result.status = sessions[i]->Open(queue);
      } else {
        result.status = connected.status();
      }
      gate.ArriveAndWait();
      if (result.status.ok()) result.status = Drain(*sessions[i], queue, &result);
    });
  }
  gate.WaitUntilAllArrived();
  const double cpu_start = throughput::ProcessCpuSeconds();
  const SteadyClock::time_point start = SteadyClock::now();
  gate.Open();
  for (std::thread& t : threads) t.join();
  RowClock clock;
  clock.seconds = static_cast<double>(NanosSince(start)) / 1e9;
  clock.client_cpu_seconds = throughput::ProcessCpuSeconds() - cpu_start;
  sessions.clear();
  return clock;
}

struct RowResult {
  int64_t items = 0;
  double seconds = 0;
  double client_cpu_seconds = 0;
  LatencyHistogram take_latency;
  LatencyHistogram complete_latency;
  int64_t takes = 0;
  std::string verification;
  double pairs_per_second() const { return static_cast<double>(items) / seconds; }
  double client_cpu_us_per_pair() const {
    return client_cpu_seconds * 1e6 / static_cast<double>(items);
  }
};

// Runs `clients` threads against `system`: each connects, drains its share
// of `warmup_queue` (not measured), then all drain `queue` together on the
// clock. Verifies that every item was taken and completed exactly once.
absl::StatusOr<RowResult> RunRow(System& system, const std::string& label, int clients,
                                 const std::string& warmup_queue, int64_t warmup_items,
                                 const std::string& queue, int64_t num_items) {
  if (absl::Status s = system.CreateQueue(warmup_queue, warmup_items); !s.ok()) return s;
  if (absl::Status s = system.CreateQueue(queue, num_items); !s.ok()) return s;

  std::vector<ClientResult> results(clients);
  for (ClientResult& result : results) result.taken.reserve(2 * num_items / clients + 16);
  RowClock clock;
  if (system.RunsOwnClients()) {
    absl::StatusOr<RowClock> ran =
        system.RunClients(RowClients{label, clients, warmup_queue, queue}, &results);
    if (!ran.ok()) return ran.status();
    clock = *ran;
  } else {
    clock = RunClientThreads(system, label, clients, warmup_queue, queue, results);
  }

  RowResult row;
  row.items = num_items;
  row.seconds = clock.seconds;
  row.client_cpu_seconds = clock.client_cpu_seconds;
  std::vector<int> times_taken(num_items, 0);
  int64_t completed = 0;
  for (int i = 0; i < clients; ++i) {
    const ClientResult& r = results[i];
    if (!r.status.ok()) {
      return absl::Status(r.status.code(),
                          absl::StrCat(label, " client ", i, ": ", r.status.message()));
    }
    row.take_latency.Merge(r.take_latency);
    row.complete_latency.Merge(r.complete_latency);
    row.takes += r.takes;
    completed += r.completed;
    for (int64_t index : r.taken) {
      if (index < 0 || index >= num_items) {
        return absl::InternalError(absl::StrCat(label, ": item index ", index, " out of range"));
      }
      ++times_taken[index];
    }
  }
  int64_t never = 0, repeated = 0;
  for (int n : times_taken) {
    never += n == 0;
    repeated += n > 1;
  }
  if (never != 0 || repeated != 0 || completed != num_items) {
    return absl::InternalError(absl::StrFormat(
        "%s, %d clients: %d items never taken, %d taken more than once, %d completions for %d "
        "items",
        label, clients, never, repeated, completed, num_items));
  }
  absl::StatusOr<std::string> server_side = system.CheckDrained(queue, num_items);
  if (!server_side.ok()) return server_side.status();
  row.verification = absl::StrFormat(
      "all %d items taken exactly once and completed exactly once (%d completions); %s",
      num_items, completed, *server_side);
  return row;
}

// ---------------------------------------------------------------------------

// Commits per second of a lone writer that appends one completion to a
// fresh Journal under `dir` and waits until it is durable, `commits` times
// (after 100 not measured). The journal is removed afterwards.
absl::StatusOr<double> ProbeLoneCommits(const std::string& dir, int commits,
                                        const std::string& run_id) {
  const std::filesystem::path path =
      std::filesystem::path(dir) / absl::StrCat("fsync-probe-", run_id);
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (!std::filesystem::create_directories(path, ec) || ec) {
    return absl::InternalError(absl::StrCat("--fsync-probe: cannot create '", path.string(),
                                            "': ", ec.message()));
  }
  double rate = 0;
  absl::Status status;
  {
    RecoveredState recovered;
    absl::StatusOr<std::unique_ptr<Journal>> journal = Journal::Open(path.string(), &recovered);
    if (!journal.ok()) {
      status = journal.status();
    } else {
      journal::Update update;
      update.mutable_complete()->set_worker("probe");
      absl::Time start;
      for (int i = -100; i < commits && status.ok(); ++i) {
        if (i == 0) start = absl::Now();
        update.set_time_us(absl::ToUnixMicros(absl::Now()));
        update.mutable_complete()->set_lease_id(static_cast<uint64_t>(i + 101));
        status = (*journal)->WaitDurable((*journal)->Append("probe", update));
      }
      rate = commits / absl::ToDoubleSeconds(absl::Now() - start);
    }
  }
  std::filesystem::remove_all(path, ec);
  if (!status.ok()) return status;
  return rate;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

struct Flags {
  std::string shardq_address;
  std::string durable_address;  // optional: a `shardq serve --state-dir`
  std::string etcd_address;     // optional: the leader of a `shardq serve --etcd` job
  std::string fsync_probe_dir;  // optional: where to measure lone commits
  int fsync_probe_commits = 2000;
  std::string redis_address = "127.0.0.1:6379";
  std::vector<int> clients = {1, 8, 32};
  std::vector<int64_t> items = {20000, 40000, 60000};
  int64_t warmup_items_per_client = 200;
  int64_t batch = 8;
  bool diagnose_connections = false;
  int repeats = 3;
  std::string session_driver = "cq";  // or "callback", "blocking"
  int session_channels = 4;                 // callback driver; 0: one per client
  bool session_connection_row = true;       // also the callback driver with channels 0
};

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view view(line);
    if (absl::ConsumePrefix(&view, "model name")) {
      const size_t colon = view.find(':');
      if (colon != absl::string_view::npos) {
        return std::string(absl::StripAsciiWhitespace(view.substr(colon + 1)));
      }
    }
  }
  return "unknown CPU";
}

std::string Micros(double us) {
  return us < 100 ? absl::StrFormat("%.1f", us) : absl::StrFormat("%.0f", us);
}

std::string LatencyCell(const LatencyHistogram& latency) {
  return absl::StrCat(Micros(latency.QuantileMicros(0.50)), " / ",
                      Micros(latency.QuantileMicros(0.99)));
}

// The repeats of one variant in one row.
struct Summary {
  std::vector<double> rates;  // pairs/s of each repeat
  LatencyHistogram take_latency;
  LatencyHistogram complete_latency;

  void Add(const RowResult& run) {
    rates.push_back(run.pairs_per_second());
    take_latency.Merge(run.take_latency);
    complete_latency.Merge(run.complete_latency);
  }
  double MedianRate() const { return Median(rates); }
};

// Where the coordinator a variant runs against keeps its state.
enum class Store { kMemory, kSqlite, kEtcd };

const char* StoreName(Store store) {
  switch (store) {
    case Store::kMemory:
      return "memory";
    case Store::kSqlite:
      return "SQLite";
    case Store::kEtcd:
      return "etcd";
  }
  return "?";
}

// One way of running the shardq side (or Redis) in every row.
struct Variant {
  std::string label;       // progress lines and queue names
  std::string table_name;  // the "shardq take" column; empty for Redis
  std::unique_ptr<System> system;
  Store store = Store::kMemory;  // durable ones get their own tables
};

// A durable variant and those it is read against in the durable table.
struct DurableRow {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  size_t memory;          // the in-memory variant of the same take kind
  size_t durable;         // this variant (SQLite or etcd store)
  size_t sqlite = kNone;  // for an etcd variant: the SQLite one of the same take kind
};

int Run(const Flags& flags) {
  if (flags.clients.size() != flags.items.size()) {
    std::fprintf(stderr, "--clients has %zu entries but --items has %zu\n", flags.clients.size(),
                 flags.items.size());
    return 2;
  }
  const size_t colon = flags.redis_address.rfind(':');
  int redis_port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(flags.redis_address.substr(colon + 1), &redis_port)) {
    std::fprintf(stderr, "--redis '%s' is not HOST:PORT\n", flags.redis_address.c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<RedisSystem>> redis =
      RedisSystem::Create(flags.redis_address.substr(0, colon), redis_port);
  if (!redis.ok()) {
    std::fprintf(stderr, "coordinator_throughput: %s\n", redis.status().ToString().c_str());
    return 1;
  }
  const std::string redis_version = (*redis)->Version();

  // Run order within a row: the session (shardq's like-for-like row),
  // Redis, then the unary shardq variants, then the durable server's.
  std::vector<Variant> variants;
  auto add_shardq = [&](std::string label, std::string table_name, int64_t batch,
                        bool own_connection, const std::string& address) -> absl::Status {
    absl::StatusOr<std::unique_ptr<ShardqSystem>> system =
        ShardqSystem::Create(address, batch, own_connection);
    if (!system.ok()) return system.status();
    variants.push_back({std::move(label), std::move(table_name), *std::move(system)});
    return absl::OkStatus();
  };
  // Session clients; queues made and checked by a unary system (batch 1).
  // `channels`: the callback driver's (0: one per client).
  auto add_session = [&](std::string label, const std::string& address, int channels,
                         std::string table_name = "session") -> absl::Status {
    absl::StatusOr<std::unique_ptr<ShardqSystem>> control = ShardqSystem::Create(address, 1);
    if (!control.ok()) return control.status();
    variants.push_back(
        {std::move(label), std::move(table_name),
         flags.session_driver == "blocking"
             ? throughput::NewBlockingSessionSystem(address, *std::move(control))
         : flags.session_driver == "cq"
             ? throughput::NewCompletionQueueSessionSystem(address, channels, *std::move(control))
             : throughput::NewCallbackSessionSystem(address, channels, *std::move(control))});
    return absl::OkStatus();
  };
  const std::string batched_name =
      absl::StrCat("batched, ≤", flags.batch, " items per take (shardq feature)");
  absl::Status added = add_session("session", flags.shardq_address, flags.session_channels);
  const size_t redis_variant = variants.size();
  variants.push_back({"redis", "", *std::move(redis)});
  const size_t unary_variant = variants.size();
  if (added.ok()) added = add_shardq("shardq", "1 item", 1, false, flags.shardq_address);
  const size_t batched_variant = variants.size();
  if (added.ok()) {
    added = add_shardq("shardq-batched", batched_name, flags.batch, false, flags.shardq_address);
  }
  // The same session clients with a TCP connection each, as Redis's have.
  if (added.ok() && flags.session_driver != "blocking" && flags.session_channels != 0 &&
      flags.session_connection_row) {
    added = add_session("session-conn", flags.shardq_address, 0,
                        "session, a TCP connection per client");
  }
  if (added.ok() && flags.diagnose_connections) {
    added = add_shardq("shardq-own-conn",
                       "1 item, own TCP connection per client (diagnostic, bare stub)", 1, true,
                       flags.shardq_address);
  }
  // The durable server's variants, interleaved with the others in every
  // repeat, each paired with the in-memory variant it is compared with.
  std::vector<DurableRow> durable_rows;
  size_t sqlite_session = DurableRow::kNone, sqlite_batched = DurableRow::kNone;
  // The variant just added runs against `store`, read against `memory`
  // (and `sqlite`) in the durable table; returns its index.
  auto mark_durable = [&](Store store, size_t memory, size_t sqlite) {
    variants.back().store = store;
    durable_rows.push_back({memory, variants.size() - 1, sqlite});
    return variants.size() - 1;
  };
  if (added.ok() && !flags.durable_address.empty()) {
    added = add_session("durable-session", flags.durable_address, flags.session_channels);
    if (added.ok()) sqlite_session = mark_durable(Store::kSqlite, 0, DurableRow::kNone);
  }
  if (added.ok() && !flags.durable_address.empty()) {
    added = add_shardq("durable", "1 item", 1, false, flags.durable_address);
    if (added.ok()) mark_durable(Store::kSqlite, unary_variant, DurableRow::kNone);
  }
  if (added.ok() && !flags.durable_address.empty()) {
    added = add_shardq("durable-batched", batched_name, flags.batch, false,
                       flags.durable_address);
    if (added.ok()) {
      sqlite_batched = mark_durable(Store::kSqlite, batched_variant, DurableRow::kNone);
    }
  }
  // The etcd store's: the session (like for like) and batched rows.
  if (added.ok() && !flags.etcd_address.empty()) {
    added = add_session("etcd-session", flags.etcd_address, flags.session_channels);
    if (added.ok()) mark_durable(Store::kEtcd, 0, sqlite_session);
  }
  if (added.ok() && !flags.etcd_address.empty()) {
    added = add_shardq("etcd-batched", batched_name, flags.batch, false, flags.etcd_address);
    if (added.ok()) mark_durable(Store::kEtcd, batched_variant, sqlite_batched);
  }
  if (!added.ok()) {
    std::fprintf(stderr, "coordinator_throughput: %s\n", added.ToString().c_str());
    return 1;
  }

  std::printf("coordinator_throughput: %u hardware threads (%s); shardq serve at %s, "
              "redis-server %s at %s%s%s%s%s\n",
              std::thread::hardware_concurrency(), CpuModel().c_str(),
              flags.shardq_address.c_str(), redis_version.c_str(), flags.redis_address.c_str(),
              flags.durable_address.empty() ? "" : "; shardq serve --state-dir at ",
              flags.durable_address.c_str(),
              flags.etcd_address.empty() ? "" : "; shardq serve --etcd (leader) at ",
              flags.etcd_address.c_str());
  const std::string session_clients =
      flags.session_driver == "blocking"
          ? std::string("its own thread, a blocking stream and its own connection")
      : flags.session_driver == "cq"
          ? absl::StrCat("a stream on one completion queue that one thread of the driver "
                         "drives for every client (gRPC's async API); ",
                         flags.session_channels == 0
                             ? std::string("its own connection")
                             : absl::StrCat("the clients share ", flags.session_channels,
                                            " TCP connections (client i on connection i mod ",
                                            flags.session_channels, ")",
                                            flags.session_connection_row
                                                ? "; the \"a TCP connection per client\" "
                                                  "line: one each"
                                                : ""))
      : flags.session_channels == 0
          ? std::string("a stream on gRPC's callback threads (no thread of its own), its own "
                        "connection")
          : absl::StrCat("a stream on gRPC's callback threads (no thread of its own); the "
                         "clients share ", flags.session_channels, " TCP connections (client i "
                         "on connection i mod ", flags.session_channels, ")",
                         flags.session_connection_row
                             ? "; the \"a TCP connection per client\" line: one each"
                             : "");
  std::printf("each client: take, complete, repeat until drained; %d warm-up items per client "
              "first (not measured). Redis and unary shardq clients: its own thread and "
              "connection; session clients (--session-driver %s): %s\n\n",
              static_cast<int>(flags.warmup_items_per_client), flags.session_driver.c_str(),
              session_clients.c_str());
  std::fflush(stdout);

  // summaries[row][variant]
  std::vector<std::vector<Summary>> summaries;
  // lone_commits[row]: --fsync-probe's commits/s, one per repeat
  std::vector<std::vector<double>> lone_commits(flags.clients.size());
  const std::string run_id = absl::StrCat(getpid(), "-", absl::ToUnixMillis(absl::Now()));
  for (size_t r = 0; r < flags.clients.size(); ++r) {
    const int clients = flags.clients[r];
    const int64_t items = flags.items[r];
    const int64_t warmup = flags.warmup_items_per_client * clients;
    summaries.emplace_back(variants.size());
    // Repeats interleave the systems, so a disturbance (another process
    // on the machine) hits them alike rather than one system's whole run.
    for (int rep = 0; rep < flags.repeats; ++rep) {
      for (size_t v = 0; v < variants.size(); ++v) {
        const Variant& variant = variants[v];
        const std::string queue =
            absl::StrCat("bench-", variant.label, "-c", clients, "-r", rep, "-", run_id);
        absl::StatusOr<RowResult> result = RunRow(*variant.system, variant.label, clients,
                                                  queue + "-warmup", warmup, queue, items);
        if (!result.ok()) {
          std::fprintf(stderr, "coordinator_throughput: FAILED: %s\n",
                       result.status().ToString().c_str());
          return 1;
        }
        std::printf("%-15s %2d clients, %6d items: %6.2f s, %8.0f pairs/s, %7d takes, "
                    "client CPU %.1f us/pair, take p50/p99 %s us, complete p50/p99 %s us\n"
                    "  verified: %s\n",
                    variant.label.c_str(), clients, static_cast<int>(items), result->seconds,
                    result->pairs_per_second(), static_cast<int>(result->takes),
                    result->client_cpu_us_per_pair(),
                    LatencyCell(result->take_latency).c_str(),
                    LatencyCell(result->complete_latency).c_str(),
                    result->verification.c_str());
        std::fflush(stdout);
        summaries[r][v].Add(*result);
      }
      if (!flags.fsync_probe_dir.empty()) {
        absl::StatusOr<double> probe =
            ProbeLoneCommits(flags.fsync_probe_dir, flags.fsync_probe_commits, run_id);
        if (!probe.ok()) {
          std::fprintf(stderr, "coordinator_throughput: FAILED: --fsync-probe: %s\n",
                       probe.status().ToString().c_str());
          return 1;
        }
        std::printf("fsync-probe     one journal commit per completion, alone: %8.0f commits/s "
                    "(%d commits in %s)\n",
                    *probe, flags.fsync_probe_commits, flags.fsync_probe_dir.c_str());
        std::fflush(stdout);
        lone_commits[r].push_back(*probe);
      }
    }
  }

  // The in-memory rows, then (with --shardq-durable) the durable rows, each
  // against the same Redis runs.
  for (const bool durable : {false, true}) {
    if (durable && durable_rows.empty()) break;
    if (durable) {
      std::printf("\nDurable (`shardq serve --state-dir`: SQLite store; `--etcd`: etcd store), "
                  "same run:\n");
    }
    std::printf("\n| clients | %sshardq take | items | shardq pairs/s | shardq take p50 / p99 "
                "(µs) | Redis pairs/s | Redis take p50 / p99 (µs) | shardq / Redis |\n",
                durable ? "store | " : "");
    std::printf("|--:|%s---|--:|--:|--:|--:|--:|--:|\n", durable ? "---|" : "");
    for (size_t r = 0; r < summaries.size(); ++r) {
      const Summary& redis_row = summaries[r][redis_variant];
      for (size_t v = 0; v < variants.size(); ++v) {
        if (v == redis_variant || (variants[v].store != Store::kMemory) != durable) continue;
        const Summary& s = summaries[r][v];
        const std::string store_cell =
            durable ? absl::StrCat(StoreName(variants[v].store), " | ") : "";
        std::printf("| %d | %s%s | %d | %.0f | %s | %.0f | %s | %.2f |\n", flags.clients[r],
                    store_cell.c_str(), variants[v].table_name.c_str(),
                    static_cast<int>(flags.items[r]),
                    s.MedianRate(), LatencyCell(s.take_latency).c_str(), redis_row.MedianRate(),
                    LatencyCell(redis_row.take_latency).c_str(),
                    s.MedianRate() / redis_row.MedianRate());
      }
    }
  }
  std::printf("\nA pair is one take and one completion of one item; pairs/s = items / wall time "
              "from the start gate until the queue is drained, the median of %d runs (latencies: "
              "all runs' takes). Redis: LMOVE pending -> "
              "processing, then LREM from processing, one item at a time; one Redis run per "
              "client count, repeated on every line of that count. The session line is the "
              "like-for-like comparison: one Session stream per client, one item in flight, the "
              "completion of the previous item and the next take in one request answered by one "
              "response (its take latency is that round trip). 1 item: unary Take, then "
              "Complete. Batched: up to %d items per take call (latency is per call), completed "
              "one by one. Session clients: %s.\n",
              flags.repeats, static_cast<int>(flags.batch), session_clients.c_str());
  if (!durable_rows.empty()) {
    const bool probed = !flags.fsync_probe_dir.empty();
    const bool with_etcd = !flags.etcd_address.empty();
    std::printf("\n## Durable (`shardq serve --state-dir`: SQLite; `--etcd`: etcd) vs in memory, "
                "interleaved in the same run\n\n| clients | store | shardq take | in-memory "
                "pairs/s | durable pairs/s | durable complete p50 / p99 (µs) | durable / "
                "in-memory |%s%s\n|--:|---|---|--:|--:|--:|--:|%s%s\n",
                with_etcd ? " etcd / SQLite |" : "",
                probed ? " one commit per completion, alone (/s) | durable completions / that |"
                       : "",
                with_etcd ? "--:|" : "", probed ? "--:|--:|" : "");
    for (size_t r = 0; r < summaries.size(); ++r) {
      for (const DurableRow& row : durable_rows) {
        const Summary& m = summaries[r][row.memory];
        const Summary& d = summaries[r][row.durable];
        const Store store = variants[row.durable].store;
        std::string etcd_cell;
        if (with_etcd) {
          etcd_cell = row.sqlite == DurableRow::kNone
                          ? " — |"
                          : absl::StrFormat(" %.2f |", d.MedianRate() /
                                                           summaries[r][row.sqlite].MedianRate());
        }
        // The lone writer is SQLite's journal: no reading for the etcd rows.
        std::string probe_cells;
        if (probed && store == Store::kSqlite) {
          const double lone = Median(lone_commits[r]);
          probe_cells = absl::StrFormat(" %.0f | %.2f |", lone, d.MedianRate() / lone);
        } else if (probed) {
          probe_cells = " — | — |";
        }
        std::printf("| %d | %s | %s | %.0f | %.0f | %s | %.2f |%s%s\n", flags.clients[r],
                    StoreName(store), variants[row.durable].table_name.c_str(), m.MedianRate(),
                    d.MedianRate(), LatencyCell(d.complete_latency).c_str(),
                    d.MedianRate() / m.MedianRate(), etcd_cell.c_str(), probe_cells.c_str());
      }
    }
    std::printf("\nDurable: every completion journaled and fsynced before it is answered "
                "(group commit); lease grants journaled in the same stream, written behind.\n");
    if (with_etcd) {
      std::printf("etcd store: every commit one etcd transaction guarded by the leader's term, "
                  "answered once the etcd cluster's quorum has it (each member fsyncs its WAL); "
                  "grants also wait for their commit. etcd / SQLite: against the SQLite row of "
                  "the same take kind and clients.\n");
    }
    if (probed && !flags.durable_address.empty()) {
      std::printf("One commit per completion, alone: --fsync-probe's lone writer (append one "
                  "completion, wait until durable, repeat) in the same run, median of one "
                  "probe per repeat of that row; group commit is what takes a durable server "
                  "above it.\n");
      // A lone client's completion cannot share its commit: the best a
      // durable server can do is an in-memory pair plus one lone commit.
      for (size_t r = 0; r < summaries.size(); ++r) {
        if (flags.clients[r] != 1) continue;
        const Summary& m = summaries[r][durable_rows.front().memory];
        const Summary& d = summaries[r][durable_rows.front().durable];
        const double lone = Median(lone_commits[r]);
        const double bound = 1 / (1 / m.MedianRate() + 1 / lone);
        std::printf("1 client, %s: nothing shares a lone client's commit, so durable pairs/s "
                    "is at most an in-memory pair plus one lone commit: %.0f pairs/s, %.2f of "
                    "in-memory; durable reached %.0f, %.2f of that bound.\n",
                    variants[durable_rows.front().durable].table_name.c_str(), bound,
                    bound / m.MedianRate(), d.MedianRate(), d.MedianRate() / bound);
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace shardq

int main(int argc, char** argv) {
  // As `shardq serve` (src/log/mutex_mode.h).
  shardq::UseProductionMutexMode();
  shardq::Flags flags;
  CLI::App app{"shardq coordinator vs Redis work queue: take+complete throughput and latency"};
  app.add_option("--shardq", flags.shardq_address, "HOST:PORT of a running `shardq serve`")
      ->required();
  app.add_option("--fsync-probe", flags.fsync_probe_dir,
                 "DIR on the durable server's filesystem: once per repeat, measure a lone "
                 "writer's journal commits/s there (one commit per completion) and read the "
                 "durable table against it");
  app.add_option("--fsync-probe-commits", flags.fsync_probe_commits,
                 "commits per --fsync-probe measurement")
      ->check(CLI::Range(100, 1000000));
  app.add_option("--shardq-durable", flags.durable_address,
                 "HOST:PORT of a running `shardq serve --state-dir`: adds its rows, "
                 "interleaved, and a durable / in-memory table");
  app.add_option("--shardq-etcd", flags.etcd_address,
                 "HOST:PORT of the leader of a `shardq serve --etcd` job: adds its session and "
                 "batched rows, interleaved, to the durable tables (etcd / SQLite)");
  app.add_option("--redis", flags.redis_address, "HOST:PORT of a running redis-server")
      ->capture_default_str();
  app.add_option("--clients", flags.clients, "concurrent clients per row")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--items", flags.items, "items per row (one per --clients entry)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--warmup-items", flags.warmup_items_per_client,
                 "warm-up items per client, drained before the clock starts")
      ->capture_default_str();
  app.add_option("--batch", flags.batch, "max items per take in the batched shardq variant")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--repeats", flags.repeats,
                 "runs of every row and system, interleaved; the table shows the median")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--session-driver", flags.session_driver,
                 "the session row's client: 'cq' (one thread a row drives every client's stream on "
                 "one completion queue, gRPC's async API), 'callback' (each client a stream on "
                 "gRPC's callback API, multiplexed on its threads) or 'blocking' (each client a "
                 "thread with a synchronous stream)")
      ->capture_default_str()
      ->check(CLI::IsMember({"callback", "blocking", "cq"}));
  app.add_option("--session-channels", flags.session_channels,
                 "cq and callback session drivers: channels (each its own TCP connection) per row, "
                 "client i on channel i mod N; 0: one per client")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  app.add_option("--session-connection-row", flags.session_connection_row,
                 "with the callback driver and --session-channels N > 0, also run the session "
                 "clients with a TCP connection per client (an in-memory row of its own)")
      ->capture_default_str();
  app.add_flag("--diagnose-connections", flags.diagnose_connections,
               "also run shardq through a bare gRPC stub with its own TCP connection per "
               "client (ConnectRemote's channels share one connection per process)");
  CLI11_PARSE(app, argc, argv);
  return shardq::Run(flags);
}
