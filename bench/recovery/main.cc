// How long a coordinator takes to recover a large queue from its state dir,
// and how the journal's group commit does under concurrent completions.
//
//   recovery --items 1000000 --completed 500000 --tail 20000
//
// builds a queue of `items` slices with `completed` of them done (in memory,
// through the real QueueState), stores it as the state dir's snapshot plus
// `tail` journaled updates after it, then times CoordinatorImpl::Create on
// that directory (snapshot load + replay of the tail). Measured in one run,
// printed as a markdown table.
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

int Run(int64_t items, int64_t completed, int64_t tail, const std::string& dir) {
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
    CoordinatorOptions options;
    options.state_dir = dir;
    options.snapshot_every = items * 10;  // one snapshot, taken at close
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
    CoordinatorOptions options;
    options.state_dir = dir;
    options.snapshot_every = items * 10;
    auto c = CoordinatorImpl::Create(options);
    for (int64_t i = 0; i < tail / 2; ++i) {  // journal a tail after the snapshot
      auto taken = (*c)->Take("big", "tail", 1, absl::InfinitePast());
      (*c)->Complete("big", "tail", (*taken)[0].lease_id).IgnoreError();
    }
    // Simulate a crash: no clean-close snapshot. Copy the files as they are.
    (*c)->Flush().IgnoreError();
    fs::remove_all(dir + "-crash");
    fs::create_directories(dir + "-crash");
    for (const char* f : {"state.db", "state.db-wal"}) {
      if (fs::exists(dir + "/" + f)) fs::copy_file(dir + "/" + f, dir + "-crash/" + f);
    }
  }
  const double tail_s = absl::ToDoubleSeconds(absl::Now() - t1);
  const absl::Time t2 = absl::Now();
  CoordinatorOptions options;
  options.state_dir = dir + "-crash";
  auto recovered = CoordinatorImpl::Create(options);
  const double recover_s = absl::ToDoubleSeconds(absl::Now() - t2);
  if (!recovered.ok()) {
    std::cerr << recovered.status() << "\n";
    return 1;
  }
  auto stats = (*recovered)->Stats("big");
  const int64_t db_bytes = fs::file_size(dir + "-crash/state.db") +
                           (fs::exists(dir + "-crash/state.db-wal")
                                ? fs::file_size(dir + "-crash/state.db-wal") : 0);
  std::cout << absl::StrFormat(
      "| items x epochs | completed | journal tail | state dir | recovery |\n"
      "|---|---:|---:|---:|---:|\n"
      "| %d x 2 | %d | %d updates | %.1f MiB | %.2f s |\n",
      items, stats->completed, tail, db_bytes / 1048576.0, recover_s);
  std::cout << absl::StrFormat(
      "\n(setup: %d completions by 16 threads through the journal in %.1f s = %.0f/s; "
      "tail of %d take+complete in %.1f s)\n",
      completed, build_s, completed / build_s, tail / 2, tail_s);
  fs::remove_all(dir);
  fs::remove_all(dir + "-crash");
  return 0;
}

}  // namespace
}  // namespace shardq

int main(int argc, char** argv) {
  CLI::App app{"shardq recovery benchmark"};
  int64_t items = 1000000, completed = 500000, tail = 20000;
  std::string dir = "/tmp/shardq-recovery-bench";
  app.add_option("--items", items)->capture_default_str();
  app.add_option("--completed", completed)->capture_default_str();
  app.add_option("--tail", tail)->capture_default_str();
  app.add_option("--dir", dir)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return shardq::Run(items, completed, tail, dir);
}
