// The `shardq` command line. Each verb lives in its own file; this one only
// registers the verbs and dispatches to the one given.
#include <cstdio>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "tools/demo.h"
#include "tools/record_verbs.h"
#include "tools/verbs.h"

namespace {

CLI::App* AddDemo(CLI::App& app, shardq::DemoOptions* demo) {
  CLI::App* cmd = app.add_subcommand(
      "demo", "Static sharding vs the shared WorkQueue with a 4x and a 2x straggler");
  cmd->add_option("--workers", demo->workers, "worker threads")
      ->check(CLI::Range(2, 256))->capture_default_str();
  cmd->add_option("--files", demo->files, "files in the data set")
      ->check(CLI::Range(1, 100000))->capture_default_str();
  cmd->add_option("--lines-per-file", demo->lines_per_file, "records per file")
      ->check(CLI::Range(int64_t{1}, int64_t{100000000}))->capture_default_str();
  cmd->add_option("--record-micros", demo->record_micros,
                  "emulated work per record at full speed")
      ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  cmd->add_option("--slices-per-worker", demo->slices_per_worker,
                  "num_slices = this x workers")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))->capture_default_str();
  cmd->add_option("--seed", demo->seed, "data and shuffle seed")->capture_default_str();
  cmd->add_option("--data-dir", demo->data_dir,
                  "where to write the data set (default: a temporary dir)");
  return cmd;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's abseil is built without NDEBUG, so every absl::Mutex (ours and
  // gRPC's) runs the deadlock detector: a lock-graph update per acquisition,
  // several percent of a busy coordinator's CPU. The unit tests (their own
  // mains) keep it; the command does not pay for it. Set here, not in the
  // library: a process embedding shardq decides for itself.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"shardq: elastic data sharding for distributed training"};
  app.require_subcommand(1);

  shardq::DemoOptions demo;
  shardq::ServeOptions serve;
  shardq::CreateOptions create;
  shardq::ClientFlags take;
  shardq::WorkerOptions worker;
  shardq::StatusOptions status;
  shardq::CountOptions count;
  shardq::CatOptions cat;
  shardq::TFRecordWriteOptions tfrecord_write;
  shardq::SnapshotOptions snapshot;
  shardq::RestoreOptions restore;
  CLI::App* demo_cmd = AddDemo(app, &demo);
  CLI::App* serve_cmd = shardq::AddServe(app, &serve);
  CLI::App* create_cmd = shardq::AddCreate(app, &create);
  CLI::App* take_cmd = shardq::AddTake(app, &take);
  CLI::App* worker_cmd = shardq::AddWorker(app, &worker);
  CLI::App* status_cmd = shardq::AddStatus(app, &status);
  CLI::App* count_cmd = shardq::AddCount(app, &count);
  CLI::App* cat_cmd = shardq::AddCat(app, &cat);
  CLI::App* tfrecord_write_cmd = shardq::AddTFRecordWrite(app, &tfrecord_write);
  CLI::App* snapshot_cmd = shardq::AddSnapshot(app, &snapshot);
  CLI::App* restore_cmd = shardq::AddRestore(app, &restore);

  CLI11_PARSE(app, argc, argv);
  if (demo_cmd->parsed()) return shardq::RunDemo(demo);
  if (serve_cmd->parsed()) return shardq::RunServe(serve);
  if (create_cmd->parsed()) return shardq::RunCreate(create);
  if (take_cmd->parsed()) return shardq::RunTake(take);
  if (worker_cmd->parsed()) return shardq::RunWorker(worker);
  if (status_cmd->parsed()) return shardq::RunStatus(status);
  if (count_cmd->parsed()) return shardq::RunCount(count);
  if (cat_cmd->parsed()) return shardq::RunCat(cat);
  if (tfrecord_write_cmd->parsed()) return shardq::RunTFRecordWrite(tfrecord_write);
  if (snapshot_cmd->parsed()) return shardq::RunSnapshot(snapshot);
  if (restore_cmd->parsed()) return shardq::RunRestore(restore);
  return 0;
}
