// What the live status page and `shardq report` draw: every queue's recent
// item events (take, complete, release, expire, split, fail) in a bounded
// ring buffer, and latency histograms of the coordinator's Take and
// Complete calls. Fed from the coordinator's journal updates (the same
// stream the journal stores), so observe needs no server code.
#ifndef SHARDQ_OBSERVE_TIMELINE_H_
#define SHARDQ_OBSERVE_TIMELINE_H_

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "proto/shardq/journal.pb.h"

namespace shardq {

enum class ItemEventKind { kTake, kComplete, kRelease, kExpire, kSplit, kFail };

// "take", "complete", "release", "expire", "split", "fail".
absl::string_view ItemEventKindName(ItemEventKind kind);

// One thing that happened to a lease.
struct ItemEvent {
  ItemEventKind kind = ItemEventKind::kTake;
  int64_t at_us = 0;        // when, microseconds since the Unix epoch
  std::string worker;       // the lease's holder ("" when the take was not seen)
  uint64_t lease_id = 0;
  int64_t epoch = 0;
  int64_t index = 0;        // the item's place in the slice plan (split-off ranges: beyond it)
  // Ends (complete, release, expire, fail) and splits: when the lease was
  // taken; 0 when its take is older than what this process saw (taken
  // before a restart).
  int64_t taken_us = 0;
  int64_t split_point = 0;  // kSplit: where the held range was cut
  std::string reason;       // kFail: the worker's reason
};

// The recent item events of every queue. Thread-safe.
class Timeline {
 public:
  // At most this many events are kept per queue (the oldest are dropped):
  // with a worker name of up to 24 bytes an event takes about 120 bytes,
  // so about 30 MB per queue at the default.
  static constexpr size_t kDefaultEventsPerQueue = 262144;
  explicit Timeline(size_t events_per_queue = kDefaultEventsPerQueue);

  // Records what `update` (a journal update of `queue`) did to a lease;
  // updates that touch no lease are ignored, and a queue's creation or
  // restore starts its timeline afresh. Quick (no I/O): the coordinator
  // calls it with the queue's mutex held.
  void Record(absl::string_view queue, const journal::Update& update);

  // A queue's events with at_us >= since_us, oldest first, the newest
  // `limit` of them when there are more.
  std::vector<ItemEvent> Since(absl::string_view queue, int64_t since_us,
                               size_t limit = SIZE_MAX) const;
  // The leases of `queue` open now as take events, oldest take first.
  std::vector<ItemEvent> Open(absl::string_view queue) const;
  // How many events of `queue` were dropped for the bound so far.
  int64_t Dropped(absl::string_view queue) const;
  size_t events_per_queue() const { return events_per_queue_; }

 private:
  struct QueueLog {
    std::deque<ItemEvent> events;
    int64_t dropped = 0;
    // Open leases: lease id -> its take event.
    absl::flat_hash_map<uint64_t, ItemEvent> open;
  };
  void Push(QueueLog& log, ItemEvent event) const;

  const size_t events_per_queue_;
  mutable absl::Mutex mu_;
  std::map<std::string, QueueLog, std::less<>> queues_ ABSL_GUARDED_BY(mu_);
};

// A Prometheus histogram of durations in seconds, with fixed buckets from
// 1 ms to 60 s. Thread-safe.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 14> kBucketsSeconds = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60};
  void Observe(absl::Duration d);
  // The family's HELP, TYPE, _bucket{le=...}, _sum and _count lines.
  std::string PrometheusText(absl::string_view name, absl::string_view help) const;

 private:
  mutable absl::Mutex mu_;
  std::array<int64_t, kBucketsSeconds.size()> counts_ ABSL_GUARDED_BY(mu_) = {};
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// What `shardq serve` records for the page and /metrics besides the queue
// stats: the timeline, Take/Complete latencies, and about the process.
struct Observations {
  Timeline timeline;
  LatencyHistogram take_latency;
  LatencyHistogram complete_latency;
  absl::Time started = absl::Now();
  std::string state_dir;  // empty: in memory
};

}  // namespace shardq

#endif  // SHARDQ_OBSERVE_TIMELINE_H_
