// Live view of a coordinator: a sampler that turns queue stats into rates
// (and, with a summary directory, TensorBoard event files), and an HTTP
// server with /metrics (Prometheus text) and a small status page.
#ifndef SHARDQ_OBSERVE_STATUS_SERVER_H_
#define SHARDQ_OBSERVE_STATUS_SERVER_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/observe/summary_writer.h"
#include "src/observe/timeline.h"
#include "shardq/work_item.h"

namespace httplib {
class Server;
}

namespace shardq {

// What observe reads from a coordinator, as functions: observe includes no
// server code (`shardq serve` wires these to its CoordinatorImpl).
struct CoordinatorView {
  // Every queue's stats now. Required.
  std::function<std::vector<QueueStats>()> all_stats;
  // The journal's totals; nullopt (or no function) for a coordinator in memory.
  std::function<std::optional<JournalMetrics>()> journal_totals;
  // A highly available coordinator's role; nullopt (or no function) for
  // one that always leads.
  std::function<std::optional<LeadershipMetrics>()> leadership;
  // The Session streams it holds; nullopt (or no function) when unknown
  // (a standby, an embedded coordinator).
  std::function<std::optional<SessionMetrics>()> sessions;
};

// Samples every queue of a coordinator every `interval`. Thread-safe.
class MetricsSampler {
 public:
  // What `view` calls must stay valid while the sampler lives. With a
  // non-empty summary_dir, each sample is also written as TensorBoard
  // scalars there. INVALID_ARGUMENT without view.all_stats.
  static absl::StatusOr<std::unique_ptr<MetricsSampler>> Start(CoordinatorView view,
                                                               const std::string& summary_dir,
                                                               absl::Duration interval);
  ~MetricsSampler();

  // Metrics of every queue now, with rates over the last sampling interval.
  std::vector<QueueMetrics> Current();
  // The coordinator's journal totals now; nullopt in memory.
  std::optional<JournalMetrics> JournalTotals();
  // The coordinator's role in a highly available job; nullopt otherwise.
  std::optional<LeadershipMetrics> Leadership();
  // The Session streams the coordinator holds; nullopt when unknown.
  std::optional<SessionMetrics> Sessions();

 private:
  MetricsSampler(CoordinatorView view, std::unique_ptr<EventFileWriter> writer,
                 absl::Duration interval);
  void Loop();
  void SampleOnce();

  const CoordinatorView view_;
  const absl::Duration interval_;
  std::unique_ptr<EventFileWriter> writer_;  // used by the sampling thread only
  absl::Mutex mu_;
  std::map<std::string, std::pair<QueueStats, absl::Time>> last_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar stop_changed_;
  std::thread thread_;
};

struct StatusHttpOptions {
  // HOST:PORT; port 0 picks one (see StatusHttpServer::port()).
  std::string listen;
  // Non-empty: every request must carry it, as "Authorization: Bearer
  // <token>" or "?token=<token>" (compared in constant time); others get
  // 401. The page shows queue names, seeds and worker names.
  std::string token;
  // Serve without the token even when one is set (`serve --http-public`).
  bool public_page = false;
  // Connections served at once. A client that sends nothing for
  // `io_timeout` (or cannot take the answer for as long) is dropped, so
  // half-sent requests hold a thread for at most that long, and fewer than
  // `threads` of them never delay anyone.
  int threads = 64;
  absl::Duration io_timeout = absl::Seconds(3);
};

// Serves GET /metrics (Prometheus text: every queue, the journal, the
// process_* family, shardq_build_info and, with observations, the
// shardq_take/complete_duration_seconds histograms), GET / (the live page,
// which polls the JSON below every second), GET /static (the same as plain
// HTML, no script), GET /api/status (`status --json`'s document),
// GET /api/timeline?queue=Q&since=T&limit=N (item events since T, seconds
// since the Unix epoch; default: the last 10 minutes, at most 20000 events,
// the newest kept) and GET /api/server (version, uptime, state dir,
// journal totals). The port is bound exclusively (no SO_REUSEPORT).
// Thread-safe.
class StatusHttpServer {
 public:
  // INVALID_ARGUMENT naming --http for a bad address (port outside
  // 0..65535); UNAVAILABLE "address H:P already in use" when another
  // process holds the port, naming the errno for other bind failures.
  // `observations` (may be null: no timeline, no latency histograms) must
  // outlive the server, like `sampler`.
  static absl::StatusOr<std::unique_ptr<StatusHttpServer>> Start(
      MetricsSampler* sampler, const StatusHttpOptions& options,
      const Observations* observations = nullptr);
  ~StatusHttpServer();
  int port() const { return port_; }

 private:
  StatusHttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// The HTML status page of these queues (exposed for tests); its link to the
// metrics goes to `metrics_href`.
std::string StatusPage(const std::vector<QueueMetrics>& queues,
                       const std::string& metrics_href = "/metrics");
// What StatusPage shows inside <body>, after its title.
std::string StatusPageBody(const std::vector<QueueMetrics>& queues,
                           const std::string& metrics_href = "/metrics");

// The live page: one HTML document with its script and style inline (no
// network access needed beyond this server), showing `initial_body` (HTML,
// e.g. StatusPageBody) until its script has drawn. With `report_data` (the
// JSON of a report: {"server", "status", "timeline"}) it draws that data
// once instead of polling: `shardq report` writes this file.
std::string LivePage(const std::string& initial_body, const std::string& report_data = "");

// Whether a request with this Authorization header and ?token= parameter
// (each empty when absent) may be served: always without a token or with
// public_page; else when the header is "Bearer <token>" or the parameter
// is the token.
bool HttpRequestAllowed(const StatusHttpOptions& options, absl::string_view bearer_header,
                        absl::string_view query_token);

}  // namespace shardq

#endif  // SHARDQ_OBSERVE_STATUS_SERVER_H_
