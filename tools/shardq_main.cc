// The `shardq` command line. Each verb lives in its own file; this one only
// registers the verbs and dispatches to the one given.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "shardq_version.h"
#include "src/log/mutex_mode.h"
#include "tools/client_flags.h"
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

// CLI11's validators report a non-number or an out-of-range value as
// "Value x not in range 2.225074e-308 to 1797693...": a check put in front
// of them says what is wrong in words. It reads the option's type name
// ("INT", "UINT", "FLOAT") and its range validator's ("POSITIVE",
// "NONNEGATIVE").
CLI::Validator NumberCheck(const std::string& type_name) {
  const std::string base = type_name.substr(0, type_name.find(':'));
  const bool is_unsigned = base == "UINT";
  const bool integer = base == "INT" || is_unsigned;
  const bool positive = type_name.find(":POSITIVE") != std::string::npos;
  const bool non_negative = is_unsigned || type_name.find(":NONNEGATIVE") != std::string::npos;
  const std::string what = integer ? "integer" : "number";
  const std::string any = integer ? "an integer" : "a number";
  const std::string in_range = positive       ? "a positive " + what
                               : non_negative ? "a non-negative " + what
                                              : any;
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        const std::string quoted = "'" + input + "'";
        double value = 0;
        if (integer) {
          int64_t i = 0;
          uint64_t u = 0;
          const bool digits = !input.empty() &&
                              input.find_first_not_of("+-0123456789") == std::string::npos;
          if (absl::SimpleAtoi(input, &i)) {
            value = static_cast<double>(i);
          } else if (absl::SimpleAtoi(input, &u)) {
            value = static_cast<double>(u);
          } else if (digits) {
            return quoted + " is out of range";
          } else {
            return quoted + " is not " + any;
          }
        } else if (!absl::SimpleAtod(input, &value) || !std::isfinite(value)) {
          return quoted + " is not " + any;
        }
        if ((positive && value <= 0) || (non_negative && value < 0)) {
          return quoted + " is not " + in_range;
        }
        return "";
      },
      /*validator_desc=*/"");
}

void AddNumberChecks(CLI::App& app) {
  for (CLI::App* cmd : app.get_subcommands([](CLI::App*) { return true; })) {
    AddNumberChecks(*cmd);
  }
  for (CLI::Option* option : app.get_options()) {
    const std::string type_name = option->get_type_name();
    const std::string base = type_name.substr(0, type_name.find(':'));
    if (base == "INT" || base == "UINT" || base == "FLOAT") {
      option->transform(NumberCheck(type_name));  // transform: runs first
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Set here, not in the library: a process embedding shardq decides for
  // itself (src/log/mutex_mode.h).
  shardq::UseProductionMutexMode();
  CLI::App app{"shardq: elastic data sharding for distributed training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "shardq " SHARDQ_VERSION, "print the version and exit");

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
  shardq::ReportOptions report;
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
  CLI::App* report_cmd = shardq::AddReport(app, &report);

  // status registers its client flags itself; it waits like the others.
  shardq::AddConnectTimeoutFlag(status_cmd, &status.client);
  AddNumberChecks(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help) and gives each kind of error
    // its own code (105, 106, 109, ...); the documented one is 2.
    const int code = app.exit(e);
    return code == 0 ? 0 : shardq::kExitUsage;
  }
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
  if (report_cmd->parsed()) return shardq::RunReport(report);
  return 0;
}
