// Publishes queue water levels: TensorBoard event files (a TFRecord file of
// Event protos with scalar summaries) and Prometheus text.
#ifndef SHARDQ_OBSERVE_SUMMARY_WRITER_H_
#define SHARDQ_OBSERVE_SUMMARY_WRITER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shardq/work_item.h"

namespace shardq {

class TFRecordWriter;

// Scalars derived from two consecutive snapshots of a queue.
struct QueueMetrics {
  QueueStats stats;
  double take_rate = 0;      // hand-outs per second since the previous sample
  double complete_rate = 0;  // completions per second since the previous sample
};

// Computes rates from the previous sample of the same queue (none: 0).
QueueMetrics DeriveMetrics(const QueueStats& now, absl::Time at, const QueueStats* before,
                           absl::Time before_at);

// The scalars of one queue, tag -> value, e.g.
// "shardq/<queue>/pending", "shardq/<queue>/splits",
// "shardq/<queue>/epoch_0/completed", "shardq/<queue>/take_rate",
// "shardq/<queue>/worker/<id>/completed".
std::map<std::string, double> Scalars(const QueueMetrics& m);

// Writes events.out.tfevents.<seconds>.<host>.shardq in a log directory.
// Not thread-safe.
class EventFileWriter {
 public:
  // Creates `logdir` if needed. Errors name the directory.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(const std::string& logdir);
  ~EventFileWriter();

  // One Event with a scalar summary per entry, at `step` and `wall_time`.
  absl::Status WriteScalars(int64_t step, absl::Time wall_time,
                            const std::map<std::string, double>& scalars);
  absl::Status Flush();
  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::unique_ptr<TFRecordWriter> writer);
  std::string path_;
  std::unique_ptr<TFRecordWriter> writer_;
};

// A durable coordinator's journal: what its commits stored so far.
struct JournalMetrics {
  int64_t commits = 0;    // fsyncs
  int64_t entries = 0;    // updates and snapshots; entries per commit share an fsync
  int64_t bytes = 0;
  int64_t snapshots = 0;
};

// Prometheus text exposition (version 0.0.4) of every queue, and of the
// journal when there is one (shardq_journal_*_total counters). What only
// grows is a counter named *_total (shardq_items_completed_total,
// shardq_items_taken_total, shardq_worker_items_completed_total, ...);
// levels are gauges (shardq_items_pending, shardq_items_leased, ...). No
// rates: Prometheus computes them from the counters (rate(...[1m])).
std::string PrometheusText(const std::vector<QueueMetrics>& queues,
                           const JournalMetrics* journal = nullptr);

// A highly available coordinator's role in its job (`serve --etcd`).
struct LeadershipMetrics {
  std::string job;
  bool leading = false;    // false: standing by
  int64_t failovers = 0;   // times it took over after standing by
  std::string leader;      // the leader's address as this coordinator knows it ("": none)
  int64_t term = 0;        // the leader's term
};

// shardq_leader{job} (gauge: 1 leading, 0 standing by) and
// shardq_failovers_total{job} (counter), in the exposition format.
std::string LeadershipText(const LeadershipMetrics& leadership);

// The Session streams a coordinator holds (`serve --max-sessions`).
struct SessionMetrics {
  int64_t open = 0;   // streams open now
  int64_t limit = 0;  // the most it holds at once
};

// shardq_sessions_open and shardq_sessions_limit (gauges), in the
// exposition format: alert before `open` reaches `limit`, past which new
// workers are refused.
std::string SessionsText(const SessionMetrics& sessions);

// `value` as a Prometheus label value: backslash, quote and newline escaped.
std::string PrometheusLabelValue(absl::string_view value);

}  // namespace shardq

#endif  // SHARDQ_OBSERVE_SUMMARY_WRITER_H_
