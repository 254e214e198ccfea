// `shardq serve`: runs the coordinator until SIGINT or SIGTERM.
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/log/log.h"
#include "src/observe/status_server.h"
#include "src/observe/timeline.h"
#include "src/server/coordinator_impl.h"
#include "src/server/grpc_service.h"
#include "src/server/ha_coordinator.h"
#include "src/server/listen_address.h"
#include "src/server/process_memory.h"
#include "tools/verbs.h"

namespace shardq {

CLI::App* AddServe(CLI::App& app, ServeOptions* o) {
  CLI::App* cmd = app.add_subcommand("serve", "Run the coordinator (gRPC)");
  cmd->add_option("--listen", o->listen,
                  "HOST:PORT to listen on (loopback unless told otherwise; port 0 picks one)")
      ->capture_default_str();
  cmd->add_option("--token-file", o->token_file,
                  "file holding the token every call must carry");
  cmd->add_option("--tls-cert", o->tls_cert, "PEM certificate chain (with --tls-key)");
  cmd->add_option("--tls-key", o->tls_key, "PEM private key (with --tls-cert)");
  cmd->add_option("--state-dir", o->state_dir,
                  "journal every change here; a restarted coordinator continues the run");
  cmd->add_option("--http", o->http,
                  "HOST:PORT for /metrics (Prometheus) and the status page (e.g. 127.0.0.1:7078)");
  cmd->add_option("--summary-dir", o->summary_dir,
                  "write TensorBoard event files of every queue's water level here");
  cmd->add_option("--summary-interval", o->summary_interval_seconds,
                  "seconds between samples for --summary-dir and rates")
      ->check(CLI::Range(0.05, 3600.0))->capture_default_str();
  cmd->add_option("--port-file", o->port_file,
                  "write the bound port here once serving (useful with port 0)");
  cmd->add_flag("--http-public", o->http_public,
                "serve --http without the --token-file token (by default it is required "
                "there too)");
  cmd->add_option("--etcd", o->etcd,
                  "HOST:PORT[,HOST:PORT...] of etcd members: keep the job's state there and "
                  "lead or stand by for it (high availability; needs --job)");
  cmd->add_option("--job", o->job, "the job whose coordinators share state in etcd (--etcd)");
  cmd->add_option("--advertise", o->advertise,
                  "HOST:PORT clients are told to dial for this coordinator (--etcd; default: "
                  "the --listen address)");
  cmd->add_option("--etcd-lease-ttl", o->etcd_lease_ttl_seconds,
                  "seconds of the leader's etcd lease: a stopped leader is replaced about this "
                  "long after (--etcd)")
      ->check(CLI::Range(1, 3600))->capture_default_str();
  cmd->add_option("--max-request-mb", o->max_request_mb,
                  "largest request accepted, in MiB; larger ones get RESOURCE_EXHAUSTED")
      ->check(CLI::Range(1, 2047))->capture_default_str();
  cmd->add_option("--session-queues", o->session_queues,
                  "completion queues (one thread each) the workers' Session streams are spread "
                  "over; more: shorter per-message scans in gRPC, more idle threads")
      ->check(CLI::Range(1, 64))->capture_default_str();
  o->max_sessions = ServerOptions().max_sessions;
  cmd->add_option("--max-sessions", o->max_sessions,
                  "Session streams (one per worker and queue) held at once; more are refused "
                  "with RESOURCE_EXHAUSTED (each holds ~20 KiB)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))->capture_default_str();
  return cmd;
}

namespace {

// 2 for a bad argument (as for the CLI's own checks), 1 otherwise.
int Fail(const absl::Status& status) {
  std::fprintf(stderr, "shardq serve: %s\n", status.ToString().c_str());
  return absl::IsInvalidArgument(status) ? 2 : 1;
}

// A store's totals as the page and /metrics show them.
std::optional<JournalMetrics> MetricsOf(const std::optional<StoreTotals>& totals) {
  if (!totals.has_value()) return std::nullopt;
  JournalMetrics m;
  m.commits = totals->commits;
  m.entries = totals->entries;
  m.bytes = totals->bytes;
  m.snapshots = totals->snapshots;
  return m;
}

// What the status page and /metrics read from the coordinator.
CoordinatorView ViewOf(CoordinatorServer* server) {
  CoordinatorImpl* coordinator = server->coordinator();
  CoordinatorView view;
  view.all_stats = [coordinator] { return coordinator->AllStats(); };
  view.journal_totals = [coordinator] { return MetricsOf(coordinator->journal_totals()); };
  view.sessions = [server]() -> std::optional<SessionMetrics> {
    return SessionMetrics{server->live_sessions(), server->max_sessions()};
  };
  return view;
}

// What the status page and /metrics read from a highly available
// coordinator: its queues while it leads, nothing while it stands by, and
// who leads either way.
CoordinatorView ViewOf(HaCoordinator* ha) {
  CoordinatorView view;
  view.all_stats = [ha] { return ha->AllStats(); };
  view.journal_totals = [ha] { return MetricsOf(ha->journal_totals()); };
  view.leadership = [ha]() -> std::optional<LeadershipMetrics> {
    const Leadership known = ha->leadership(/*standbys=*/false);
    LeadershipMetrics m;
    m.job = known.job;
    m.leading = ha->leading();
    m.failovers = known.failovers;
    m.leader = known.leader;
    m.term = known.term;
    return m;
  };
  view.sessions = [ha]() -> std::optional<SessionMetrics> {
    std::optional<std::pair<int64_t, int64_t>> s = ha->sessions();
    if (!s.has_value()) return std::nullopt;
    return SessionMetrics{s->first, s->second};
  };
  return view;
}

// Writes "PORT\n" to `path` (through path.tmp and a rename, so a reader
// never sees half of it). A script waits for this file: failing to write it
// must stop the server rather than leave the script waiting.
absl::Status WritePortFile(const std::string& path, int port) {
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (out) out << port << "\n" << std::flush;
    if (!out) {
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot write --port-file '", path, "' (as '", tmp, "'): ", std::strerror(errno)));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot write --port-file '", path, "': rename: ", std::strerror(error)));
  }
  return absl::OkStatus();
}

// Before anything starts: a --port-file that cannot be written is refused
// at once (its directory is missing, say), not after the server is up.
absl::Status CheckPortFile(const std::string& path) {
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  if (!out) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot write --port-file '", path, "' (as '", tmp, "'): ", std::strerror(errno)));
  }
  out.close();
  std::remove(tmp.c_str());
  return absl::OkStatus();
}

// Where the status page listens, told to clients in every Status answer
// (ServerOptions::status_page) once it is up.
class PageAddress {
 public:
  void Set(std::string address) {
    absl::MutexLock lock(&mu_);
    address_ = std::move(address);
  }
  std::string Get() const {
    absl::MutexLock lock(&mu_);
    return address_;
  }

 private:
  mutable absl::Mutex mu_;
  std::string address_ ABSL_GUARDED_BY(mu_);
};

// The status page and /metrics on o.http (nullptr when it is not asked
// for), announced on stdout and noted in `address`.
absl::StatusOr<std::unique_ptr<StatusHttpServer>> StartPage(const ServeOptions& o,
                                                            const std::string& token,
                                                            MetricsSampler* sampler,
                                                            Observations* observations,
                                                            PageAddress* address) {
  if (o.http.empty()) return nullptr;
  StatusHttpOptions http_options;
  http_options.listen = o.http;
  http_options.token = token;
  http_options.public_page = o.http_public;
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> http =
      StatusHttpServer::Start(sampler, http_options, observations);
  if (!http.ok()) return http.status();
  const std::string host = o.http.substr(0, o.http.rfind(':'));
  std::printf("status page and /metrics on http://%s:%d/%s\n", host.c_str(), (*http)->port(),
              token.empty() || o.http_public ? "" : " (token required)");
  address->Set(absl::StrCat(host, ":", (*http)->port()));
  return http;
}

// Feeds the coordinator's updates and call times to the page's timeline and
// the latency histograms.
class ObservationFeed final : public CoordinatorImpl::Observer {
 public:
  explicit ObservationFeed(Observations* observations) : observations_(observations) {}
  void OnUpdate(absl::string_view queue, const journal::Update& update) override {
    observations_->timeline.Record(queue, update);
  }
  void OnCallDone(Call call, absl::Duration took) override {
    (call == Call::kTake ? observations_->take_latency : observations_->complete_latency)
        .Observe(took);
  }

 private:
  Observations* const observations_;
};

}  // namespace

namespace {

// A stop signal within `wait` (then it is logged): true.
bool StopSignalled(const sigset_t& stop_signals, absl::Duration wait) {
  const timespec ts = absl::ToTimespec(wait);
  const int signal_number = sigtimedwait(&stop_signals, nullptr, &ts);
  if (signal_number <= 0) return false;
  SHARDQ_LOG_INFO("signal {} ({}), shutting down", signal_number, strsignal(signal_number));
  return true;
}

// `serve --etcd`: stands by or leads until a stop signal (see
// src/server/ha_coordinator.h); the page and /metrics live as long as the
// process, showing the queues while it leads.
int RunServeHa(const ServeOptions& o, const ServerOptions& server, PageAddress* page,
               const sigset_t& stop_signals) {
  if (o.job.empty()) {
    return Fail(
        absl::InvalidArgumentError("--etcd needs --job NAME (the job whose state it keeps)"));
  }
  HaOptions ha_options;
  ha_options.etcd = o.etcd;
  ha_options.job = o.job;
  ha_options.advertise = o.advertise;
  ha_options.lease_ttl_seconds = o.etcd_lease_ttl_seconds;
  ha_options.server = server;
  absl::StatusOr<std::unique_ptr<HaCoordinator>> ha = HaCoordinator::Start(ha_options);
  if (!ha.ok()) return Fail(ha.status());
  absl::StatusOr<std::unique_ptr<MetricsSampler>> sampler = MetricsSampler::Start(
      ViewOf(ha->get()), o.summary_dir, absl::Seconds(o.summary_interval_seconds));
  if (!sampler.ok()) return Fail(sampler.status());
  Observations observations;
  ObservationFeed feed(&observations);
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> http =
      StartPage(o, server.token, sampler->get(), &observations, page);
  if (!http.ok()) return Fail(http.status());
  // Only now: an early return must not leave the coordinator a dead feed.
  if (*http != nullptr) (*ha)->SetObserver(&feed);
  std::printf("shardq coordinator of job '%s' on port %d (advertised as %s), state in etcd at "
              "%s%s%s; leading or standing by\n",
              o.job.c_str(), (*ha)->port(), (*ha)->advertise().c_str(), o.etcd.c_str(),
              server.token.empty() ? "" : " (token required)",
              server.tls_cert_file.empty() ? "" : " (TLS)");
  std::fflush(stdout);
  int exit_code = 0;
  if (absl::Status s = WritePortFile(o.port_file, (*ha)->port()); !s.ok()) {
    exit_code = Fail(s);
  }
  while (exit_code == 0 && !StopSignalled(stop_signals, absl::Seconds(1))) {
    if (absl::Status s = (*ha)->fatal(); !s.ok()) {
      SHARDQ_LOG_ERROR("job '{}': {}; stopping", o.job, s.ToString());
      exit_code = 1;
      break;
    }
  }
  http->reset();
  sampler->reset();
  (*ha)->SetObserver(nullptr);
  ha->reset();  // a leader snapshots and gives up its lease: a standby takes over at once
  return exit_code;
}

}  // namespace

int RunServe(const ServeOptions& o) {
  // The library logs warnings only; a coordinator also says what it does
  // (queues created, leases expired, recovery, shutdown). SHARDQ_LOG_LEVEL
  // overrides.
  logging::SetDefaultLevel(spdlog::level::info);
  TuneAllocatorForServing();  // src/server/process_memory.h
  if (o.etcd.empty() && (!o.job.empty() || !o.advertise.empty())) {
    return Fail(absl::InvalidArgumentError(
        "--job and --advertise belong to a highly available coordinator: add --etcd "
        "HOST:PORT[,HOST:PORT...]"));
  }
  if (absl::Status s = CheckPortFile(o.port_file); !s.ok()) return Fail(s);
  // Both addresses are checked before anything starts: a bad --http or a
  // port someone holds stops serve before it opens the state dir.
  if (!o.http.empty()) {
    absl::StatusOr<ListenAddress> http = ParseListenAddress("--http", o.http);
    if (!http.ok()) return Fail(http.status());
    if (http->port != 0) {
      if (absl::Status s = ExplainBindFailure("--http", *http); !s.ok()) return Fail(s);
    }
  }
  ServerOptions options;
  options.listen = o.listen;
  options.max_request_bytes = o.max_request_mb << 20;
  options.session_queues = o.session_queues;
  options.max_sessions = o.max_sessions;
  options.tls_cert_file = o.tls_cert;
  options.tls_key_file = o.tls_key;
  options.state_dir = o.state_dir;
  if (!o.token_file.empty()) {
    std::ifstream in(o.token_file);
    if (!in) {
      std::fprintf(stderr, "shardq serve: cannot read --token-file '%s'\n", o.token_file.c_str());
      return 2;
    }
    std::stringstream token;
    token << in.rdbuf();
    options.token = std::string(absl::StripAsciiWhitespace(token.str()));
    if (options.token.empty()) {
      std::fprintf(stderr, "shardq serve: --token-file '%s' is empty\n", o.token_file.c_str());
      return 2;
    }
  }
  // Block the stop signals before gRPC starts its threads, then wait for
  // them on this thread.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // Outlives the server: its Status answers read it.
  const auto page = std::make_shared<PageAddress>();
  options.status_page = [page] { return page->Get(); };
  if (!o.etcd.empty()) return RunServeHa(o, options, page.get(), stop_signals);

  absl::StatusOr<std::unique_ptr<CoordinatorServer>> server = CoordinatorServer::Start(options);
  if (!server.ok()) return Fail(server.status());
  absl::StatusOr<std::unique_ptr<MetricsSampler>> sampler = MetricsSampler::Start(
      ViewOf(server->get()), o.summary_dir,
      absl::Seconds(o.summary_interval_seconds));
  if (!sampler.ok()) return Fail(sampler.status());
  // Declared before `http` and the observer hook, so both end before it.
  Observations observations;
  observations.state_dir = o.state_dir;
  ObservationFeed feed(&observations);
  absl::StatusOr<std::unique_ptr<StatusHttpServer>> http =
      StartPage(o, options.token, sampler->get(), &observations, page.get());
  if (!http.ok()) return Fail(http.status());
  // Only now: an early return must not leave the coordinator a dead feed.
  if (*http != nullptr) (*server)->coordinator()->SetObserver(&feed);
  if (!options.state_dir.empty()) {
    const CoordinatorImpl::Recovery& r = (*server)->coordinator()->recovery();
    SHARDQ_LOG_INFO("state dir {}: recovered {} queue(s) in {:.2f} s ({} update(s) replayed "
                    "after their snapshots)",
                    options.state_dir, r.queues, absl::ToDoubleSeconds(r.took),
                    r.updates_replayed);
  }
  const std::string host = o.listen.substr(0, o.listen.rfind(':'));
  std::printf("shardq coordinator listening on %s:%d%s%s%s%s\n", host.c_str(),
              (*server)->port(), options.token.empty() ? "" : " (token required)",
              options.tls_cert_file.empty() ? "" : " (TLS)",
              options.state_dir.empty() ? "" : ", state in ", options.state_dir.c_str());
  std::fflush(stdout);
  absl::Status port_file = WritePortFile(o.port_file, (*server)->port());
  // Until a stop signal, or until the journal fails: a coordinator that
  // cannot store state stops (fail-stop, as after a failed fsync nothing
  // written since can be trusted); restarted, it recovers every change it
  // acknowledged, and clients retry through the gap.
  int exit_code = port_file.ok() ? 0 : Fail(port_file);
  while (exit_code == 0 && !StopSignalled(stop_signals, absl::Seconds(1))) {
    if (absl::Status s = (*server)->coordinator()->Writable(); !s.ok()) {
      SHARDQ_LOG_ERROR("{}; stopping (a restart recovers every acknowledged change)",
                       std::string(s.message()));
      exit_code = 1;
      break;
    }
  }
  http->reset();
  sampler->reset();  // writes the final sample
  (*server)->coordinator()->SetObserver(nullptr);
  (*server)->Shutdown();
  return exit_code;
}

}  // namespace shardq
