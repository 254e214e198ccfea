// `shardq report`: a self-contained HTML file (and optionally a PNG of it,
// drawn by headless chromium) of one queue's timeline and charts.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "src/client/coordinator_address.h"
#include "src/observe/report.h"
#include "tools/client_flags.h"
#include "tools/verbs.h"

extern char** environ;

namespace shardq {

CLI::App* AddReport(CLI::App& app, ReportOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "report", "Write a self-contained HTML file (timeline, charts, workers) of one queue");
  cmd->add_option("--address", o->address,
                  "HOST:PORT of the coordinator's status page (serve --http), or its gRPC "
                  "address (then its Status answer names the page): one coordinator, a "
                  "job's list H1:P1,H2:P2 or etcd://E1:P1[,E2:P2...]/JOB (then the "
                  "leader's page)")
      ->required();
  cmd->add_option("--name", o->name, "the queue")->required();
  cmd->add_option("--out", o->out, "the HTML file to write")->required();
  cmd->add_option("--png", o->png, "also write a screenshot of it here (needs chromium)");
  cmd->add_option("--token-file", o->token_file, "file holding the coordinator's token");
  return cmd;
}

namespace {

// The first of chromium's usual names on PATH; empty when none.
std::string FindChromium() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      const std::string candidate = absl::StrCat(dir, "/", name);
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "";
}

absl::Status Screenshot(const std::string& html_path, const std::string& png_path) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    return absl::FailedPreconditionError("--png needs chromium on PATH (Debian: apt install chromium)");
  }
  const std::string profile = (std::filesystem::temp_directory_path() /
                               absl::StrCat("shardq-report-", ::getpid())).string();
  const std::vector<std::string> args = {
      chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--hide-scrollbars", "--user-data-dir=" + profile, "--virtual-time-budget=2000",
      "--window-size=1400,1600", "--screenshot=" + std::filesystem::absolute(png_path).string(),
      "file://" + std::filesystem::absolute(html_path).string()};
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  const int err = posix_spawn(&pid, chromium.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return absl::UnavailableError(absl::StrCat("cannot start ", chromium, ": ", std::strerror(err)));
  }
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  std::error_code ignored;
  std::filesystem::remove_all(profile, ignored);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0 || !std::filesystem::exists(png_path)) {
    return absl::UnavailableError(absl::StrCat(chromium, " did not write ", png_path));
  }
  return absl::OkStatus();
}

// The status page of the coordinator whose gRPC address is o.address, from
// its Status answer; a wildcard host is replaced by the one dialled.
absl::StatusOr<std::string> PageOfCoordinator(const ReportOptions& o) {
  ClientFlags flags;
  flags.address = o.address;
  flags.name = o.name;
  flags.token_file = o.token_file;
  flags.connect_timeout_seconds = 10;
  absl::StatusOr<ConnectedBackend> connected = ConnectFromFlags(flags);
  if (!connected.ok()) return connected.status();
  absl::StatusOr<std::vector<QueueStats>> all = connected->backend->AllStats();
  if (!all.ok()) return all.status();
  std::string page = connected->backend->LastStatusPage();
  if (page.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator at ", o.address,
        " serves no status page: start it with `shardq serve --http HOST:PORT`"));
  }
  const size_t colon = page.rfind(':');
  const std::string host = page.substr(0, colon);
  if (host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]") {
    // The host of the coordinator that answered: the leader's advertised
    // address when --address named a job (a list or etcd://), else the one
    // dialled.
    std::string answered = o.address;
    if (std::optional<Leadership> l = connected->backend->LastLeadership();
        l.has_value() && !l->leader.empty()) {
      answered = l->leader;
    }
    page = absl::StrCat(answered.substr(0, answered.rfind(':')), page.substr(colon));
  }
  return page;
}

// True when --address names a job's coordinators (a list, or etcd://):
// there is no one HOST:PORT to try as a status page first.
bool NamesAJob(const std::string& address) {
  absl::StatusOr<CoordinatorAddress> parsed = ParseCoordinatorAddress(address);
  return parsed.ok() && !parsed->single();
}

}  // namespace

int RunReport(const ReportOptions& o) {
  ReportSource source;
  source.address = o.address;
  source.queue = o.name;
  source.page_of_grpc_address = [&o] { return PageOfCoordinator(o); };
  if (!o.token_file.empty()) {
    std::ifstream in(o.token_file);
    if (!in) {
      return ReportError("report", absl::InvalidArgumentError(
                                       absl::StrCat("cannot read --token-file '", o.token_file, "'")));
    }
    std::stringstream token;
    token << in.rdbuf();
    source.token = std::string(absl::StripAsciiWhitespace(token.str()));
  }
  if (NamesAJob(o.address)) {
    // The leader's Status answer names its page.
    absl::StatusOr<std::string> page = PageOfCoordinator(o);
    if (!page.ok()) return ReportError("report", page.status());
    source.address = *page;
    source.page_of_grpc_address = nullptr;
  }
  absl::StatusOr<std::string> html = FetchReport(source);
  if (!html.ok()) return ReportError("report", html.status());
  {
    std::ofstream out(o.out, std::ios::binary | std::ios::trunc);
    out << *html;
    if (!out.flush()) {
      return ReportError("report", absl::PermissionDeniedError(
                                       absl::StrCat("cannot write --out '", o.out, "'")));
    }
  }
  std::printf("wrote %s (%zu bytes)\n", o.out.c_str(), html->size());
  if (!o.png.empty()) {
    if (absl::Status s = Screenshot(o.out, o.png); !s.ok()) return ReportError("report", s);
    std::printf("wrote %s\n", o.png.c_str());
  }
  return 0;
}

}  // namespace shardq
