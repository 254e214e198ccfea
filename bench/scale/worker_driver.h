// bench/scale: the protocol a simulated worker speaks to the coordinator.
//
// The load generator's worker logic (how long an item is held, when
// progress is reported, what is counted) lives in scale_load.cc and talks to
// the coordinator only through WorkerDriver. Today's implementation is
// UnaryDriver: the unary Take / Complete / Heartbeat RPCs over a few dozen
// shared gRPC channels, with the callback API (no thread per worker). A
// session driver (issue 17: one bidirectional stream per worker) plugs in
// behind the same interface: it answers CompleteAndTake with one message
// and needs no keep-alive (NeedsKeepAlive() false).
//
// Every method returns at once; its callback runs later, on a gRPC thread,
// exactly once. A worker has at most one Take / Complete / CompleteAndTake
// in flight; KeepAlive may run beside them.
#ifndef SHARDQ_BENCH_SCALE_WORKER_DRIVER_H_
#define SHARDQ_BENCH_SCALE_WORKER_DRIVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardq::scale {

// An item a worker holds: where it is in the plan, and its lease.
struct Lease {
  int64_t epoch = 0;
  int64_t index = 0;
  uint64_t lease_id = 0;
};

struct TakeReply {
  // Empty with end_of_input false: nothing to hand out now, ask again.
  std::optional<Lease> item;
  bool end_of_input = false;
  // The take's round trip as the worker saw it (a long poll included).
  int64_t latency_ns = 0;
};

// Progress a worker reports for the item it holds (an absolute offset).
struct Progress {
  Lease lease;
  int64_t offset = 0;
};

class WorkerDriver {
 public:
  using TakeDone = std::function<void(absl::StatusOr<TakeReply>)>;
  // true: the coordinator counted the completion as a duplicate.
  using CompleteDone = std::function<void(absl::StatusOr<bool>)>;
  // `completed` is the completion's outcome; `next` is the next take's and
  // is meaningful only when `completed` is OK.
  using CompleteAndTakeDone =
      std::function<void(absl::StatusOr<bool> completed, absl::StatusOr<TakeReply> next)>;
  // The number of the worker's leases the coordinator says it lost.
  using KeepAliveDone = std::function<void(absl::StatusOr<int64_t>)>;

  virtual ~WorkerDriver() = default;

  // Short name for the report ("unary", later "session").
  virtual std::string Name() const = 0;

  // Asks for one item for `worker` (0-based), long-polling up to the
  // driver's wait when every remaining item is held elsewhere.
  virtual void Take(int worker, TakeDone done) = 0;

  virtual void Complete(int worker, const Lease& lease, CompleteDone done) = 0;

  // Completes `lease`, then asks for the next item. This default issues
  // Complete and, once it succeeded, Take; a session driver overrides it
  // with one message each way.
  virtual void CompleteAndTake(int worker, const Lease& lease, CompleteAndTakeDone done);

  // Whether a worker must send KeepAlive while it holds an item (unary:
  // yes, the lease is renewed by heartbeats; a session: the open stream is
  // the liveness signal).
  virtual bool NeedsKeepAlive() const { return true; }

  // Renews the worker's lease and reports its progress (today: one
  // Heartbeat carrying both, as the real client sends them).
  virtual void KeepAlive(int worker, const Progress& progress, KeepAliveDone done) = 0;

  // RPCs issued so far, by kind, for the report ("Take" -> count).
  virtual std::vector<std::pair<std::string, int64_t>> CallCounts() const = 0;
};

struct UnaryDriverOptions {
  std::string address;  // host:port of `shardq serve`
  std::string queue;
  int channels = 32;
  int64_t take_wait_ms = 5000;  // the Take long poll
  // Held heartbeats wait for split proposals; the bench's queue has none.
  int64_t heartbeat_wait_ms = 1000;
  int64_t call_timeout_ms = 30000;  // added to any wait
};

// Worker names are "w<index>" (zero-padded), the same in every driver.
std::string WorkerName(int worker);

// Today's protocol over `options.channels` channels (worker i uses channel
// i mod channels). Fails when a channel cannot be created.
absl::StatusOr<std::unique_ptr<WorkerDriver>> NewUnaryDriver(const UnaryDriverOptions& options);

}  // namespace shardq::scale

#endif  // SHARDQ_BENCH_SCALE_WORKER_DRIVER_H_
