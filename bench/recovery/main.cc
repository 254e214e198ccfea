// How long a coordinator takes to recover a large queue from its state dir,
// and how the journal's group commit does under concurrent completions.
//
//   recovery --items 1000000 --completed 500000 --tail 20000
//
// builds a durable queue of `items` slices and completes `completed` of
// them with 16 concurrent workers, closes it (a clean close snapshots),
// journals `tail` more updates from one worker, copies the state dir as a
// crash would leave it, and times CoordinatorImpl::Create on the copy
// (snapshot load + replay of what was journaled after the last snapshot).
// Both phases run with the coordinator's snapshot policy (the defaults, or
// --snapshot-every / --snapshot-bytes-per-update), so the setup's
// completions/s includes the periodic snapshots a server would take.
// Measured in one run, printed as a markdown table.
//
// Then, on the same queue (1,000,000 slices x 2 epochs by default), the
// memory and stall figures of issue 17: the process's RSS in steady state
// (after the setup, no snapshot in progress), its peak RSS while
// `--snapshot-workers` threads take and complete items until the
// coordinator has taken `--snapshots` periodic snapshots, and the longest
// single Take and Complete call in that window (a snapshot must not stop
// them for more than 50 ms). RSS is read from /proc/self/status; the peak
// is VmHWM after resetting it (/proc/self/clear_refs) at the window's start.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "src/server/coordinator_impl.h"
#include "src/server/process_memory.h"
#include "src/log/mutex_mode.h"

namespace fs = std::filesystem;

namespace shardq {
namespace {

struct Flags {
  int64_t items = 1000000;
  int64_t completed = 500000;
  int64_t tail = 20000;
  std::string dir = "/tmp/shardq-recovery-bench";
  int64_t snapshot_every = CoordinatorOptions().snapshot_every;
  int64_t snapshot_bytes_per_update = CoordinatorOptions().snapshot_bytes_per_update;
  int64_t snapshots = 2;
  int snapshot_workers = 4;
};

// A field of /proc/self/status in kB ("VmRSS", "VmHWM"); -1 if absent.
int64_t StatusKb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atoll(line.c_str() + field.size() + 1);
  }
  return -1;
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false if it cannot.
bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

struct SnapshotWindow {
  int64_t rss_steady_kb = 0;
  int64_t rss_peak_kb = 0;
  int64_t rss_setup_peak_kb = 0;  // before the window: creation and setup
  bool peak_reset = false;
  int64_t snapshots = 0;
  int64_t pairs = 0;
  double seconds = 0;
  absl::Duration max_take, max_complete;
  absl::Duration p99_take, p99_complete;
};

// Takes and completes items with `workers` threads until `snapshots`
// periodic snapshots were journaled, timing every call (see the top).
SnapshotWindow MeasureSnapshots(CoordinatorImpl& c, int64_t snapshots, int workers) {
  SnapshotWindow w;
  c.Flush().IgnoreError();  // no snapshot in progress
  w.rss_steady_kb = StatusKb("VmRSS");
  w.rss_setup_peak_kb = StatusKb("VmHWM");
  w.peak_reset = ResetPeakRss();
  const int64_t before = c.journal_totals()->snapshots;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> pairs{0};
  std::vector<std::vector<absl::Duration>> takes(static_cast<size_t>(workers));
  std::vector<std::vector<absl::Duration>> completes(static_cast<size_t>(workers));
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&, t] {
      const std::string name = absl::StrCat("s", t);
      while (!stop.load()) {
        absl::Time t0 = absl::Now();
        auto taken = c.Take("big", name, 1, absl::InfinitePast());
        takes[static_cast<size_t>(t)].push_back(absl::Now() - t0);
        if (!taken.ok() || taken->empty()) return;
        t0 = absl::Now();
        c.Complete("big", name, (*taken)[0].lease_id).IgnoreError();
        completes[static_cast<size_t>(t)].push_back(absl::Now() - t0);
        pairs.fetch_add(1);
      }
    });
  }
  while (c.journal_totals()->snapshots - before < snapshots) absl::SleepFor(absl::Milliseconds(5));
  // Let the last snapshot's commit (which completions may wait behind) end.
  c.Flush().IgnoreError();
  stop.store(true);
  for (auto& t : threads) t.join();
  w.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  w.rss_peak_kb = StatusKb("VmHWM");
  w.snapshots = c.journal_totals()->snapshots - before;
  w.pairs = pairs.load();
  auto summarise = [](std::vector<std::vector<absl::Duration>>& per_thread, absl::Duration* max,
                      absl::Duration* p99) {
    std::vector<absl::Duration> all;
    for (auto& v : per_thread) all.insert(all.end(), v.begin(), v.end());
    if (all.empty()) return;
    std::sort(all.begin(), all.end());
    *max = all.back();
    *p99 = all[all.size() * 99 / 100];
  };
  summarise(takes, &w.max_take, &w.p99_take);
  summarise(completes, &w.max_complete, &w.p99_complete);
  return w;
}

double Mb(int64_t kb) { return static_cast<double>(kb) / 1000.0; }
double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

void CopyState(const std::string& from, const std::string& to) {
  fs::remove_all(to);
  fs::create_directories(to);
  for (const char* f : {"COMMITTED", "state.db", "state.db-wal"}) {
    if (fs::exists(from + "/" + f)) fs::copy_file(from + "/" + f, to + "/" + f);
  }
}

int Run(const Flags& flags) {
  const int64_t items = flags.items, completed = flags.completed, tail = flags.tail;
  const std::string& dir = flags.dir;
  CoordinatorOptions options;
  options.state_dir = dir;
  options.snapshot_every = flags.snapshot_every;
  options.snapshot_bytes_per_update = flags.snapshot_bytes_per_update;
  fs::remove_all(dir);
  const absl::Time t0 = absl::Now();
  double build_s = 0;
  SnapshotWindow window;
  {
    auto c = CoordinatorImpl::Create(options);
    if (!c.ok()) {
      std::cerr << c.status() << "\n";
      return 1;
    }
    {
      // As a server gets it: the item strings, freed once the queue exists.
      QueueConfig config;
      config.name = "big";
      for (int64_t i = 0; i < items; ++i) {
        config.items.push_back(absl::StrCat("data/part-", i / 1000, ".tfrecord?start=",
                                            (i % 1000) * 1048576, "&end=",
                                            (i % 1000 + 1) * 1048576));
      }
      config.num_epochs = 2;
      config.seed = 1;
      config.lease_timeout = absl::Seconds(600);
      if (auto info = (*c)->CreateQueue(std::move(config)); !info.ok()) {
        std::cerr << info.status() << "\n";
        return 1;
      }
    }
    // Complete `completed` items with 16 concurrent workers: group commit
    // lets them share fsyncs.
    std::vector<std::thread> workers;
    std::atomic<int64_t> left{completed};
    for (int w = 0; w < 16; ++w) {
      workers.emplace_back([&, w] {
        const std::string name = absl::StrCat("w", w);
        while (left.fetch_sub(1) > 0) {
          auto taken = (*c)->Take("big", name, 1, absl::InfinitePast());
          if (!taken.ok() || taken->empty()) return;
          (*c)->Complete("big", name, (*taken)[0].lease_id).IgnoreError();
        }
      });
    }
    for (auto& t : workers) t.join();
    build_s = absl::ToDoubleSeconds(absl::Now() - t0);
    if (flags.snapshots > 0) window = MeasureSnapshots(**c, flags.snapshots, flags.snapshot_workers);
  }  // clean close: snapshot
  const absl::Time t1 = absl::Now();
  {
    auto c = CoordinatorImpl::Create(options);
    if (!c.ok()) {
      std::cerr << c.status() << "\n";
      return 1;
    }
    for (int64_t i = 0; i < tail / 2; ++i) {  // journal a tail after the snapshot
      auto taken = (*c)->Take("big", "tail", 1, absl::InfinitePast());
      (*c)->Complete("big", "tail", (*taken)[0].lease_id).IgnoreError();
    }
    // Simulate a crash: no clean-close snapshot. Copy the files as they are.
    (*c)->Flush().IgnoreError();
    CopyState(dir, dir + "-crash");
  }
  const double tail_s = absl::ToDoubleSeconds(absl::Now() - t1);
  const absl::Time t2 = absl::Now();
  options.state_dir = dir + "-crash";
  auto recovered = CoordinatorImpl::Create(options);
  const double recover_s = absl::ToDoubleSeconds(absl::Now() - t2);
  if (!recovered.ok()) {
    std::cerr << recovered.status() << "\n";
    return 1;
  }
  // What recovery replayed: the updates journaled after the last snapshot.
  const int64_t replayed = (*recovered)->recovery().updates_replayed;
  auto stats = (*recovered)->Stats("big");
  const int64_t db_bytes = fs::file_size(dir + "-crash/state.db") +
                           (fs::exists(dir + "-crash/state.db-wal")
                                ? fs::file_size(dir + "-crash/state.db-wal") : 0);
  std::cout << absl::StrFormat(
      "| items x epochs | completed | replayed after the snapshot | state dir | recovery |\n"
      "|---|---:|---:|---:|---:|\n"
      "| %d x 2 | %d | %d updates | %.1f MiB | %.2f s |\n",
      items, stats->completed, replayed, db_bytes / 1048576.0, recover_s);
  std::cout << absl::StrFormat(
      "\n(setup: %d completions by 16 threads through the journal in %.1f s = %.0f/s; "
      "tail of %d take+complete in %.1f s; snapshots after >= %d updates and >= one "
      "update per %d bytes of the last snapshot)\n",
      completed, build_s, completed / build_s, tail / 2, tail_s, flags.snapshot_every,
      flags.snapshot_bytes_per_update);
  if (flags.snapshots > 0) {
    std::cout << absl::StrFormat(
        "\n| RSS steady | RSS peak, %d snapshots | longest take | longest complete | "
        "p99 take | p99 complete | pairs in the window |\n"
        "|---:|---:|---:|---:|---:|---:|---:|\n"
        "| %.1f MB | %.1f MB%s | %.1f ms | %.1f ms | %.2f ms | %.2f ms | %d in %.1f s |\n",
        window.snapshots, Mb(window.rss_steady_kb), Mb(window.rss_peak_kb),
        window.peak_reset ? "" : " (process peak: VmHWM not reset)", Ms(window.max_take),
        Ms(window.max_complete), Ms(window.p99_take), Ms(window.p99_complete), window.pairs,
        window.seconds);
    std::cout << absl::StrFormat(
        "\n(%d threads take and complete one item at a time while the coordinator takes its "
        "periodic snapshots; RSS from /proc/self/status, the peak is VmHWM reset at the "
        "window's start; peak before it, creating the queue and the setup: %.1f MB)\n",
        flags.snapshot_workers, Mb(window.rss_setup_peak_kb));
  }
  fs::remove_all(dir);
  fs::remove_all(dir + "-crash");
  return 0;
}

}  // namespace
}  // namespace shardq

int main(int argc, char** argv) {
  shardq::UseProductionMutexMode();  // as `shardq serve` (src/log/mutex_mode.h)
  CLI::App app{"shardq recovery benchmark"};
  shardq::Flags flags;
  app.add_option("--items", flags.items)->capture_default_str();
  app.add_option("--completed", flags.completed)->capture_default_str();
  app.add_option("--tail", flags.tail)->capture_default_str();
  app.add_option("--dir", flags.dir)->capture_default_str();
  app.add_option("--snapshot-every", flags.snapshot_every,
                 "CoordinatorOptions::snapshot_every (default: the server's)")
      ->capture_default_str();
  app.add_option("--snapshot-bytes-per-update", flags.snapshot_bytes_per_update,
                 "CoordinatorOptions::snapshot_bytes_per_update (default: the server's)")
      ->capture_default_str();
  app.add_option("--snapshots", flags.snapshots,
                 "periodic snapshots to time takes and completes through (0: skip)")
      ->capture_default_str();
  app.add_option("--snapshot-workers", flags.snapshot_workers,
                 "threads taking and completing during the snapshot window")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  shardq::TuneAllocatorForServing();  // as `shardq serve` does
  return shardq::Run(flags);
}
