#include "src/observe/status_server.h"

#include <sys/socket.h>

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/strings/strip.h"
#include "httplib.h"
#include "src/core/process.h"
#include "src/observe/process_metrics.h"
#include "src/observe/status_json.h"
#include "src/server/listen_address.h"

namespace shardq {
namespace {

std::string Html(absl::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

// Percent-encodes everything but unreserved characters (RFC 3986).
std::string UrlEncode(absl::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsSampler>> MetricsSampler::Start(
    CoordinatorView view, const std::string& summary_dir, absl::Duration interval) {
  if (!view.all_stats) {
    return absl::InvalidArgumentError("MetricsSampler needs CoordinatorView::all_stats");
  }
  std::unique_ptr<EventFileWriter> writer;
  if (!summary_dir.empty()) {
    absl::StatusOr<std::unique_ptr<EventFileWriter>> w = EventFileWriter::Create(summary_dir);
    if (!w.ok()) return w.status();
    writer = *std::move(w);
  }
  return std::unique_ptr<MetricsSampler>(
      new MetricsSampler(std::move(view), std::move(writer), interval));
}

MetricsSampler::MetricsSampler(CoordinatorView view, std::unique_ptr<EventFileWriter> writer,
                               absl::Duration interval)
    : view_(std::move(view)), interval_(interval), writer_(std::move(writer)) {
  thread_ = std::thread([this] {
    NameThisThread("metrics");
    Loop();
  });
}

MetricsSampler::~MetricsSampler() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    stop_changed_.SignalAll();
  }
  thread_.join();
  SampleOnce();  // the final water level
}

void MetricsSampler::Loop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      const absl::Time wake = absl::Now() + interval_;
      while (!stopping_ && !stop_changed_.WaitWithDeadline(&mu_, wake)) {
      }
      if (stopping_) return;
    }
    SampleOnce();
  }
}

void MetricsSampler::SampleOnce() {
  const absl::Time now = absl::Now();
  std::vector<QueueStats> all = view_.all_stats();
  std::map<std::string, double> scalars;
  int64_t step;
  {
    absl::MutexLock lock(&mu_);
    step = step_++;
    for (const QueueStats& s : all) {
      auto it = last_.find(s.name);
      QueueMetrics m = DeriveMetrics(s, now, it == last_.end() ? nullptr : &it->second.first,
                                     it == last_.end() ? now : it->second.second);
      for (auto& [tag, value] : Scalars(m)) scalars[tag] = value;
      last_[s.name] = {s, now};
    }
  }
  if (writer_ != nullptr && !scalars.empty()) {
    // A failed write is retried at the next sample; the coordinator goes on.
    writer_->WriteScalars(step, now, scalars).IgnoreError();
    writer_->Flush().IgnoreError();
  }
}

std::vector<QueueMetrics> MetricsSampler::Current() {
  const absl::Time now = absl::Now();
  std::vector<QueueStats> all = view_.all_stats();
  std::vector<QueueMetrics> out;
  absl::MutexLock lock(&mu_);
  for (const QueueStats& s : all) {
    auto it = last_.find(s.name);
    out.push_back(DeriveMetrics(s, now, it == last_.end() ? nullptr : &it->second.first,
                                it == last_.end() ? now : it->second.second));
  }
  return out;
}

std::optional<JournalMetrics> MetricsSampler::JournalTotals() {
  if (!view_.journal_totals) return std::nullopt;
  return view_.journal_totals();
}

std::optional<LeadershipMetrics> MetricsSampler::Leadership() {
  if (!view_.leadership) return std::nullopt;
  return view_.leadership();
}

std::optional<SessionMetrics> MetricsSampler::Sessions() {
  if (!view_.sessions) return std::nullopt;
  return view_.sessions();
}

std::string StatusPage(const std::vector<QueueMetrics>& queues,
                       const std::string& metrics_href) {
  return absl::StrCat(
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>shardq</title>"
      "<meta http-equiv=\"refresh\" content=\"5\"><style>body{font-family:sans-serif}"
      "table{border-collapse:collapse}td,th{padding:2px 8px;border:1px solid #ccc}"
      ".bar{background:#ddd;width:200px}.fill{background:#4a8;height:12px}"
      ".slow{color:#b00;font-weight:bold}</style></head><body><h1>shardq coordinator</h1>",
      StatusPageBody(queues, metrics_href), "</body></html>");
}

std::string StatusPageBody(const std::vector<QueueMetrics>& queues,
                           const std::string& metrics_href) {
  std::string page;
  if (queues.empty()) page += "<p>No queues yet.</p>";
  for (const QueueMetrics& m : queues) {
    const QueueStats& s = m.stats;
    absl::StrAppend(&page, "<h2>queue ", Html(s.name), "</h2><p>", s.num_items, " items &times; ",
                    s.num_epochs, " epochs, seed ", s.seed,
                    !s.finished ? "" : s.failed > 0 ? ", finished with failures" : ", finished",
                    " &mdash; pending ", s.pending, ", leased ", s.leased, ", completed ",
                    s.completed, ", failed ", s.failed, ", lease expiries ", s.expired, ", duplicates ", s.duplicates,
                    ", splits ", s.splits, " (", s.split_items_open, " open)",
                    absl::StrFormat(", %.1f takes/s", m.take_rate), "</p>");
    page += "<table><tr><th>epoch</th><th>progress</th><th>pending</th><th>leased</th>"
            "<th>completed</th></tr>";
    for (size_t e = 0; e < s.epochs.size(); ++e) {
      const double done = s.num_items > 0 ? 100.0 * s.epochs[e].completed / s.num_items : 0;
      absl::StrAppend(&page, "<tr><td>", s.epochs[e].epoch,
                      "</td><td><div class=\"bar\"><div class=\"fill\" "
                      "style=\"width:", absl::StrFormat("%.0f", done), "%\"></div></div></td><td>",
                      s.epochs[e].pending, "</td><td>", s.epochs[e].leased, "</td><td>",
                      s.epochs[e].completed, "</td></tr>");
    }
    page += "</table>";
    if (!s.failed_items.empty()) {
      page += "<table><tr><th>failed item</th><th>epoch</th><th>attempts</th>"
              "<th>last reason</th></tr>";
      for (const FailedItemStats& f : s.failed_items) {
        absl::StrAppend(&page, "<tr><td>", Html(f.item), "</td><td>", f.epoch, "</td><td>",
                        f.attempts, "</td><td>", Html(f.reason), "</td></tr>");
      }
      page += "</table>";
    }
    // Stragglers: workers below half the median rate.
    std::vector<double> rates;
    for (const auto& [name, w] : s.workers) rates.push_back(w.items_per_second);
    std::sort(rates.begin(), rates.end());
    const double median = rates.empty() ? 0 : rates[rates.size() / 2];
    page += "<table><tr><th>worker</th><th>completed</th><th>held</th><th>items/s</th></tr>";
    for (const auto& [name, w] : s.workers) {
      const bool slow = median > 0 && w.items_per_second < 0.5 * median;
      absl::StrAppend(&page, "<tr", slow ? " class=\"slow\"" : "", "><td>", Html(name),
                      slow ? " (straggler)" : "", "</td><td>", w.completed, "</td><td>", w.held,
                      "</td><td>", absl::StrFormat("%.2f", w.items_per_second), "</td></tr>");
    }
    page += "</table>";
  }
  absl::StrAppend(&page, "<p><a href=\"", Html(metrics_href), "\">/metrics</a></p>");
  return page;
}

bool HttpRequestAllowed(const StatusHttpOptions& options, absl::string_view bearer_header,
                        absl::string_view query_token) {
  if (options.token.empty() || options.public_page) return true;
  const bool header_ok = absl::ConsumePrefix(&bearer_header, "Bearer ") &&
                         ConstantTimeEquals(bearer_header, options.token);
  const bool query_ok = ConstantTimeEquals(query_token, options.token);
  return header_ok || query_ok;
}

namespace {

constexpr size_t kDefaultTimelineLimit = 20000;
constexpr size_t kMaxTimelineLimit = 200000;

// A page opened with ?token= links to the metrics with it.
std::string MetricsHref(const httplib::Request& req) {
  const std::string token = req.get_param_value("token");
  return token.empty() ? "/metrics" : "/metrics?token=" + UrlEncode(token);
}

void JsonError(httplib::Response& res, int status, const std::string& message) {
  res.status = status;
  res.set_content(nlohmann::json({{"error", message}}).dump() + "\n",
                  "application/json; charset=utf-8");
}

nlohmann::json ServerJson(MetricsSampler* sampler, const Observations* observations) {
  const absl::Time now = absl::Now();
  nlohmann::json out = {{"version", std::string(ShardqVersion())},
                        {"now", absl::ToDoubleSeconds(now - absl::UnixEpoch())}};
  if (observations != nullptr) {
    out["started"] = absl::ToDoubleSeconds(observations->started - absl::UnixEpoch());
    out["uptime_seconds"] = absl::ToDoubleSeconds(now - observations->started);
    out["state_dir"] = observations->state_dir;
    out["timeline_bound"] = observations->timeline.events_per_queue();
  }
  if (std::optional<JournalMetrics> j = sampler->JournalTotals()) {
    out["journal"] = {{"commits", j->commits}, {"entries", j->entries}, {"bytes", j->bytes},
                      {"snapshots", j->snapshots}};
  } else {
    out["journal"] = nullptr;
  }
  if (std::optional<LeadershipMetrics> l = sampler->Leadership()) {
    out["leadership"] = {{"job", l->job},         {"leading", l->leading},
                         {"failovers", l->failovers}, {"leader", l->leader},
                         {"term", l->term}};
  } else {
    out["leadership"] = nullptr;
  }
  return out;
}

std::vector<QueueStats> StatsOf(const std::vector<QueueMetrics>& metrics) {
  std::vector<QueueStats> out;
  out.reserve(metrics.size());
  for (const QueueMetrics& m : metrics) out.push_back(m.stats);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<StatusHttpServer>> StatusHttpServer::Start(
    MetricsSampler* sampler, const StatusHttpOptions& options,
    const Observations* observations) {
  absl::StatusOr<ListenAddress> listen = ParseListenAddress("--http", options.listen);
  if (!listen.ok()) return listen.status();
  if (options.threads < 1 || options.io_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the status page needs threads >= 1 and io_timeout > 0");
  }
  std::unique_ptr<StatusHttpServer> out(new StatusHttpServer());
  out->server_ = std::make_unique<httplib::Server>();
  httplib::Server& server = *out->server_;
  // cpp-httplib's default sets SO_REUSEPORT, with which a second process
  // binds the same port and takes some of the requests.
  server.set_socket_options([](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Its default pool has max(8, cores - 1) threads, each held by a
  // connection until the client has sent a request: 8 silent clients
  // stopped the page. More threads, and clients that stay silent lose
  // their thread after io_timeout (per read and write, and between the
  // requests of a kept-alive connection).
  const int threads = options.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  const int64_t timeout_us = absl::ToInt64Microseconds(options.io_timeout);
  server.set_read_timeout(timeout_us / 1'000'000, timeout_us % 1'000'000);
  server.set_write_timeout(timeout_us / 1'000'000, timeout_us % 1'000'000);
  server.set_keep_alive_timeout(std::max<int64_t>(1, timeout_us / 1'000'000));
  server.set_keep_alive_max_count(20);
  server.set_payload_max_length(64 << 10);  // GET only: no request needs a body
  server.set_pre_routing_handler([options](const httplib::Request& req,
                                           httplib::Response& res) {
    const std::string header = req.get_header_value("Authorization");
    const std::string query = req.get_param_value("token");
    if (HttpRequestAllowed(options, header, query)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.status = 401;
    res.set_header("WWW-Authenticate", "Bearer realm=\"shardq\"");
    res.set_content(
        "401: this coordinator requires its token (--token-file): send "
        "\"Authorization: Bearer <token>\" or add ?token=<token> to the URL\n",
        "text/plain; charset=utf-8");
    return httplib::Server::HandlerResponse::Handled;
  });
  server.Get("/metrics", [sampler, observations](const httplib::Request&,
                                                  httplib::Response& res) {
    const std::optional<JournalMetrics> journal = sampler->JournalTotals();
    std::string text = PrometheusText(sampler->Current(), journal ? &*journal : nullptr);
    text += BuildInfoText(ShardqVersion());
    if (std::optional<LeadershipMetrics> leadership = sampler->Leadership()) {
      text += LeadershipText(*leadership);
    }
    if (std::optional<SessionMetrics> sessions = sampler->Sessions()) {
      text += SessionsText(*sessions);
    }
    if (observations != nullptr) {
      text += observations->take_latency.PrometheusText(
          "shardq_take_duration_seconds",
          "Take calls from their arrival to their answer, waiting for items included.");
      text += observations->complete_latency.PrometheusText(
          "shardq_complete_duration_seconds",
          "Complete calls from their arrival to their answer (durable with --state-dir).");
    }
    // Without /proc (not Linux) the process_* family is left out.
    if (absl::StatusOr<ProcessMetrics> process = ReadProcessMetrics(); process.ok()) {
      text += ProcessMetricsText(*process);
    }
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/", [sampler](const httplib::Request& req, httplib::Response& res) {
    // Drawn by the server first (and for browsers without script); the
    // script then replaces it every second.
    res.set_content(LivePage(StatusPageBody(sampler->Current(), MetricsHref(req))),
                    "text/html; charset=utf-8");
  });
  server.Get("/api/status", [sampler](const httplib::Request&, httplib::Response& res) {
    res.set_content(StatusJson(StatsOf(sampler->Current())).dump() + "\n",
                    "application/json; charset=utf-8");
  });
  server.Get("/api/server", [sampler, observations](const httplib::Request&,
                                                    httplib::Response& res) {
    res.set_content(ServerJson(sampler, observations).dump() + "\n",
                    "application/json; charset=utf-8");
  });
  server.Get("/api/timeline", [sampler, observations](const httplib::Request& req,
                                                      httplib::Response& res) {
    if (observations == nullptr) {
      return JsonError(res, 404, "this server keeps no timeline");
    }
    const std::string queue = req.get_param_value("queue");
    if (queue.empty()) return JsonError(res, 400, "/api/timeline needs ?queue=NAME");
    bool known = false;
    for (const QueueMetrics& m : sampler->Current()) known = known || m.stats.name == queue;
    if (!known) return JsonError(res, 404, absl::StrCat("no queue named '", queue, "'"));
    const int64_t now_us = absl::ToUnixMicros(absl::Now());
    int64_t since_us = now_us - int64_t{600} * 1'000'000;
    if (req.has_param("since")) {
      double since = 0;
      if (!absl::SimpleAtod(req.get_param_value("since"), &since) || !(since >= 0) ||
          since > 1e11) {
        return JsonError(res, 400,
                         absl::StrCat("since must be seconds since the Unix epoch, got '",
                                      req.get_param_value("since"), "'"));
      }
      since_us = static_cast<int64_t>(since * 1e6);
    }
    size_t limit = kDefaultTimelineLimit;
    if (req.has_param("limit")) {
      int64_t n = 0;
      if (!absl::SimpleAtoi(req.get_param_value("limit"), &n) || n < 1 ||
          n > static_cast<int64_t>(kMaxTimelineLimit)) {
        return JsonError(res, 400, absl::StrCat("limit must be in [1, ", kMaxTimelineLimit,
                                                "], got '", req.get_param_value("limit"), "'"));
      }
      limit = static_cast<size_t>(n);
    }
    res.set_content(
        TimelineJson(observations->timeline, queue, since_us, now_us, limit).dump() + "\n",
        "application/json; charset=utf-8");
  });
  server.Get("/static", [sampler](const httplib::Request& req, httplib::Response& res) {
    res.set_content(StatusPage(sampler->Current(), MetricsHref(req)), "text/html; charset=utf-8");
  });
  if (listen->port == 0) {
    out->port_ = server.bind_to_any_port(listen->host);
  } else {
    out->port_ = server.bind_to_port(listen->host, listen->port) ? listen->port : -1;
  }
  if (out->port_ <= 0) {
    if (absl::Status s = ExplainBindFailure("--http", *listen); !s.ok()) return s;
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen->ToString(), " (--http)"));
  }
  httplib::Server* running = out->server_.get();
  out->thread_ = std::thread([running] {
    NameThisThread("http");
    running->listen_after_bind();
  });
  // httplib's stop() does nothing before the accept loop has marked itself
  // running, and the loop would then never end: destroying the server
  // right after Start hung its join.
  while (!running->is_running()) absl::SleepFor(absl::Milliseconds(1));
  return out;
}

StatusHttpServer::~StatusHttpServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shardq
