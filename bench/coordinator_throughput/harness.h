// bench/coordinator_throughput: what the harness (main.cc) needs from a
// system under test, shared by the drivers in this folder.
#ifndef SHARDQ_BENCH_COORDINATOR_THROUGHPUT_HARNESS_H_
#define SHARDQ_BENCH_COORDINATOR_THROUGHPUT_HARNESS_H_

#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace shardq::throughput {

// One leased item as the harness sees it.
struct Taken {
  int64_t index = 0;      // position in the item list, for the exactly-once check
  uint64_t lease_id = 0;  // shardq only
  std::string item;       // Redis only (LREM needs the value)
};

// Latency histogram: log-linear buckets (32 per power of two above 64 ns,
// exact below), so a quantile is within ~1.6% of the true value. One per
// client, merged at the end. Not thread-safe.
class LatencyHistogram {
 public:
  void Record(int64_t nanos) {
    const uint64_t v = static_cast<uint64_t>(std::max<int64_t>(nanos, 0));
    ++counts_[BucketOf(v)];
    ++count_;
    min_ = std::min(min_, v);
    max_ = std::max(max_, v);
  }

  void Merge(const LatencyHistogram& other) {
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    min_ = std::min(min_, other.min_);
    max_ = std::max(max_, other.max_);
  }

  // The value below which a fraction q of the samples lie, in microseconds.
  double QuantileMicros(double q) const {
    if (count_ == 0) return 0;
    const uint64_t rank =
        std::max<uint64_t>(1, static_cast<uint64_t>(q * static_cast<double>(count_) + 0.999999));
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        uint64_t lower = 0, width = 0;
        BucketRange(i, &lower, &width);
        const uint64_t mid = std::clamp(lower + width / 2, min_, max_);
        return static_cast<double>(mid) / 1000.0;
      }
    }
    return static_cast<double>(max_) / 1000.0;
  }

 private:
  static constexpr int kExact = 64;      // values below are their own bucket
  static constexpr int kPerOctave = 32;  // sub-buckets per power of two above
  static constexpr int kBuckets = kExact + 57 * kPerOctave;

  static size_t BucketOf(uint64_t v) {
    if (v < kExact) return static_cast<size_t>(v);
    const int msb = 63 - __builtin_clzll(v);  // >= 6
    const int shift = msb - 5;                // >= 1; v >> shift in [32, 64)
    const uint64_t top = v >> shift;
    return static_cast<size_t>(kExact + (shift - 1) * kPerOctave + (top - kPerOctave));
  }

  static void BucketRange(size_t index, uint64_t* lower, uint64_t* width) {
    if (index < kExact) {
      *lower = index;
      *width = 1;
      return;
    }
    const size_t j = index - kExact;
    const int shift = static_cast<int>(j / kPerOctave) + 1;
    const uint64_t top = j % kPerOctave + kPerOctave;
    *lower = top << shift;
    *width = uint64_t{1} << shift;
  }

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t min_ = UINT64_MAX;
  uint64_t max_ = 0;
};

// What one client measured over a row. Written by that client only (its
// thread, or its stream's callbacks, one at a time).
struct ClientResult {
  absl::Status status;
  LatencyHistogram take_latency;
  LatencyHistogram complete_latency;
  std::vector<int64_t> taken;  // item indices, in order
  int64_t completed = 0;
  int64_t takes = 0;           // take calls that leased something
};

// One client's connection. Used by one thread only.
class ClientSession {
 public:
  virtual ~ClientSession() = default;
  // Called once per queue before its first Take, outside the measured
  // time (a session stream is opened here). Default: nothing to do.
  virtual absl::Status Open(const std::string& queue) { return absl::OkStatus(); }
  // Leases the next item(s) of `queue` into `out` (cleared first). An empty
  // `out` means the queue is drained.
  virtual absl::Status Take(const std::string& queue, std::vector<Taken>* out) = 0;
  // Completes one taken item; an error if the server did not count it as the
  // item's first completion. A session may instead send the completion with
  // the next Take (CompletesWithNextTake), which then fails if it was not
  // counted as the first.
  virtual absl::Status Complete(const std::string& queue, const Taken& taken) = 0;
  // True: Complete only records the completion, and the next Take carries
  // it and waits for its answer (so a Take's latency is a completion's too).
  virtual bool CompletesWithNextTake() const { return false; }
};

// The measured part of a row: its wall time, and the CPU time this process
// (the clients, every thread) used in it.
struct RowClock {
  double seconds = 0;
  double client_cpu_seconds = 0;
};

// CPU time this process has used so far (user + system, all threads).
inline double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// One row's clients, for a system that runs them itself.
struct RowClients {
  std::string label;  // workers are named "<label>-c<clients>-worker-<i>"
  int clients = 0;
  std::string warmup_queue;  // drained first, together, not measured
  std::string queue;         // then drained together on the clock
};

// A system under test. Thread-safe: Connect is called from every client thread.
class System {
 public:
  virtual ~System() = default;
  // Creates `queue` holding `num_items` items named ItemName(0..num_items-1).
  virtual absl::Status CreateQueue(const std::string& queue, int64_t num_items) = 0;
  // A client of its own for a harness thread (unless RunsOwnClients).
  virtual absl::StatusOr<std::unique_ptr<ClientSession>> Connect(const std::string& worker) = 0;
  // True for a system whose clients are not harness threads (a driver that
  // multiplexes its clients' streams on gRPC's threads): the harness then
  // calls RunClients instead of Connect.
  virtual bool RunsOwnClients() const { return false; }
  // Runs `row.clients` clients. Each drains its share of `row.warmup_queue`
  // and opens what it needs on `row.queue`, all outside the measured time;
  // then all drain `row.queue` together, each filling (*results)[i] (sized
  // by the caller) as a harness thread's Drain would: a take that leased an
  // item, a completion counted as the item's first. Returns the clock from
  // the start until the last client saw `row.queue` drained; an error if a
  // client failed (each client's error is also in its result's status).
  virtual absl::StatusOr<RowClock> RunClients(const RowClients& row,
                                              std::vector<ClientResult>* results) {
    return absl::UnimplementedError("this system's clients are harness threads (Connect)");
  }
  // Checks on the server side that every item of the drained `queue` was
  // completed exactly once and nothing is left; returns what it checked.
  virtual absl::StatusOr<std::string> CheckDrained(const std::string& queue,
                                                   int64_t num_items) = 0;
};

inline std::string ItemName(int64_t index) { return absl::StrFormat("item-%08d", index); }

inline absl::StatusOr<int64_t> ItemIndex(absl::string_view item) {
  int64_t index = 0;
  if (!absl::ConsumePrefix(&item, "item-") || !absl::SimpleAtoi(item, &index)) {
    return absl::InternalError(absl::StrCat("unexpected item '", item, "'"));
  }
  return index;
}

}  // namespace shardq::throughput

#endif  // SHARDQ_BENCH_COORDINATOR_THROUGHPUT_HARNESS_H_
