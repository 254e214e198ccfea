// The `shardq` command line. Each verb lives in its own file; this one only
// declares the verbs and their flags.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "tools/demo.h"

int main(int argc, char** argv) {
  CLI::App app{"shardq: elastic data sharding for distributed training"};
  app.require_subcommand(1);

  shardq::DemoOptions demo;
  CLI::App* demo_cmd = app.add_subcommand(
      "demo", "Static sharding vs the shared WorkQueue with a 4x and a 2x straggler");
  demo_cmd->add_option("--workers", demo.workers, "worker threads")
      ->check(CLI::Range(2, 256))->capture_default_str();
  demo_cmd->add_option("--files", demo.files, "files in the data set")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  demo_cmd->add_option("--lines-per-file", demo.lines_per_file, "records per file")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}))->capture_default_str();
  demo_cmd->add_option("--record-micros", demo.record_micros,
                       "emulated work per record at full speed")
      ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  demo_cmd->add_option("--slices-per-worker", demo.slices_per_worker,
                       "num_slices = this x workers")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))->capture_default_str();
  demo_cmd->add_option("--seed", demo.seed, "data and shuffle seed")->capture_default_str();
  demo_cmd->add_option("--data-dir", demo.data_dir,
                       "where to write the data set (default: a temporary dir)");

  CLI11_PARSE(app, argc, argv);
  if (demo_cmd->parsed()) return shardq::RunDemo(demo);
  return 0;
}
