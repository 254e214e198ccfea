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
#include <unistd.h>

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
};

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
  QueueConfig config;
  config.name = "big";
  for (int64_t i = 0; i < items; ++i) {
    config.items.push_back(absl::StrCat("data/part-", i / 1000, ".tfrecord?start=",
                                        (i % 1000) * 1048576, "&end=", (i % 1000 + 1) * 1048576));
  }
  config.num_epochs = 2;
  config.seed = 1;
  config.lease_timeout = absl::Seconds(600);
  const absl::Time t0 = absl::Now();
  {
    auto c = CoordinatorImpl::Create(options);
    if (!c.ok()) {
      std::cerr << c.status() << "\n";
      return 1;
    }
    if (auto info = (*c)->CreateQueue(config); !info.ok()) {
      std::cerr << info.status() << "\n";
      return 1;
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
  }  // clean close: snapshot
  const double build_s = absl::ToDoubleSeconds(absl::Now() - t0);
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
  fs::remove_all(dir);
  fs::remove_all(dir + "-crash");
  return 0;
}

}  // namespace
}  // namespace shardq

int main(int argc, char** argv) {
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
  CLI11_PARSE(app, argc, argv);
  return shardq::Run(flags);
}
