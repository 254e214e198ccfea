// bench/scale: the protocol a simulated worker speaks to the coordinator.
//
// The load generator's worker logic (how long an item is held, when
// progress is reported, what is counted) lives in simulation.cc and talks to
// the coordinator only through WorkerDriver. Two implementations:
//  * SessionDriver (the default): one Session stream per worker
//    (coordinator.proto, rpc Session), gRPC's callback API
//    (ClientBidiReactor) multiplexed over a few dozen shared channels; a
//    completion and the next take travel in one message each way, progress
//    rides on the stream, and the open stream is the liveness signal.
//  * UnaryDriver: the unary Take / Complete / Heartbeat RPCs over the same
//    shared channels, with the callback API (no thread per worker).
//
// Every method returns at once; its callback runs later, on a gRPC thread,
// exactly once. A worker has at most one Take / Complete / CompleteAndTake
// in flight; ReportProgress may run beside them.
#ifndef SHARDQ_BENCH_SCALE_WORKER_DRIVER_H_
#define SHARDQ_BENCH_SCALE_WORKER_DRIVER_H_

#include <chrono>
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

// What a session driver's streams did over a run.
struct StreamCounts {
  int64_t opened = 0;    // workers whose first stream was answered with `opened`
  int64_t reopened = 0;  // later streams of a worker whose stream had ended
  int64_t dropped = 0;   // streams that ended with an error (not cancelled at the end)
  int64_t ended_ok = 0;  // streams the coordinator ended OK after the worker's half-close
  int64_t cancelled = 0;  // left open at the end and cancelled by CloseStreams
  int64_t lost_leases = 0;  // pushed or in an answer's lost_lease_ids
  std::string first_drop;  // the first dropped stream's worker and status
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
  using ProgressDone = std::function<void(absl::StatusOr<int64_t>)>;

  virtual ~WorkerDriver() = default;

  // Short name for the report ("session" or "unary").
  virtual std::string Name() const = 0;

  // Asks for one item for `worker` (0-based), long-polling up to the
  // driver's wait when every remaining item is held elsewhere.
  virtual void Take(int worker, TakeDone done) = 0;

  virtual void Complete(int worker, const Lease& lease, CompleteDone done) = 0;

  // Completes `lease`, then asks for the next item. This default issues
  // Complete and, once it succeeded, Take; the session driver overrides it
  // with one message each way.
  virtual void CompleteAndTake(int worker, const Lease& lease, CompleteAndTakeDone done);

  // Reports the progress of the item the worker holds, about once a second
  // while it holds one. Unary: a Heartbeat carrying it, which also renews
  // the lease. Session: a progress report on the stream (no answer asked
  // for); `done` runs once it is written, with 0 lost leases (leases a
  // session loses are pushed, and counted in StreamCounts).
  virtual void ReportProgress(int worker, const Progress& progress, ProgressDone done) = 0;

  // Waits up to `wait` for every stream to end (a session driver half-
  // closes a worker's stream once it saw end of input), then cancels those
  // left (not counted as dropped). Returns the streams' counts; nullopt for
  // a driver without streams (unary). Call once, after the simulation.
  virtual std::optional<StreamCounts> CloseStreams(std::chrono::milliseconds wait) {
    return std::nullopt;
  }

  // RPCs (unary) or messages (session) sent so far, by kind, for the
  // report ("Take" -> count).
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

struct SessionDriverOptions {
  std::string address;  // host:port of `shardq serve`
  std::string queue;
  int channels = 32;
  int64_t take_wait_ms = 5000;  // how long a take waits while every item is held
};

// One Session stream per worker over `options.channels` channels (worker i
// uses channel i mod channels), opened on the worker's first call and again,
// with the lease it holds, when it ended. Fails on bad options.
absl::StatusOr<std::unique_ptr<WorkerDriver>> NewSessionDriver(
    const SessionDriverOptions& options);

// Today's protocol over `options.channels` channels (worker i uses channel
// i mod channels). Fails when a channel cannot be created.
absl::StatusOr<std::unique_ptr<WorkerDriver>> NewUnaryDriver(const UnaryDriverOptions& options);

}  // namespace shardq::scale

#endif  // SHARDQ_BENCH_SCALE_WORKER_DRIVER_H_
