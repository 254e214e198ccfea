// `shardq worker -- COMMAND ARGS...`: runs COMMAND once per item, with `{}`
// in ARGS replaced by the item and SHARDQ_ITEM / SHARDQ_EPOCH in its
// environment. Exit 0 completes the item; any other exit reports a failed
// attempt (the item goes to the back of the queue, and after the queue's
// max_attempts failed attempts it is set aside as failed). Heartbeats run
// while the command runs (WorkQueue's background thread). A slice of a
// local file whose size is no longer the planned one is not given to the
// command: it is a failed attempt saying the file changed since the plan
// was made (the command would miss the records appended since). Exits 0
// at end of input, 4 (kExitFinishedWithFailures) when the queue finished
// with failed items.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "shardq/work_queue.h"
#include "src/client/retry.h"
#include "src/client/work_queue_backend.h"
#include "src/io/compression.h"
#include "src/io/file.h"
#include "src/io/s3/s3_url.h"
#include "src/io/sqlite_table.h"
#include "tools/client_flags.h"
#include "tools/verbs.h"

namespace shardq {
namespace {

std::atomic<int> g_stop_signal{0};

void OnStopSignal(int signal_number) { g_stop_signal.store(signal_number); }

// A local file item whose file no longer has the size its plan saw
// (WorkItem::work_size): the command would read the planned range and
// miss what was appended since, so it is not run (CheckPlannedSize's
// FAILED_PRECONDITION). OK for any other item: objects and tables, whole
// files, a file that cannot be opened (the command reports that).
absl::Status CheckItemFile(const WorkItem& item) {
  if (item.work_size < 0 || IsS3Path(item.item) || IsTableItem(item.item)) {
    return absl::OkStatus();
  }
  absl::StatusOr<SliceSpec> spec = SpecOf(item);
  if (!spec.ok()) return absl::OkStatus();
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      FileSystem::Default()->Open(spec->work);
  if (!file.ok()) return absl::OkStatus();
  // A compressed file is read whole (planners before issue 15 gave it the
  // range [0, 1), whose planned size means nothing).
  absl::StatusOr<FileCompression> compression = DetectCompression(**file);
  if (!compression.ok() || *compression != FileCompression::kNone) return absl::OkStatus();
  return CheckPlannedSize(**file, item.work_size);
}

// Runs the command for one item; returns its exit status (128+N when it was
// killed by signal N, 127 when it could not be started).
int RunCommand(const std::vector<std::string>& command, const WorkItem& item) {
  std::vector<std::string> args;
  for (const std::string& arg : command) {
    args.push_back(absl::StrReplaceAll(arg, {{"{}", item.item}}));
  }
  const std::string epoch = absl::StrCat(item.epoch);
  const pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "shardq worker: fork: %s\n", std::strerror(errno));
    return 127;
  }
  if (pid == 0) {
    ::setenv("SHARDQ_ITEM", item.item.c_str(), 1);
    ::setenv("SHARDQ_EPOCH", epoch.c_str(), 1);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "shardq worker: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  bool forwarded = false;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 127;
    // A stop signal: pass it on to the command once, then wait for it.
    if (g_stop_signal.load() != 0 && !forwarded) {
      ::kill(pid, SIGTERM);
      forwarded = true;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 127;
}

}  // namespace

CLI::App* AddWorker(CLI::App& app, WorkerOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "worker", "Run COMMAND once per item: {} in its args becomes the item; "
                "exit 0 completes the item, other exits release it");
  AddClientFlags(cmd, &o->client, /*with_worker=*/true);
  cmd->add_option("--take-ahead", o->client.take_ahead,
                  "items kept leased and ready beyond the one the command runs on, so that "
                  "the next command starts without waiting for the coordinator")
      ->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--max-failures", o->max_failures,
                  "give up (exit 1) after this many failed items in a row")
      ->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("command", o->command, "COMMAND ARGS... (after --)")->required();
  cmd->positionals_at_end();
  return cmd;
}

namespace {

// The exit code at the end of input: 0, or 4 when items failed.
int EndOfInput(WorkQueue& queue, int64_t done) {
  absl::StatusOr<QueueStats> stats = queue.Stats();
  if (!stats.ok()) return ReportError("worker", stats.status());
  if (stats->failed > 0) {
    std::fprintf(stderr,
                 "shardq worker %s: end of input after %lld items; the queue finished with "
                 "%lld failed item(s) (see shardq status --failed)\n",
                 queue.worker_id().c_str(), static_cast<long long>(done),
                 static_cast<long long>(stats->failed));
    return kExitFinishedWithFailures;
  }
  std::fprintf(stderr, "shardq worker %s: end of input after %lld items\n",
               queue.worker_id().c_str(), static_cast<long long>(done));
  return 0;
}

}  // namespace

int RunWorker(const WorkerOptions& o) {
  absl::StatusOr<ConnectedBackend> connected = ConnectFromFlags(o.client);
  if (!connected.ok()) return ReportError("worker", connected.status());
  absl::StatusOr<std::unique_ptr<WorkQueue>> queue =
      WorkQueueFactory::Attach(o.client.name, connected->backend, connected->worker_id,
                               o.client.take_ahead);
  if (!queue.ok()) return ReportError("worker", queue.status());

  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnStopSignal;  // no SA_RESTART: waitpid sees EINTR
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  // A take or completion retrying through a coordinator outage gives up at
  // once on a stop signal instead of retrying for minutes.
  SetInterruptCheck([] { return g_stop_signal.load() != 0; });

  int failures_in_a_row = 0;
  int64_t done = 0;
  while (g_stop_signal.load() == 0) {
    absl::StatusOr<WorkItem> item = (*queue)->Take(absl::Seconds(1));
    if (absl::IsDeadlineExceeded(item.status())) continue;  // re-check signals
    if (absl::IsOutOfRange(item.status())) return EndOfInput(**queue, done);
    if (!item.ok() && g_stop_signal.load() != 0) break;  // interrupted while retrying
    if (!item.ok()) return ReportError("worker", item.status());
    const absl::Status file_ok = CheckItemFile(*item);
    const int exit_code = file_ok.ok() ? RunCommand(o.command, *item) : -1;
    if (exit_code == 0) {
      if (absl::Status s = (*queue)->Complete(*item); !s.ok()) {
        return ReportError("worker", s);
      }
      ++done;
      failures_in_a_row = 0;
      continue;
    }
    if (g_stop_signal.load() != 0) {
      // Stopped, not failed: the item goes back to the queue whole and no
      // attempt is counted against it.
      if (absl::Status s = (*queue)->Release(*item); !s.ok()) {
        std::fprintf(stderr, "shardq worker: could not release %s: %s\n", item->item.c_str(),
                     s.ToString().c_str());
      }
      break;
    }
    const std::string what = file_ok.ok() ? absl::StrCat("command exited ", exit_code)
                                          : std::string(file_ok.message());
    const std::string reason = absl::StrCat(what, " (worker ", (*queue)->worker_id(), ")");
    absl::StatusOr<bool> set_aside = (*queue)->Fail(*item, reason);
    std::fprintf(stderr, "shardq worker %s: %s on %s; %s\n",
                 (*queue)->worker_id().c_str(), what.c_str(), item->item.c_str(),
                 !set_aside.ok() ? absl::StrCat("could not report it: ",
                                                set_aside.status().ToString()).c_str()
                 : *set_aside    ? "it failed too often and is set aside as failed"
                                 : "reported the failed attempt (it will be retried)");
    if (++failures_in_a_row >= o.max_failures) {
      // The last failure may have finished the queue (its last item set aside).
      if (absl::StatusOr<QueueStats> stats = (*queue)->Stats(); stats.ok() && stats->finished) {
        return EndOfInput(**queue, done);
      }
      std::fprintf(stderr, "shardq worker: %d failed items in a row, giving up\n",
                   failures_in_a_row);
      return 1;
    }
  }
  std::fprintf(stderr, "shardq worker: stopped by signal %d\n", g_stop_signal.load());
  return 128 + g_stop_signal.load();
}

}  // namespace shardq
