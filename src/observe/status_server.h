// Live view of a coordinator: a sampler that turns queue stats into rates
// (and, with a summary directory, TensorBoard event files), and an HTTP
// server with /metrics (Prometheus text) and a small status page.
#ifndef SHARDQ_OBSERVE_STATUS_SERVER_H_
#define SHARDQ_OBSERVE_STATUS_SERVER_H_

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
#include "src/server/coordinator_impl.h"

namespace httplib {
class Server;
}

namespace shardq {

// Samples every queue of a coordinator every `interval`. Thread-safe.
class MetricsSampler {
 public:
  // `coordinator` must outlive the sampler. With a non-empty summary_dir,
  // each sample is also written as TensorBoard scalars there.
  static absl::StatusOr<std::unique_ptr<MetricsSampler>> Start(CoordinatorImpl* coordinator,
                                                               const std::string& summary_dir,
                                                               absl::Duration interval);
  ~MetricsSampler();

  // Metrics of every queue now, with rates over the last sampling interval.
  std::vector<QueueMetrics> Current();
  // The coordinator's journal totals now; nullopt in memory.
  std::optional<JournalMetrics> JournalTotals();

 private:
  MetricsSampler(CoordinatorImpl* coordinator, std::unique_ptr<EventFileWriter> writer,
                 absl::Duration interval);
  void Loop();
  void SampleOnce();

  CoordinatorImpl* const coordinator_;
  const absl::Duration interval_;
  std::unique_ptr<EventFileWriter> writer_;  // used by the sampling thread only
  absl::Mutex mu_;
  std::map<std::string, std::pair<QueueStats, absl::Time>> last_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::CondVar stop_changed_;
  std::thread thread_;
};

// Serves GET /metrics and GET / (HTML) on `listen` (HOST:PORT; port 0 picks
// one). Thread-safe.
class StatusHttpServer {
 public:
  static absl::StatusOr<std::unique_ptr<StatusHttpServer>> Start(MetricsSampler* sampler,
                                                                 const std::string& listen);
  ~StatusHttpServer();
  int port() const { return port_; }

 private:
  StatusHttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

// The HTML status page of these queues (exposed for tests).
std::string StatusPage(const std::vector<QueueMetrics>& queues);

}  // namespace shardq

#endif  // SHARDQ_OBSERVE_STATUS_SERVER_H_
