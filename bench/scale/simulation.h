// bench/scale: N simulated workers against one queue, through a
// WorkerDriver. Each worker takes an item, holds it for a time drawn from a
// lognormal distribution (capped), reports its progress every heartbeat
// interval while it holds it (unary: a Heartbeat; session: on the stream),
// completes it and takes the next (one message in a session), and repeats
// until the queue reports end of input. Timers run on a few timer threads;
// RPCs complete on gRPC's threads; no thread per worker.
#ifndef SHARDQ_BENCH_SCALE_SIMULATION_H_
#define SHARDQ_BENCH_SCALE_SIMULATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/scale/worker_driver.h"

namespace shardq::scale {

struct SimulationOptions {
  int workers = 10000;
  int64_t num_items = 0;         // the queue's items (one epoch)
  double mean_item_ms = 2000;    // 0: complete at once (saturation)
  double sigma = 0.75;           // of the lognormal's log
  double max_item_factor = 5;    // hold times are capped at this x the mean
  int64_t heartbeat_ms = 1000;   // progress reports, as the real client (WorkQueueOptions)
  int64_t ramp_ms = 1000;        // workers start spread over this
  int64_t empty_backoff_ms = 100;  // after an immediate "ask again"
  int max_consecutive_errors = 20;  // then the worker is counted dropped
  int timer_threads = 2;
  uint64_t seed = 1;
  int64_t max_run_ms = 600000;   // the whole run, tail included
};

struct SimulationResult {
  int workers_connected = 0;  // had at least one successful RPC
  int workers_dropped = 0;    // gave up after max_consecutive_errors
  int64_t rpc_errors = 0;
  int64_t takes = 0;          // items received
  int64_t empty_takes = 0;    // "ask again" answers
  int64_t completions = 0;    // not duplicates
  int64_t duplicates = 0;
  int64_t lost_leases = 0;    // reported by heartbeats (unary)
  int64_t progress_reports = 0;  // heartbeats answered (unary) or reports written (session)
  // Per item (epoch 0): completions the coordinator accepted as first.
  std::vector<uint32_t> completed_per_item;
  std::vector<int64_t> take_latency_ns;  // takes that returned an item
  std::vector<float> take_answered_s;    // when each was answered, since the start
  // The steady window: from one mean per-item time after every worker
  // held its first item to the last pending item handed out (the tail).
  double window_start_s = 0, window_end_s = 0;  // since the run's start
  int64_t window_completions = 0;
  double run_seconds = 0;      // start to the last worker's end of input
  bool timed_out = false;
  std::vector<std::pair<std::string, int64_t>> calls;
  std::string first_error;
};

// Runs until every worker saw end of input or was dropped, or max_run_ms.
// `on_window` is called (from some thread) when the steady window opens
// (true) and closes (false), so that the caller can sample /proc.
SimulationResult RunSimulation(WorkerDriver& driver, const SimulationOptions& options,
                               const std::function<void(bool)>& on_window);

}  // namespace shardq::scale

#endif  // SHARDQ_BENCH_SCALE_SIMULATION_H_
