// bench/pass_check: what one end-of-pass check of a starving torch
// DataLoader worker costs the coordinator at N workers: the PassOver RPC
// (the coordinator answers one bit from its index of holders without a
// session) against the Status RPC the check used before (the queue's full
// stats, one entry per worker, and the rule applied by the client).
//
// One `shardq` coordinator in this process on 127.0.0.1 (real gRPC), a
// queue of N items, N workers each holding one item through unary takes
// (no session: every holder is in the index, PassOver's worst case), and
// one asking worker of the same pass. Both checks must give the same
// answer; the program fails otherwise. Prints a markdown table.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "src/client/remote_backend.h"
#include "src/core/pass_rule.h"
#include "src/server/grpc_service.h"
#include "src/log/mutex_mode.h"

namespace shardq {
namespace {

struct Row {
  int64_t workers = 0;
  double stats_us = 0;
  double pass_over_us = 0;
  size_t stats_workers_listed = 0;
};

template <typename F>
double MicrosPerCall(int calls, F&& call) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) call();
  const auto took = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::micro>(took).count() / calls;
}

absl::StatusOr<Row> Measure(int64_t n, int calls) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  if (!server.ok()) return server.status();
  RemoteOptions remote;
  remote.address = absl::StrCat("127.0.0.1:", (*server)->port());
  absl::StatusOr<std::shared_ptr<QueueBackend>> backend = ConnectRemote(remote);
  if (!backend.ok()) return backend.status();
  QueueConfig config;
  config.name = "pass";
  for (int64_t i = 0; i < n; ++i) config.items.push_back(absl::StrCat("item-", i));
  config.shuffle = false;
  if (absl::Status s = (*backend)->CreateQueue(config).status(); !s.ok()) return s;
  for (int64_t i = 0; i < n; ++i) {
    absl::StatusOr<std::vector<WorkItem>> held = (*backend)->Take(
        "pass", absl::StrCat("pass/w", i), 1, absl::Now() + absl::Seconds(10));
    if (!held.ok()) return held.status();
    if (held->size() != 1) return absl::InternalError("a worker got no item");
  }
  const std::string self = "pass/asker";
  const std::string siblings = "pass/";
  Row row;
  row.workers = n;
  bool by_stats = false;
  bool by_pass_over = false;
  absl::Status failed;
  row.stats_us = MicrosPerCall(calls, [&] {
    absl::StatusOr<QueueStats> stats = (*backend)->Stats("pass");
    if (!stats.ok()) {
      failed = stats.status();
      return;
    }
    row.stats_workers_listed = stats->workers.size();
    by_stats = OnlySiblingsHoldTheRest(*stats, self, siblings);
  });
  row.pass_over_us = MicrosPerCall(calls, [&] {
    absl::StatusOr<bool> over = (*backend)->PassOver("pass", self, siblings);
    if (!over.ok()) {
      failed = over.status();
      return;
    }
    by_pass_over = *over;
  });
  if (!failed.ok()) return failed;
  if (!by_stats || !by_pass_over) {
    return absl::InternalError(absl::StrCat("N=", n, ": the pass should be over; Stats rule ",
                                            by_stats, ", PassOver ", by_pass_over));
  }
  (*server)->Shutdown();
  return row;
}

}  // namespace
}  // namespace shardq

int main(int argc, char** argv) {
  shardq::UseProductionMutexMode();  // as `shardq serve` (src/log/mutex_mode.h)
  CLI::App app{"bench/pass_check: PassOver vs the full Status at N workers"};
  std::string workers = "100,1000,10000";
  int calls = 200;
  app.add_option("--workers", workers, "comma-separated N")->capture_default_str();
  app.add_option("--calls", calls, "checks timed per RPC and N")->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  std::printf("| workers holding an item | Status + rule, µs per check | workers listed | "
              "PassOver, µs per check | Status / PassOver |\n|--:|--:|--:|--:|--:|\n");
  for (absl::string_view part : absl::StrSplit(workers, ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n <= 0) {
      std::fprintf(stderr, "--workers: '%s' is not a positive number\n", std::string(part).c_str());
      return 2;
    }
    absl::StatusOr<shardq::Row> row = shardq::Measure(n, calls);
    if (!row.ok()) {
      std::fprintf(stderr, "pass_check: %s\n", row.status().ToString().c_str());
      return 1;
    }
    std::printf("| %lld | %.0f | %zu | %.0f | %.1f |\n", static_cast<long long>(row->workers),
                row->stats_us, row->stats_workers_listed, row->pass_over_us,
                row->stats_us / row->pass_over_us);
    std::fflush(stdout);
  }
  return 0;
}
