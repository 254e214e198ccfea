// bench/scale: simulates N workers (default 10,000) against one real
// `shardq serve` on 127.0.0.1, multiplexed over a few dozen gRPC channels
// with the callback API, and reports per run: workers connected / dropped
// (with the session driver: sessions opened / dropped),
// completions/s sustained, take latency p50/p99/p999, the coordinator's CPU
// (cores) and RSS (peak, end) from /proc, then saturation runs (zero
// per-item time) in memory and with --state-dir. Every run ends with an
// exactly-once check (the coordinator's Status vs this program's count of
// completions per item); a mismatch fails the program (exit 1).
//
// Each run gets a fresh server (this program starts it, on a free port, and
// stops it by PID), so that RSS peaks and CPU belong to that run alone.
// --drivers picks the protocol (worker_driver.h): `session` (the default,
// one Session stream per worker) and/or `unary` (Take / Complete /
// Heartbeat RPCs); each run is repeated per driver.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/scale/server.h"
#include "bench/scale/simulation.h"
#include "bench/scale/worker_driver.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/shardq/coordinator.grpc.pb.h"
#include "src/log/mutex_mode.h"

namespace shardq::scale {
namespace {

namespace v1 = ::shardq::v1;

struct Flags {
  std::string shardq_bin;
  std::vector<int> workers = {100, 1000, 10000};
  std::vector<std::string> modes = {"sustained", "saturation", "durable"};
  std::vector<std::string> drivers = {"session"};
  int channels = 32;
  double mean_item_ms = 2000;
  double sigma = 0.75;
  double max_item_factor = 5;
  double duration_s = 20;
  int64_t items = 0;  // sustained runs; 0: workers x duration / mean
  int64_t saturation_items = 20000;
  int64_t heartbeat_ms = 1000;
  int64_t lease_timeout_ms = 30000;
  int64_t take_wait_ms = 5000;
  int timer_threads = 2;
  uint64_t seed = 1;
  double max_run_s = 600;
  std::string work_dir;
  std::string json_out;
  std::string load_note;
};

struct Row {
  int workers = 0;
  std::string driver;
  std::string mode;
  int64_t items = 0;
  SimulationResult sim;
  std::optional<StreamCounts> streams;  // session driver only
  double completions_per_s = 0;
  double p50_ms = 0, p99_ms = 0, p999_ms = 0;  // every take
  int64_t window_takes = 0;
  double window_p50_ms = 0, window_p99_ms = 0, window_p999_ms = 0;  // the steady window's
  double coord_cores = 0, gen_cores = 0;
  double rss_peak_mb = 0, rss_end_mb = 0;
  int64_t expired = 0, refused = 0;
  std::vector<std::string> problems;  // accounting mismatches
};

double Quantile(std::vector<int64_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return static_cast<double>(v[k]) / 1e6;
}

absl::Status CreateQueue(v1::Coordinator::Stub& stub, const std::string& queue, int64_t items,
                         int64_t lease_timeout_ms, uint64_t seed) {
  v1::CreateQueueRequest req;
  v1::QueueConfig* c = req.mutable_config();
  c->set_name(queue);
  for (int64_t i = 0; i < items; ++i) c->add_items(absl::StrCat("i", i));
  c->set_num_epochs(1);
  c->set_shuffle(true);
  c->set_seed(seed);
  c->set_seed_set(true);
  // num_clients bounds the items one worker holds at once: each simulated
  // worker holds one, as a worker with take-ahead 1 does.
  c->set_num_clients(1);
  c->set_lease_timeout_ms(lease_timeout_ms);
  // The items are names, not byte ranges: nothing to split, and no held
  // heartbeats waiting for proposals.
  c->set_split_disabled(true);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  v1::QueueInfo info;
  grpc::Status s = stub.CreateQueue(&ctx, req, &info);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("CreateQueue '", queue, "': ", s.error_message()));
  }
  if (!info.created()) return absl::AlreadyExistsError(absl::StrCat("queue '", queue, "' existed"));
  return absl::OkStatus();
}

absl::StatusOr<v1::QueueStatus> QueueStatusOf(v1::Coordinator::Stub& stub,
                                              const std::string& queue) {
  v1::StatusRequest req;
  req.set_queue(queue);
  v1::StatusResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::Status s = stub.Status(&ctx, req, &resp);
  if (!s.ok()) return absl::UnavailableError(absl::StrCat("Status: ", s.error_message()));
  if (resp.queues_size() != 1) {
    return absl::InternalError(absl::StrCat("Status of '", queue, "': ", resp.queues_size(),
                                            " queues"));
  }
  return resp.queues(0);
}

// Exactly-once: every item completed once by the generator's count and the
// coordinator's, the takes and duplicates seen alike on both sides.
std::vector<std::string> CheckAccounting(const Row& row, const v1::QueueStatus& q) {
  std::vector<std::string> problems;
  const SimulationResult& sim = row.sim;
  if (sim.timed_out) problems.push_back("the run did not finish within --max-run-s");
  int64_t missing = 0, repeated = 0;
  for (uint32_t n : sim.completed_per_item) {
    if (n == 0) ++missing;
    if (n > 1) ++repeated;
  }
  if (missing > 0) problems.push_back(absl::StrCat(missing, " item(s) never completed (generator)"));
  if (repeated > 0) {
    problems.push_back(absl::StrCat(repeated, " item(s) completed more than once (generator)"));
  }
  auto expect = [&](const char* what, int64_t coordinator, int64_t generator) {
    if (coordinator != generator) {
      problems.push_back(absl::StrCat(what, ": coordinator ", coordinator, ", generator ", generator));
    }
  };
  expect("completed", q.completed(), sim.completions);
  expect("completed vs items", q.completed(), row.items);
  expect("taken", q.taken(), sim.takes);
  expect("duplicates", q.duplicates(), sim.duplicates);
  expect("pending at end", q.pending(), 0);
  expect("leased at end", q.leased(), 0);
  if (!q.finished()) problems.push_back("the coordinator does not report the queue finished");
  return problems;
}

absl::StatusOr<std::unique_ptr<WorkerDriver>> NewDriver(const Flags& flags,
                                                        const std::string& driver,
                                                        const std::string& address,
                                                        const std::string& queue) {
  if (driver == "session") {
    SessionDriverOptions options;
    options.address = address;
    options.queue = queue;
    options.channels = flags.channels;
    options.take_wait_ms = flags.take_wait_ms;
    return NewSessionDriver(options);
  }
  UnaryDriverOptions options;
  options.address = address;
  options.queue = queue;
  options.channels = flags.channels;
  options.take_wait_ms = flags.take_wait_ms;
  options.heartbeat_wait_ms = std::min(flags.heartbeat_ms, flags.lease_timeout_ms / 3);
  return NewUnaryDriver(options);
}

absl::StatusOr<Row> RunOne(const Flags& flags, int workers, const std::string& driver_name,
                           const std::string& mode, int index) {
  Row row;
  row.workers = workers;
  row.driver = driver_name;
  row.mode = mode;
  const bool saturation = mode != "sustained";
  const double mean_ms = saturation ? 0 : flags.mean_item_ms;
  if (saturation) {
    row.items = std::max<int64_t>(flags.saturation_items, 5 * static_cast<int64_t>(workers));
  } else if (flags.items > 0) {
    row.items = flags.items;
  } else {
    row.items = std::max<int64_t>(
        workers, static_cast<int64_t>(workers * flags.duration_s * 1000 / flags.mean_item_ms));
  }
  const std::string tag = absl::StrCat(index, "-", driver_name, "-", mode, "-", workers);
  const std::string state_dir =
      mode == "durable" ? absl::StrCat(flags.work_dir, "/state-", tag) : "";
  absl::StatusOr<ServeProcess> server =
      ServeProcess::Start(flags.shardq_bin, flags.work_dir, state_dir,
                          absl::StrCat(flags.work_dir, "/serve-", tag, ".log"));
  if (!server.ok()) return server.status();
  const std::string queue = absl::StrCat("scale-", tag);
  auto control = v1::Coordinator::NewStub(grpc::CreateChannel(
      server->address(), grpc::InsecureChannelCredentials()));
  if (absl::Status s = CreateQueue(*control, queue, row.items, flags.lease_timeout_ms, flags.seed);
      !s.ok()) {
    return s;
  }

  absl::StatusOr<std::unique_ptr<WorkerDriver>> driver =
      NewDriver(flags, driver_name, server->address(), queue);
  if (!driver.ok()) return driver.status();

  SimulationOptions sim_options;
  sim_options.workers = workers;
  sim_options.num_items = row.items;
  sim_options.mean_item_ms = mean_ms;
  sim_options.sigma = flags.sigma;
  sim_options.max_item_factor = flags.max_item_factor;
  sim_options.heartbeat_ms = std::min(flags.heartbeat_ms, flags.lease_timeout_ms / 3);
  sim_options.ramp_ms = saturation ? 0 : static_cast<int64_t>(std::min(1000.0, mean_ms));
  sim_options.timer_threads = flags.timer_threads;
  sim_options.seed = flags.seed + static_cast<uint64_t>(index);
  sim_options.max_run_ms = static_cast<int64_t>(flags.max_run_s * 1000);

  // /proc at the steady window's edges, and around the whole run (used
  // when the window never opened: fewer items than a steady state needs).
  const pid_t pid = server->pid();
  std::mutex mu;
  ProcSample coord_open, coord_close, gen_open, gen_close;
  bool opened = false, closed = false;
  auto sample = [&](bool open) {
    absl::StatusOr<ProcSample> c = ReadProc(pid), g = ReadProc(0);
    std::lock_guard<std::mutex> lock(mu);
    if (!c.ok() || !g.ok()) return;
    if (open && !opened) {
      coord_open = *c, gen_open = *g, opened = true;
    } else if (!open && opened && !closed) {
      coord_close = *c, gen_close = *g, closed = true;
    }
  };
  absl::StatusOr<ProcSample> coord_before = ReadProc(pid), gen_before = ReadProc(0);
  row.sim = RunSimulation(**driver, sim_options, sample);
  absl::StatusOr<ProcSample> coord_after = ReadProc(pid), gen_after = ReadProc(0);
  // Every worker's stream ends OK after its end of input; give the last
  // ones a moment, then cancel any left (a timed-out run's).
  row.streams = (*driver)->CloseStreams(std::chrono::milliseconds(row.sim.timed_out ? 0 : 10000));

  double window_s = row.sim.window_end_s - row.sim.window_start_s;
  int64_t window_completions = row.sim.window_completions;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!(opened && closed)) {
      window_s = row.sim.run_seconds;
      window_completions = row.sim.completions;
      if (coord_before.ok() && coord_after.ok() && gen_before.ok() && gen_after.ok()) {
        coord_open = *coord_before, coord_close = *coord_after;
        gen_open = *gen_before, gen_close = *gen_after;
      }
    }
    if (window_s > 0) {
      row.completions_per_s = static_cast<double>(window_completions) / window_s;
      row.coord_cores = (coord_close.cpu_seconds - coord_open.cpu_seconds) / window_s;
      row.gen_cores = (gen_close.cpu_seconds - gen_open.cpu_seconds) / window_s;
    }
  }
  row.p50_ms = Quantile(row.sim.take_latency_ns, 0.50);
  row.p99_ms = Quantile(row.sim.take_latency_ns, 0.99);
  row.p999_ms = Quantile(row.sim.take_latency_ns, 0.999);
  {
    // The same over the steady window only (no ramp, no tail).
    std::vector<int64_t> window;
    for (size_t i = 0; i < row.sim.take_latency_ns.size(); ++i) {
      const double at = row.sim.take_answered_s[i];
      if (at >= row.sim.window_start_s && at <= row.sim.window_end_s) {
        window.push_back(row.sim.take_latency_ns[i]);
      }
    }
    row.window_takes = static_cast<int64_t>(window.size());
    row.window_p50_ms = Quantile(window, 0.50);
    row.window_p99_ms = Quantile(window, 0.99);
    row.window_p999_ms = Quantile(window, 0.999);
  }
  row.sim.take_latency_ns.clear();
  row.sim.take_answered_s.clear();

  absl::StatusOr<v1::QueueStatus> status = QueueStatusOf(*control, queue);
  if (absl::StatusOr<ProcSample> end = ReadProc(pid); end.ok()) {
    row.rss_end_mb = static_cast<double>(end->rss_bytes) / (1 << 20);
    row.rss_peak_mb = static_cast<double>(end->peak_rss_bytes) / (1 << 20);
  }
  if (!status.ok()) {
    row.problems.push_back(status.status().ToString());
  } else {
    row.expired = status->expired();
    row.refused = status->refused_completions();
    row.problems = CheckAccounting(row, *status);
  }
  const int exit_code = server->Stop();
  if (exit_code != 0) row.problems.push_back(absl::StrCat("shardq serve exited ", exit_code));
  if (!state_dir.empty()) std::filesystem::remove_all(state_dir);
  return row;
}

std::string ModeLabel(const std::string& mode) {
  if (mode == "sustained") return "sustained";
  if (mode == "saturation") return "saturation, in memory";
  return "saturation, --state-dir";
}

void PrintTable(const Flags& flags, const std::vector<Row>& rows) {
  std::printf(
      "\n| workers | driver | run | items | connected | dropped | sessions opened / dropped | "
      "RPC errors | completions/s | take p50 ms | take p99 ms | take p999 ms | "
      "coordinator CPU (cores) | coordinator RSS peak / end (MB) | generator CPU (cores) | "
      "expired leases | accounting |\n");
  std::printf(
      "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
  for (const Row& r : rows) {
    const std::string sessions =
        r.streams.has_value()
            ? absl::StrCat(r.streams->opened, " / ", r.streams->dropped)
            : std::string("–");
    std::printf("| %d | %s | %s | %lld | %d | %d | %s | %lld | %.0f | %.2f | %.2f | %.2f | %.2f | "
                "%.0f / %.0f | %.2f | %lld | %s |\n",
                r.workers, r.driver.c_str(), ModeLabel(r.mode).c_str(),
                static_cast<long long>(r.items), r.sim.workers_connected, r.sim.workers_dropped,
                sessions.c_str(),
                static_cast<long long>(r.sim.rpc_errors), r.completions_per_s, r.p50_ms, r.p99_ms,
                r.p999_ms, r.coord_cores, r.rss_peak_mb, r.rss_end_mb, r.gen_cores,
                static_cast<long long>(r.expired), r.problems.empty() ? "exact" : "MISMATCH");
  }
  std::printf("\nSustained: per-item time lognormal, mean %.0f ms, sigma %.2f, capped at %.0fx the "
              "mean; progress reported every %lld ms while an item is held (session: on the "
              "stream; unary: a Heartbeat); "
              "completions/s over the steady window (one mean after every worker started .. the "
              "last pending item handed out; the whole run when that window never opens); the "
              "coordinator's and the generator's CPU over the same window. Saturation: the same "
              "with zero per-item time. %d channels, seed %llu. Connected: workers with at least "
              "one answer; dropped: workers that gave up after repeated errors; sessions opened "
              "/ dropped: workers whose Session stream was answered `opened` / streams that "
              "ended with an error.\n",
              flags.mean_item_ms, flags.sigma, flags.max_item_factor,
              static_cast<long long>(flags.heartbeat_ms), flags.channels,
              static_cast<unsigned long long>(flags.seed));
  for (const Row& r : rows) {
    std::string calls;
    for (const auto& [name, n] : r.sim.calls) absl::StrAppend(&calls, " ", name, "=", n);
    std::string streams;
    if (r.streams.has_value()) {
      const StreamCounts& c = *r.streams;
      streams = absl::StrCat(", streams: opened ", c.opened, ", re-opened ", c.reopened,
                             ", ended OK ", c.ended_ok, ", dropped ", c.dropped,
                             ", cancelled at the end ", c.cancelled, ", lost leases pushed ",
                             c.lost_leases,
                             c.first_drop.empty() ? "" : absl::StrCat(" (first drop: ",
                                                                      c.first_drop, ")"));
    }
    std::printf("  N=%d %s %s: %.1f s (steady window %.1f..%.1f s: %lld takes, p50 / p99 / p999 "
                "%.2f / %.2f / %.2f ms), %s%s, empty takes %lld, progress reports %lld, lost "
                "leases %lld, refused completions %lld%s%s%s\n",
                r.workers, r.driver.c_str(), r.mode.c_str(), r.sim.run_seconds,
                r.sim.window_start_s, r.sim.window_end_s, static_cast<long long>(r.window_takes),
                r.window_p50_ms, r.window_p99_ms, r.window_p999_ms,
                r.streams.has_value() ? "messages" : "RPCs", calls.c_str(),
                static_cast<long long>(r.sim.empty_takes),
                static_cast<long long>(r.sim.progress_reports),
                static_cast<long long>(r.sim.lost_leases), static_cast<long long>(r.refused),
                streams.c_str(), r.sim.first_error.empty() ? "" : "; first error: ",
                r.sim.first_error.c_str());
  }
}

void WriteJson(const std::string& path, const Flags& flags, const std::vector<Row>& rows) {
  std::ofstream out(path);
  out << "{\"load\": \"" << flags.load_note << "\", \"rows\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out << absl::StrFormat(
        "  {\"workers\": %d, \"driver\": \"%s\", \"mode\": \"%s\", \"items\": %d, "
        "\"connected\": %d, \"dropped\": %d, \"sessions_opened\": %d, \"sessions_dropped\": %d, "
        "\"completions_per_s\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, "
        "\"window_p99_ms\": %.3f, "
        "\"coord_cores\": %.3f, \"rss_peak_mb\": %.1f, \"rss_end_mb\": %.1f, "
        "\"gen_cores\": %.3f, \"exact\": %s}%s\n",
        r.workers, r.driver, r.mode, r.items, r.sim.workers_connected, r.sim.workers_dropped,
        r.streams.has_value() ? r.streams->opened : 0,
        r.streams.has_value() ? r.streams->dropped : 0, r.completions_per_s, r.p50_ms, r.p99_ms,
        r.p999_ms, r.window_p99_ms, r.coord_cores, r.rss_peak_mb, r.rss_end_mb, r.gen_cores, r.problems.empty() ? "true" : "false",
        i + 1 < rows.size() ? "," : "");
  }
  out << "]}\n";
}

int Main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"bench/scale: N simulated workers against one shardq serve"};
  app.add_option("--shardq-bin", flags.shardq_bin, "the shardq command")->required();
  app.add_option("--workers", flags.workers, "simulated workers, one run each (comma list)")
      ->delimiter(',');
  app.add_option("--modes", flags.modes, "sustained, saturation (in memory), durable")
      ->delimiter(',')
      ->check(CLI::IsMember({"sustained", "saturation", "durable"}));
  app.add_option("--drivers", flags.drivers,
                 "session (one Session stream per worker) and/or unary (Take / Complete / "
                 "Heartbeat RPCs); every run once per driver")
      ->delimiter(',')
      ->check(CLI::IsMember({"session", "unary"}))
      ->capture_default_str();
  app.add_option("--channels", flags.channels, "gRPC channels the workers share");
  app.add_option("--mean-item-ms", flags.mean_item_ms, "mean per-item time (sustained)");
  app.add_option("--sigma", flags.sigma, "lognormal sigma of the per-item time");
  app.add_option("--max-item-factor", flags.max_item_factor, "per-item time cap, x the mean");
  app.add_option("--duration-s", flags.duration_s,
                 "sustained: items = workers x duration / mean");
  app.add_option("--items", flags.items, "sustained: the queue's items (overrides duration)");
  app.add_option("--saturation-items", flags.saturation_items,
                 "saturation: the queue's items (at least 5 x workers)");
  app.add_option("--heartbeat-ms", flags.heartbeat_ms,
                 "progress report interval while holding (unary: heartbeats)");
  app.add_option("--lease-timeout-ms", flags.lease_timeout_ms, "the queue's lease timeout");
  app.add_option("--take-wait-ms", flags.take_wait_ms, "Take long poll");
  app.add_option("--timer-threads", flags.timer_threads, "threads running the workers' timers");
  app.add_option("--seed", flags.seed, "seeds the per-item times and the queue's shuffle");
  app.add_option("--max-run-s", flags.max_run_s, "a run longer than this fails");
  app.add_option("--work-dir", flags.work_dir, "server logs and state dirs (default: a temp dir)");
  app.add_option("--json", flags.json_out, "also write the rows as JSON here (for plot.py)");
  app.add_option("--load-note", flags.load_note, "the machine's load, copied into the JSON");
  CLI11_PARSE(app, argc, argv);

  bool own_work_dir = false;
  if (flags.work_dir.empty()) {
    char tmpl[] = "/tmp/shardq-scale-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::fprintf(stderr, "scale_load: mkdtemp failed\n");
      return 1;
    }
    flags.work_dir = tmpl;
    own_work_dir = true;
  }
  std::vector<Row> rows;
  bool failed = false, dropped = false;
  int index = 0;
  for (int workers : flags.workers) {
    for (const std::string& driver : flags.drivers) {
      for (const std::string& mode : flags.modes) {
        const std::string what = absl::StrCat("N=", workers, " ", driver, " ", mode);
        std::fprintf(stderr, "scale_load: %s ...\n", what.c_str());
        absl::StatusOr<Row> row = RunOne(flags, workers, driver, mode, index++);
        if (!row.ok()) {
          std::fprintf(stderr, "scale_load: %s: %s (logs in %s)\n", what.c_str(),
                       row.status().ToString().c_str(), flags.work_dir.c_str());
          return 1;
        }
        if (!row->problems.empty()) {
          failed = true;
          std::fprintf(stderr, "scale_load: ACCOUNTING MISMATCH, %s:\n", what.c_str());
          for (const std::string& p : row->problems) std::fprintf(stderr, "  %s\n", p.c_str());
        }
        if (row->streams.has_value() && row->streams->dropped > 0) {
          dropped = true;
          std::fprintf(stderr, "scale_load: %s: %lld session stream(s) dropped, first: %s\n",
                       what.c_str(), static_cast<long long>(row->streams->dropped),
                       row->streams->first_drop.c_str());
        }
        std::fprintf(stderr, "scale_load: %s: %.0f completions/s, accounting %s\n", what.c_str(),
                     row->completions_per_s, row->problems.empty() ? "exact" : "WRONG");
        rows.push_back(*std::move(row));
      }
    }
  }
  PrintTable(flags, rows);
  if (!flags.json_out.empty()) WriteJson(flags.json_out, flags, rows);
  if (own_work_dir && !failed && !dropped) std::filesystem::remove_all(flags.work_dir);
  if (failed || dropped) {
    std::fprintf(stderr, "scale_load: FAILED: %s (logs in %s)\n",
                 failed ? "exactly-once accounting did not hold" : "session streams were dropped",
                 flags.work_dir.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace shardq::scale

int main(int argc, char** argv) {
  // As `shardq serve` (src/log/mutex_mode.h).
  shardq::UseProductionMutexMode();
  return shardq::scale::Main(argc, argv);
}
