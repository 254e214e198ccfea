// `shardq create`, `shardq take`, `shardq status`.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "shardq/work_queue.h"
#include "src/client/planner.h"
#include "src/core/queue_state.h"  // kMaxAttemptsLimit
#include "src/observe/status_json.h"
#include "tools/client_flags.h"
#include "tools/verbs.h"

namespace shardq {

CLI::App* AddCreate(CLI::App& app, CreateOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "create", "Create a queue (or attach to an identical one); prints its item count and seed");
  AddClientFlags(cmd, &o->client, /*with_worker=*/false);
  cmd->add_option("--epochs", o->epochs, "times every item is handed out")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--seed", o->seed, "shuffle seed (default: the coordinator draws one)");
  cmd->add_flag("--no-shuffle", o->no_shuffle, "keep the plan order in every epoch");
  cmd->add_option("--slices", o->slices, "total slices to cut the works into (default: one per work)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prefix", o->prefix, "string put before every work name");
  cmd->add_option("--lease-timeout", o->lease_timeout_seconds,
                  "seconds a taken item stays leased without a heartbeat")
      ->check(CLI::Range(0.01, 86400.0))->capture_default_str();
  cmd->add_option("--num-clients", o->num_clients, "items one worker may hold at once")
      ->check(CLI::PositiveNumber)->capture_default_str();
  CLI::Option* no_split = cmd->add_flag(
      "--no-split", o->no_split,
      "never split an item a worker still reads when others run out of work");
  cmd->add_option("--split-min-residual", o->split_min_residual,
                  "smallest range split off an item: bytes for files, rows for tables")
      ->check(CLI::PositiveNumber)
      ->capture_default_str()
      ->excludes(no_split);
  cmd->add_option("--max-attempts", o->max_attempts,
                  "failed attempts (a worker command's non-zero exit) after which an item "
                  "is set aside as failed")
      ->check(CLI::Range(int64_t{1}, kMaxAttemptsLimit))
      ->capture_default_str();
  cmd->add_option("works", o->works,
                  "what to hand out: files, s3://BUCKET/KEY objects, s3:// patterns or "
                  "prefixes/, or table URIs")
      ->required();
  return cmd;
}

int RunCreate(const CreateOptions& o) {
  absl::StatusOr<ConnectedBackend> connected = ConnectFromFlags(o.client);
  if (!connected.ok()) return ReportError("create", connected.status());
  absl::StatusOr<std::vector<std::string>> items = PlanWorks(o.works, o.prefix, o.slices);
  if (!items.ok()) return ReportError("create", items.status());
  QueueConfig config;
  config.name = o.client.name;
  config.items = *std::move(items);
  config.num_epochs = o.epochs;
  config.shuffle = !o.no_shuffle;
  config.seed = o.seed;
  config.num_clients = o.num_clients;
  config.lease_timeout = absl::Seconds(o.lease_timeout_seconds);
  config.split = !o.no_split;
  config.split_min_residual = o.split_min_residual;
  config.max_attempts = o.max_attempts;
  absl::StatusOr<QueueInfo> info = connected->backend->CreateQueue(config);
  if (!info.ok()) return ReportError("create", info.status());
  std::printf("queue=%s items=%lld epochs=%lld seed=%llu %s\n", info->name.c_str(),
              static_cast<long long>(info->num_items),
              static_cast<long long>(info->num_epochs),
              static_cast<unsigned long long>(info->seed),
              info->created ? "created" : "attached");
  return 0;
}

CLI::App* AddTake(CLI::App& app, ClientFlags* o) {
  CLI::App* cmd = app.add_subcommand(
      "take", "Lease one item and print it (exit 3 at end of input). The lease "
              "stays with --worker until it expires");
  AddClientFlags(cmd, o, /*with_worker=*/true);
  // One item unless asked for more: a script reads one line.
  o->take_ahead = 0;
  cmd->add_option("--take-ahead", o->take_ahead,
                  "also lease up to this many more items in the same request and print "
                  "them too, one per line")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  return cmd;
}

int RunTake(const ClientFlags& o) {
  absl::StatusOr<ConnectedBackend> connected = ConnectFromFlags(o);
  if (!connected.ok()) return ReportError("take", connected.status());
  const std::string worker =
      connected->worker_id.empty() ? absl::StrCat("take-", ::getpid()) : connected->worker_id;
  // Over a session where the coordinator has them; the leases outlive it
  // (until they expire), as with a unary take.
  absl::StatusOr<bool> session = connected->backend->BeginSession(o.name, worker, nullptr);
  if (!session.ok()) return ReportError("take", session.status());
  while (true) {
    absl::StatusOr<std::vector<WorkItem>> items = connected->backend->Take(
        o.name, worker, 1 + o.take_ahead, absl::Now() + absl::Seconds(10),
        std::min<int64_t>(o.take_ahead, kMaxTakeAhead));
    if (absl::IsOutOfRange(items.status())) return kExitEndOfInput;
    if (!items.ok()) return ReportError("take", items.status());
    if (items->empty()) continue;  // held elsewhere: wait on
    for (const WorkItem& item : *items) {
      std::printf("%s\n", item.item.c_str());
      std::fprintf(stderr, "worker=%s epoch=%lld lease=%llu\n", worker.c_str(),
                   static_cast<long long>(item.epoch),
                   static_cast<unsigned long long>(item.lease_id));
    }
    std::fflush(stdout);
    if (*session) connected->backend->EndSession(o.name, worker);
    return 0;
  }
}

CLI::App* AddStatus(CLI::App& app, StatusOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "status", "Per queue: items, epochs, pending, leased, completed, expired, "
                "duplicates, splits, seed; per worker: completed and items/s");
  cmd->add_option("--address", o->client.address, "coordinator HOST:PORT");
  cmd->add_option("--name", o->client.name, "only this queue (default: every queue)");
  cmd->add_option("--token-file", o->client.token_file, "file holding the token");
  cmd->add_option("--tls-ca", o->client.tls_ca, "PEM CA certificate: connect with TLS");
  CLI::Option* json = cmd->add_flag("--json", o->json, "print JSON (keys in docs/cli.md)");
  cmd->add_flag("--failed", o->failed,
                "also list the items set aside as failed (item, epoch, attempts, last reason)");
  cmd->add_flag("--watch", o->watch,
                "redraw with progress bars until every shown queue is finished")
      ->excludes(json);
  cmd->add_option("--interval", o->watch_interval_seconds, "seconds between redraws (--watch)")
      ->check(CLI::Range(0.05, 3600.0))->capture_default_str();
  // The default name "work_queue" would hide other queues: status means all.
  o->client.name.clear();
  return cmd;
}

namespace {

void PrintText(const QueueStats& s, bool list_failed) {
  const std::string finished =
      !s.finished ? ""
      : s.failed > 0 ? absl::StrCat(", finished with ", s.failed, " failed item(s)")
                     : std::string(", finished");
  std::printf("queue %s: %lld items x %lld epochs, seed %llu%s\n", s.name.c_str(),
              static_cast<long long>(s.num_items), static_cast<long long>(s.num_epochs),
              static_cast<unsigned long long>(s.seed), finished.c_str());
  std::printf("  pending %lld  leased %lld  completed %lld  taken %lld  expired %lld  "
              "released %lld  duplicates %lld  splits %lld (%lld open)\n",
              static_cast<long long>(s.pending), static_cast<long long>(s.leased),
              static_cast<long long>(s.completed), static_cast<long long>(s.taken),
              static_cast<long long>(s.expired), static_cast<long long>(s.released),
              static_cast<long long>(s.duplicates), static_cast<long long>(s.splits),
              static_cast<long long>(s.split_items_open));
  std::printf("  failed %lld (set aside after %lld failed attempts)  refused completions %lld  "
              "epochs done %lld of %lld\n",
              static_cast<long long>(s.failed), static_cast<long long>(s.max_attempts),
              static_cast<long long>(s.refused_completions),
              static_cast<long long>(s.epochs_done), static_cast<long long>(s.num_epochs));
  for (const EpochStats& e : s.epochs) {
    const int width = 30;
    const int filled =
        s.num_items > 0 ? static_cast<int>(width * e.completed / s.num_items) : 0;
    std::printf("  epoch %lld [%s%s] pending %lld  leased %lld  completed %lld%s\n",
                static_cast<long long>(e.epoch), std::string(filled, '#').c_str(),
                std::string(width - filled, ' ').c_str(), static_cast<long long>(e.pending),
                static_cast<long long>(e.leased), static_cast<long long>(e.completed),
                e.failed > 0 ? absl::StrCat("  failed ", e.failed).c_str() : "");
  }
  if (list_failed) {
    for (const FailedItemStats& f : s.failed_items) {
      std::printf("  failed item %s  epoch %lld  attempts %lld  last reason: %s\n",
                  f.item.c_str(), static_cast<long long>(f.epoch),
                  static_cast<long long>(f.attempts), f.reason.c_str());
    }
    if (s.failed > static_cast<int64_t>(s.failed_items.size())) {
      std::printf("  ... and %lld more failed item(s)\n",
                  static_cast<long long>(s.failed - static_cast<int64_t>(s.failed_items.size())));
    }
  }
  std::vector<double> rates;
  for (const auto& [name, w] : s.workers) rates.push_back(w.items_per_second);
  std::sort(rates.begin(), rates.end());
  const double median = rates.empty() ? 0 : rates[rates.size() / 2];
  for (const auto& [name, w] : s.workers) {
    const bool slow = median > 0 && w.items_per_second < 0.5 * median;
    std::printf("  worker %-24s completed %6lld  held %3lld  %.2f items/s%s\n", name.c_str(),
                static_cast<long long>(w.completed), static_cast<long long>(w.held),
                w.items_per_second, slow ? "  <- straggler (< 0.5x median)" : "");
  }
}

// Fetches the queues the flags name.
absl::StatusOr<std::vector<QueueStats>> Fetch(QueueBackend& backend, const std::string& name) {
  if (name.empty()) return backend.AllStats();
  absl::StatusOr<QueueStats> one = backend.Stats(name);
  if (!one.ok()) return one.status();
  return std::vector<QueueStats>{*std::move(one)};
}

}  // namespace

int RunStatus(const StatusOptions& o) {
  absl::StatusOr<ConnectedBackend> connected = ConnectFromFlags(o.client);
  if (!connected.ok()) return ReportError("status", connected.status());
  if (o.watch) {
    // Redraw every interval until every shown queue is finished (or ^C).
    const bool tty = ::isatty(STDOUT_FILENO) != 0;
    while (true) {
      absl::StatusOr<std::vector<QueueStats>> queues = Fetch(*connected->backend, o.client.name);
      if (!queues.ok()) return ReportError("status", queues.status());
      if (tty) std::printf("\033[H\033[2J");
      bool all_finished = !queues->empty();
      for (const QueueStats& s : *queues) {
        PrintText(s, o.failed);
        all_finished = all_finished && s.finished;
      }
      if (queues->empty()) std::printf("no queues\n");
      std::fflush(stdout);
      if (all_finished) return 0;
      absl::SleepFor(absl::Seconds(o.watch_interval_seconds));
    }
  }
  absl::StatusOr<std::vector<QueueStats>> fetched = Fetch(*connected->backend, o.client.name);
  if (!fetched.ok()) return ReportError("status", fetched.status());
  std::vector<QueueStats> queues = *std::move(fetched);
  if (o.json) {
    nlohmann::json out = StatusJson(queues);
    if (std::optional<Leadership> l = connected->backend->LastLeadership()) {
      out["leadership"] = {{"job", l->job},
                           {"leader", l->leader},
                           {"term", l->term},
                           {"standbys", l->standbys},
                           {"failovers", l->failovers}};
      // The three a reader looks for first, at the top level as well.
      out["leader"] = l->leader;
      out["standbys"] = l->standbys;
      out["term"] = l->term;
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  if (queues.empty()) std::printf("no queues\n");
  for (const QueueStats& s : queues) PrintText(s, o.failed);
  return 0;
}

}  // namespace shardq
