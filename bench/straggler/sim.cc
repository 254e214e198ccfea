// straggler_sim: a discrete-event simulation of one epoch read by N workers
// of different speeds, driving the REAL shardq::QueueState (shardq_core)
// with a virtual clock. Static sharding needs no queue and is computed
// directly; every queue mode creates a QueueState from a real slice plan
// (PlanSlices) and replays the workers' takes and completions against it.
//
// Each worker: take (costs one request round trip of --take-latency-ms,
// during which it idles), read the item for size x record time x slowdown,
// complete, repeat. A min-heap of worker finish events drives it, so a run
// costs O(takes log N). A worker told "wait" (everything left is held by
// others) is parked and retried after a later completion; "end of input"
// retires it. The epoch's makespan is the time of the last completion.
//
// Each configuration runs in a forked child, so that its memory is measured
// from a clean baseline: heap bytes in use (mallinfo2) and resident set
// (/proc/self/statm) after the simulation's own bookkeeping is allocated
// and before the coordinator's slice plan is made; then their peak growth
// over the run (plan strings + QueueState with its N leases and worker
// records), sampled after creation, after the first N takes and every 1/8
// of the takes.
//
// Leases never expire here: the simulation sends no heartbeats (the real
// client renews every lease_timeout/3; their rate is reported, not
// simulated). One epoch, no failures.
//
//   straggler_sim --workers 1000,10000 --csv out.csv   # markdown on stdout
//   straggler_sim --print-slowdowns --model lognormal --workers 16
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "bench/straggler/speed_model.h"
#include "shardq/slice.h"
#include "absl/container/flat_hash_map.h"
#include "src/core/queue_state.h"
#include "src/core/slice_plan.h"

namespace shardq::straggler {
namespace {

struct SimOptions {
  std::vector<int64_t> workers = {1000, 10000};
  std::vector<std::string> models = {"uniform", "two-slow", "lognormal"};
  std::vector<std::string> modes = {"static", "slices-10n", "slices-50n", "slices-100n",
                                    "split-10n"};
  // Split mode: how often a worker's heartbeat reports progress and picks
  // up a split proposal (the client's default heartbeat interval).
  double heartbeat_s = 1.0;
  // 3.6 M records per worker at 1 ms per record: a one-hour ideal epoch for
  // a 1x worker (the ratio to ideal does not depend on it; rates do).
  int64_t records_per_worker = 3'600'000;
  double record_ms = 1.0;
  double take_latency_ms = 1.0;
  int64_t files_per_worker = 1;
  double lease_timeout_s = 30;  // only for the heartbeat rate
  double sigma = 0.3;
  uint64_t seed = 1;
  int jobs = 2;
  std::string csv;
  bool print_slowdowns = false;
  std::string model = "lognormal";  // for --print-slowdowns
};

struct Config {
  int64_t workers = 0;
  std::string model;
  std::string mode;
  int64_t slices_per_worker = 0;  // 0: static sharding
  bool split = false;             // tail rebalancing on
};

struct SimResult {
  double ideal_s = 0;
  double makespan_s = 0;
  int64_t slices = 0;
  int64_t takes = 0;
  int64_t peak_takes_per_s = 0;  // most takes in any one-second window
  int64_t min_items = 0;
  int64_t max_items = 0;
  int64_t slowest_worker_items = 0;  // items of the worker with the largest slowdown
  int64_t splits = 0;
  double heap_mib = 0;
  double rss_mib = 0;
  double wall_s = 0;
  std::string error;
};

// Bytes of heap in use (small chunks + mmapped large ones).
int64_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

class MemoryPeak {
 public:
  MemoryPeak() : heap0_(HeapInUse()), rss0_(ResidentBytes()) {}
  void Sample() {
    heap_ = std::max(heap_, HeapInUse() - heap0_);
    rss_ = std::max(rss_, ResidentBytes() - rss0_);
  }
  double heap_mib() const { return heap_ / 1048576.0; }
  double rss_mib() const { return rss_ / 1048576.0; }

 private:
  const int64_t heap0_;
  const int64_t rss0_;
  int64_t heap_ = 0;
  int64_t rss_ = 0;
};

absl::StatusOr<int64_t> SlicesPerWorker(const std::string& mode) {
  if (mode == "static") return 0;
  int64_t k = 0;
  for (absl::string_view prefix : {"slices-", "split-"}) {
    if (absl::StartsWith(mode, prefix) && absl::EndsWith(mode, "n") &&
        absl::SimpleAtoi(mode.substr(prefix.size(), mode.size() - prefix.size() - 1), &k) &&
        k > 0) {
      return k;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown mode '", mode,
      "' (expected static, slices-<k>n or split-<k>n, e.g. slices-10n)"));
}

// The works of the simulated data set: files_per_worker * N equal files,
// sized in records (as a table's rows), named like a real data set's.
std::vector<SizedWork> MakeWorks(const SimOptions& o, int64_t num_workers) {
  const int64_t files = o.files_per_worker * num_workers;
  const int64_t records_per_file = o.records_per_worker / o.files_per_worker;
  std::vector<SizedWork> works;
  works.reserve(static_cast<size_t>(files));
  for (int64_t f = 0; f < files; ++f) {
    works.push_back({absl::StrFormat("/mnt/data/train/part-%06d-of-%06d.txt", f, files),
                     records_per_file});
  }
  return works;
}

int64_t AllocateSlicesTotal(const std::vector<SizedWork>& works, int64_t num_slices) {
  int64_t total = 0;
  for (int64_t k : AllocateSlices(works, num_slices)) total += k;
  return total;
}

double IdealSeconds(const SimOptions& o, const std::vector<double>& slowdowns,
                    int64_t total_records) {
  double speed_sum = 0;
  for (double s : slowdowns) speed_sum += 1.0 / s;
  return total_records * o.record_ms * 1e-3 / speed_sum;
}

// Static sharding: worker w reads files w, w+N, w+2N, ... with no queue.
SimResult RunStatic(const SimOptions& o, const Config& c,
                    const std::vector<double>& slowdowns) {
  SimResult r;
  const std::vector<SizedWork> works = MakeWorks(o, c.workers);
  std::vector<int64_t> share(static_cast<size_t>(c.workers), 0);
  std::vector<int64_t> items(static_cast<size_t>(c.workers), 0);
  int64_t total = 0;
  for (size_t f = 0; f < works.size(); ++f) {
    share[f % c.workers] += works[f].size;
    ++items[f % c.workers];
    total += works[f].size;
  }
  for (int64_t w = 0; w < c.workers; ++w) {
    r.makespan_s = std::max(r.makespan_s, share[w] * o.record_ms * 1e-3 * slowdowns[w]);
  }
  r.ideal_s = IdealSeconds(o, slowdowns, total);
  r.min_items = *std::min_element(items.begin(), items.end());
  r.max_items = *std::max_element(items.begin(), items.end());
  r.slowest_worker_items =
      items[std::max_element(slowdowns.begin(), slowdowns.end()) - slowdowns.begin()];
  return r;
}

struct Event {
  enum Kind : int8_t { kFinish, kProgress, kAnswer };
  int64_t t_ns;
  int32_t worker;
  Kind kind = kFinish;
  int64_t version = 0;   // the worker's reading this event belongs to
  uint64_t lease = 0;    // kAnswer: the lease a split was proposed for
  int32_t asker = -1;    // kAnswer: the worker that asked for the split
  bool operator>(const Event& other) const {
    return t_ns != other.t_ns ? t_ns > other.t_ns : worker > other.worker;
  }
};

// What a worker is reading: records [start, end) from t0 on, one record per
// ns_per_record.
struct Reading {
  int64_t start = 0;
  int64_t end = 0;
  int64_t t0_ns = 0;
  double ns_per_record = 0;
  int64_t version = 0;  // bumped when the reading starts or its end moves
  int64_t FinishNs() const {
    return t0_ns + static_cast<int64_t>(static_cast<double>(end - start) * ns_per_record);
  }
  // Records begun by time t (the one being read is claimed).
  int64_t Claimed(int64_t t_ns) const {
    if (t_ns <= t0_ns) return 0;
    return std::min(end - start,
                    static_cast<int64_t>(static_cast<double>(t_ns - t0_ns) / ns_per_record) + 1);
  }
};

SimResult RunQueue(const SimOptions& o, const Config& c,
                   const std::vector<double>& slowdowns) {
  SimResult r;
  const std::vector<SizedWork> works = MakeWorks(o, c.workers);
  int64_t total_records = 0;
  for (const SizedWork& w : works) total_records += w.size;
  const int64_t num_slices = c.slices_per_worker * c.workers;
  // The simulation's own bookkeeping is allocated before the memory
  // baseline, so that the measured growth is the coordinator's: the plan's
  // item strings and the QueueState.
  r.slices = static_cast<int64_t>(AllocateSlicesTotal(works, num_slices));
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(c.workers));
  for (int64_t w = 0; w < c.workers; ++w) names.push_back(absl::StrCat("worker-", w));
  std::vector<Event> event_storage;
  event_storage.reserve(static_cast<size_t>(c.workers) + 1);
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events(
      std::greater<Event>(), std::move(event_storage));
  std::vector<uint64_t> lease(static_cast<size_t>(c.workers), 0);
  std::vector<Reading> reading(static_cast<size_t>(c.workers));
  absl::flat_hash_map<uint64_t, int32_t> holder;  // lease -> worker (split mode)
  std::vector<char> is_parked(static_cast<size_t>(c.workers), 0);
  std::vector<int64_t> items(static_cast<size_t>(c.workers), 0);
  std::vector<int32_t> parked;
  parked.reserve(static_cast<size_t>(c.workers));
  std::vector<int64_t> take_times_ns;
  take_times_ns.reserve(static_cast<size_t>(r.slices));

  MemoryPeak memory;
  absl::StatusOr<std::vector<std::string>> plan = PlanSlices(works, num_slices);
  if (!plan.ok()) {
    r.error = plan.status().ToString();
    return r;
  }
  r.slices = static_cast<int64_t>(plan->size());

  QueueConfig config;
  config.name = absl::StrCat("sim-", c.workers, "-", c.model, "-", c.mode);
  config.items = *std::move(plan);
  config.seed = o.seed;
  config.shuffle = true;
  config.split = c.split;
  config.split_min_residual = 1;
  // No heartbeats are simulated, so leases must outlive the epoch.
  config.lease_timeout = absl::Hours(24 * 365);
  absl::StatusOr<std::unique_ptr<QueueState>> state = QueueState::Create(std::move(config));
  if (!state.ok()) {
    r.error = state.status().ToString();
    return r;
  }
  memory.Sample();

  const absl::Time epoch_start = absl::FromUnixSeconds(1'700'000'000);
  const double record_ns = o.record_ms * 1e6;
  const int64_t latency_ns = static_cast<int64_t>(o.take_latency_ms * 1e6);
  const int64_t heartbeat_ns = static_cast<int64_t>(o.heartbeat_s * 1e9);
  auto at = [&](int64_t t_ns) { return epoch_start + absl::Nanoseconds(t_ns); };
  int64_t last_completion_ns = 0;
  const int64_t sample_every = std::max<int64_t>(1, r.slices / 8);

  // Leases the next item to `w` at time t; false on an error (in r.error).
  auto take = [&](int32_t w, int64_t t_ns) {
    absl::StatusOr<TakeResult> taken =
        (*state)->Take(names[w], epoch_start + absl::Nanoseconds(t_ns));
    if (!taken.ok()) {
      r.error = taken.status().ToString();
      return false;
    }
    if (taken->outcome == TakeOutcome::kItem) {
      lease[w] = taken->item.lease_id;
      ++r.takes;
      take_times_ns.push_back(t_ns);
      if (r.takes % sample_every == 0 || r.takes == c.workers) memory.Sample();
      // The item string the worker got says what it reads.
      absl::StatusOr<SliceSpec> spec = ParseItem(taken->item.item);
      if (!spec.ok()) {
        r.error = spec.status().ToString();
        return false;
      }
      Reading& rd = reading[w];
      rd.start = spec->start.value_or(0);
      rd.end = spec->end.value_or(0);
      rd.t0_ns = t_ns + latency_ns;
      rd.ns_per_record = record_ns * slowdowns[w];
      ++rd.version;
      events.push({rd.FinishNs(), w, Event::kFinish, rd.version, 0});
      if (c.split) {
        holder[lease[w]] = w;
        // The first heartbeat after the reading starts reports progress
        // (the coordinator extrapolates from it).
        const int64_t beat = rd.t0_ns + heartbeat_ns;
        if (beat < rd.FinishNs()) events.push({beat, w, Event::kProgress, rd.version, 0});
      }
    } else if (taken->outcome == TakeOutcome::kWait) {
      if (!is_parked[w]) parked.push_back(w);
      is_parked[w] = 1;
      auto h = holder.find(taken->proposed_lease);
      if (taken->proposed_lease != 0 && h != holder.end()) {
        // The holder sees the proposal with its next heartbeat: on average
        // half an interval later.
        events.push({t_ns + heartbeat_ns / 2, h->second, Event::kAnswer,
                     reading[h->second].version, taken->proposed_lease, w});
      }
    }
    return true;
  };
  // A blocked take wakes: `w` (or, when w < 0, the last parked worker).
  auto wake = [&](int32_t w, int64_t t_ns) {
    if (w < 0) {
      while (!parked.empty() && !is_parked[parked.back()]) parked.pop_back();
      if (parked.empty()) return true;
      w = parked.back();
      parked.pop_back();
    } else if (!is_parked[w]) {
      return true;
    }
    is_parked[w] = 0;
    return take(w, t_ns);
  };

  for (int32_t w = 0; w < c.workers; ++w) {
    if (!take(w, 0)) return r;
  }
  while (!events.empty()) {
    const Event e = events.top();
    events.pop();
    Reading& rd = reading[e.worker];
    if (e.version != rd.version) continue;  // a reading that ended or moved
    if (e.kind == Event::kProgress) {
      (*state)->ReportProgress(names[e.worker], lease[e.worker],
                               rd.start + rd.Claimed(e.t_ns) - 1, at(e.t_ns))
          .IgnoreError();
      continue;
    }
    if (e.kind == Event::kAnswer) {
      if (lease[e.worker] != e.lease) continue;
      HeartbeatReply reply = (*state)->Heartbeat(names[e.worker], {e.lease}, at(e.t_ns));
      if (reply.splits.empty()) continue;
      const SplitProposal& p = reply.splits.front();
      // As SplittableRange::Split: at or after the first unclaimed record.
      const int64_t point =
          std::max({p.split_point, rd.start + rd.Claimed(e.t_ns), rd.start + 1});
      const bool fits = point < rd.end && rd.end - point >= p.min_residual;
      absl::StatusOr<bool> accepted = (*state)->AcceptSplit(
          names[e.worker], e.lease, fits ? point : -1, at(e.t_ns));
      if (!accepted.ok()) {
        r.error = accepted.status().ToString();
        return r;
      }
      if (*accepted) {
        ++r.splits;
        rd.end = point;
        ++rd.version;
        events.push({rd.FinishNs(), e.worker, Event::kFinish, rd.version, 0});
      }
      // The coordinator wakes every blocked take: the asker gets the
      // residual (or, after a refusal, proposes again). After a split, two
      // leases have no proposal (the shortened head and the residual just
      // taken), so two more waiting workers may propose; any other would
      // find no candidate, so waking them is not simulated.
      if (!wake(e.asker, e.t_ns)) return r;
      if (*accepted) {
        for (int k = 0; k < 2; ++k) {
          if (!wake(-1, e.t_ns)) return r;
        }
      }
      continue;
    }
    if (c.split) holder.erase(lease[e.worker]);
    ++rd.version;
    absl::StatusOr<CompleteOutcome> done = (*state)->Complete(
        names[e.worker], lease[e.worker], epoch_start + absl::Nanoseconds(e.t_ns));
    if (!done.ok() || *done != CompleteOutcome::kCompleted) {
      r.error = done.ok() ? "unexpected duplicate completion" : done.status().ToString();
      return r;
    }
    lease[e.worker] = 0;
    ++items[e.worker];
    last_completion_ns = e.t_ns;
    if (!take(e.worker, e.t_ns)) return r;
    // A real blocked take wakes on every completion; with no failures the
    // parked workers can only learn "wait" or "end" (or, splitting, make a
    // proposal), so one retry suffices.
    if (!wake(-1, e.t_ns)) return r;
  }
  // Splitting: parked workers whose proposals were refused are still
  // parked at the end; the last completion ended the queue for them.
  memory.Sample();
  const QueueStats stats = (*state)->Stats(epoch_start + absl::Nanoseconds(last_completion_ns));
  if (!stats.finished || stats.completed != r.slices || stats.duplicates != 0) {
    r.error = absl::StrCat("queue not finished cleanly: completed ", stats.completed,
                           " of ", r.slices, ", duplicates ", stats.duplicates);
    return r;
  }
  r.makespan_s = last_completion_ns * 1e-9;
  r.ideal_s = IdealSeconds(o, slowdowns, total_records);
  // Takes happen in time order, so a two-pointer sweep finds the busiest
  // one-second window.
  size_t first = 0;
  for (size_t i = 0; i < take_times_ns.size(); ++i) {
    while (take_times_ns[i] - take_times_ns[first] >= 1'000'000'000) ++first;
    r.peak_takes_per_s = std::max<int64_t>(r.peak_takes_per_s, static_cast<int64_t>(i - first + 1));
  }
  r.min_items = *std::min_element(items.begin(), items.end());
  r.max_items = *std::max_element(items.begin(), items.end());
  r.slowest_worker_items =
      items[std::max_element(slowdowns.begin(), slowdowns.end()) - slowdowns.begin()];
  r.heap_mib = memory.heap_mib();
  r.rss_mib = memory.rss_mib();
  return r;
}

SimResult RunConfig(const SimOptions& o, const Config& c) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<SpeedModel> model = ParseSpeedModel(c.model);
  SimResult r;
  if (!model.ok()) {
    r.error = model.status().ToString();
    return r;
  }
  const std::vector<double> slowdowns = Slowdowns(*model, c.workers, o.seed, o.sigma);
  r = c.slices_per_worker == 0 ? RunStatic(o, c, slowdowns) : RunQueue(o, c, slowdowns);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

std::string Serialize(const SimResult& r) {
  return absl::StrFormat("%.9g\t%.9g\t%d\t%d\t%d\t%d\t%d\t%.6g\t%.6g\t%.6g\t%d\t%d\t%s\n",
                         r.ideal_s, r.makespan_s, r.slices, r.takes, r.min_items,
                         r.max_items, r.slowest_worker_items, r.heap_mib, r.rss_mib,
                         r.wall_s, r.peak_takes_per_s, r.splits, r.error);
}

SimResult Deserialize(const std::string& line) {
  SimResult r;
  std::vector<std::string> f = absl::StrSplit(line, '\t');
  if (f.size() < 13) {
    r.error = absl::StrCat("child died or sent a short result: '", line, "'");
    return r;
  }
  (void)absl::SimpleAtod(f[0], &r.ideal_s);
  (void)absl::SimpleAtod(f[1], &r.makespan_s);
  (void)absl::SimpleAtoi(f[2], &r.slices);
  (void)absl::SimpleAtoi(f[3], &r.takes);
  (void)absl::SimpleAtoi(f[4], &r.min_items);
  (void)absl::SimpleAtoi(f[5], &r.max_items);
  (void)absl::SimpleAtoi(f[6], &r.slowest_worker_items);
  (void)absl::SimpleAtod(f[7], &r.heap_mib);
  (void)absl::SimpleAtod(f[8], &r.rss_mib);
  (void)absl::SimpleAtod(f[9], &r.wall_s);
  (void)absl::SimpleAtoi(f[10], &r.peak_takes_per_s);
  (void)absl::SimpleAtoi(f[11], &r.splits);
  r.error = std::string(absl::StripTrailingAsciiWhitespace(f[12]));
  return r;
}

// Runs every config in a forked child, at most `jobs` at a time.
std::vector<SimResult> RunAll(const SimOptions& o, const std::vector<Config>& configs) {
  std::vector<SimResult> results(configs.size());
  std::map<pid_t, std::pair<size_t, int>> running;  // pid -> (config, read fd)
  size_t next = 0;
  auto reap_one = [&] {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    auto it = running.find(pid);
    if (it == running.end()) return;
    std::string line;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(it->second.second, buf, sizeof(buf))) > 0) line.append(buf, n);
    ::close(it->second.second);
    results[it->second.first] = Deserialize(line);
    const Config& c = configs[it->second.first];
    std::fprintf(stderr, "  sim N=%lld %-9s %-12s %.1f s wall\n",
                 static_cast<long long>(c.workers), c.model.c_str(), c.mode.c_str(),
                 results[it->second.first].wall_s);
    running.erase(it);
  };
  while (next < configs.size() || !running.empty()) {
    if (next < configs.size() && static_cast<int>(running.size()) < o.jobs) {
      int fds[2];
      if (::pipe(fds) != 0) {
        results[next++].error = "pipe failed";
        continue;
      }
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(fds[0]);
        const std::string out = Serialize(RunConfig(o, configs[next]));
        if (::write(fds[1], out.data(), out.size()) < 0) ::_exit(1);
        ::_exit(0);
      }
      ::close(fds[1]);
      if (pid < 0) {
        ::close(fds[0]);
        results[next++].error = "fork failed";
        continue;
      }
      running[pid] = {next++, fds[0]};
      continue;
    }
    reap_one();
  }
  return results;
}

void PrintTable(const SimOptions& o, const std::vector<Config>& configs,
                const std::vector<SimResult>& results) {
  std::printf(
      "| N | speed model | mode | slices | makespan / ideal | makespan (s) | items per "
      "worker (min-max; slowest worker) | takes/s (mean) | takes/s (peak 1 s) | "
      "coordinator RPC/s (mean) | state heap MiB | RSS delta MiB | sim wall (s) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    const SimResult& r = results[i];
    if (!r.error.empty()) {
      std::printf("| %lld | %s | %s | ERROR: %s |\n", static_cast<long long>(c.workers),
                  c.model.c_str(), c.mode.c_str(), r.error.c_str());
      continue;
    }
    const bool queue = c.slices_per_worker > 0;
    const double takes_per_s = queue ? r.takes / r.makespan_s : 0;
    // take + complete per item, plus one heartbeat per worker every
    // lease_timeout / 3.
    // Splitting, heartbeats come every heartbeat_s instead.
    const double beats_per_s =
        c.split ? c.workers / o.heartbeat_s : c.workers * 3.0 / o.lease_timeout_s;
    const double rpc_per_s = queue ? 2 * takes_per_s + beats_per_s : 0;
    std::printf("| %lld | %s | %s | %s | %.3f | %.0f | %lld-%lld; %lld | %s | %s | %s | %s | %s | %.2f |\n",
                static_cast<long long>(c.workers), c.model.c_str(), c.mode.c_str(),
                !queue ? "-"
                : c.split ? absl::StrCat(r.slices, " + ", r.splits, " splits").c_str()
                          : absl::StrCat(r.slices).c_str(),
                r.makespan_s / r.ideal_s,
                r.makespan_s, static_cast<long long>(r.min_items),
                static_cast<long long>(r.max_items),
                static_cast<long long>(r.slowest_worker_items),
                queue ? absl::StrFormat("%.1f", takes_per_s).c_str() : "-",
                queue ? absl::StrCat(r.peak_takes_per_s).c_str() : "-",
                queue ? absl::StrFormat("%.0f", rpc_per_s).c_str() : "-",
                queue ? absl::StrFormat("%.1f", r.heap_mib).c_str() : "-",
                queue ? absl::StrFormat("%.1f", r.rss_mib).c_str() : "-", r.wall_s);
  }
  std::fflush(stdout);
}

void WriteCsv(const std::string& path, const std::vector<Config>& configs,
              const std::vector<SimResult>& results) {
  std::ofstream out(path);
  out << "workers,model,mode,slices,ideal_s,makespan_s,ratio,takes,peak_takes_per_s,"
         "min_items,max_items,slowest_worker_items,heap_mib,rss_mib,wall_s,error\n";
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    const SimResult& r = results[i];
    out << absl::StrFormat("%d,%s,%s,%d,%.6f,%.6f,%.6f,%d,%d,%d,%d,%d,%.3f,%.3f,%.3f,\"%s\"\n",
                           c.workers, c.model, c.mode, r.slices, r.ideal_s, r.makespan_s,
                           r.ideal_s > 0 ? r.makespan_s / r.ideal_s : 0.0, r.takes,
                           r.peak_takes_per_s,
                           r.min_items, r.max_items, r.slowest_worker_items, r.heap_mib,
                           r.rss_mib, r.wall_s, r.error);
  }
}

int Main(int argc, char** argv) {
  SimOptions o;
  CLI::App app{"Discrete-event straggler simulation over the real QueueState"};
  app.add_option("--workers", o.workers, "worker counts (comma-separated)")
      ->delimiter(',')->capture_default_str();
  app.add_option("--models", o.models, "speed models: uniform, two-slow, lognormal")
      ->delimiter(',')->capture_default_str();
  app.add_option("--modes", o.modes, "static, slices-<k>n (num_slices = k*N) and/or split-<k>n (the same, with tail rebalancing)")
      ->delimiter(',')->capture_default_str();
  app.add_option("--records-per-worker", o.records_per_worker,
                 "records per worker (data set = N x this)")->capture_default_str();
  app.add_option("--record-ms", o.record_ms, "read time of one record at 1x")
      ->capture_default_str();
  app.add_option("--take-latency-ms", o.take_latency_ms,
                 "round trip of one take, idle time of the worker")->capture_default_str();
  app.add_option("--files-per-worker", o.files_per_worker,
                 "equal files in the data set per worker")->capture_default_str();
  app.add_option("--heartbeat", o.heartbeat_s,
                 "seconds between a worker's heartbeats (split modes)")->capture_default_str();
  app.add_option("--lease-timeout", o.lease_timeout_s,
                 "seconds; sets the heartbeat rate in the RPC/s column")->capture_default_str();
  app.add_option("--sigma", o.sigma, "sigma of the lognormal model")->capture_default_str();
  app.add_option("--seed", o.seed, "speed-model and shuffle seed")->capture_default_str();
  app.add_option("--jobs", o.jobs, "configurations simulated in parallel")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--csv", o.csv, "also write the results as CSV here");
  app.add_flag("--print-slowdowns", o.print_slowdowns,
               "print the slowdown of workers 0..N-1 of --model (N = first of --workers) and exit");
  app.add_option("--model", o.model, "speed model for --print-slowdowns")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (o.print_slowdowns) {
    absl::StatusOr<SpeedModel> model = ParseSpeedModel(o.model);
    if (!model.ok()) {
      std::fprintf(stderr, "straggler_sim: %s\n", model.status().ToString().c_str());
      return 2;
    }
    for (double s : Slowdowns(*model, o.workers.front(), o.seed, o.sigma)) {
      std::printf("%.9g\n", s);
    }
    return 0;
  }

  std::vector<Config> configs;
  for (int64_t n : o.workers) {
    for (const std::string& model : o.models) {
      if (!ParseSpeedModel(model).ok()) {
        std::fprintf(stderr, "straggler_sim: unknown speed model '%s'\n", model.c_str());
        return 2;
      }
      for (const std::string& mode : o.modes) {
        absl::StatusOr<int64_t> k = SlicesPerWorker(mode);
        if (!k.ok()) {
          std::fprintf(stderr, "straggler_sim: %s\n", k.status().ToString().c_str());
          return 2;
        }
        configs.push_back({n, model, mode, *k, absl::StartsWith(mode, "split-")});
      }
    }
  }
  std::fflush(stdout);
  const std::vector<SimResult> results = RunAll(o, configs);
  PrintTable(o, configs, results);
  if (!o.csv.empty()) WriteCsv(o.csv, configs, results);
  for (const SimResult& r : results) {
    if (!r.error.empty()) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace shardq::straggler

int main(int argc, char** argv) { return shardq::straggler::Main(argc, argv); }
