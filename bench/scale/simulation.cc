#include "bench/scale/simulation.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace shardq::scale {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Runs functions at given times on one thread. The functions must not
// block (they issue async RPCs).
class TimerThread {
 public:
  TimerThread() : thread_([this] { Loop(); }) {}
  ~TimerThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

  void At(SteadyClock::time_point when, std::function<void()> fn) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wake = heap_.empty() || when < heap_.top().when;
      heap_.push(Entry{when, seq_++, std::move(fn)});
    }
    if (wake) cv_.notify_one();
  }

 private:
  struct Entry {
    SteadyClock::time_point when;
    uint64_t seq;
    std::function<void()> fn;
    bool operator>(const Entry& o) const {
      return when != o.when ? when > o.when : seq > o.seq;
    }
  };

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      if (heap_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const SteadyClock::time_point when = heap_.top().when;
      if (SteadyClock::now() < when) {
        cv_.wait_until(lock, when);
        continue;
      }
      std::function<void()> fn = std::move(const_cast<Entry&>(heap_.top()).fn);
      heap_.pop();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap_;
  uint64_t seq_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

struct Worker {
  int id = 0;
  std::mt19937_64 rng;
  Lease lease;
  SteadyClock::time_point taken_at;
  std::chrono::nanoseconds hold{0};
  std::atomic<uint64_t> generation{0};  // bumped when the held item ends
  int consecutive_errors = 0;
  bool connected = false;
  bool started = false;  // held a first item
};

class Simulation {
 public:
  Simulation(WorkerDriver& driver, const SimulationOptions& options,
             const std::function<void(bool)>& on_window)
      : driver_(driver), options_(options), on_window_(on_window),
        completed_(static_cast<size_t>(options.num_items)),
        workers_(static_cast<size_t>(options.workers)) {
    for (int i = 0; i < options_.timer_threads; ++i) {
      timers_.push_back(std::make_unique<TimerThread>());
    }
    // lognormal: mean = exp(mu + sigma^2 / 2).
    log_mu_ = options_.mean_item_ms > 0
              ? std::log(options_.mean_item_ms) - options_.sigma * options_.sigma / 2
              : 0;
    for (int i = 0; i < options_.workers; ++i) {
      Worker& w = workers_[static_cast<size_t>(i)];
      w.id = i;
      w.rng.seed(options_.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i));
    }
  }

  SimulationResult Run() {
    start_ = SteadyClock::now();
    for (Worker& w : workers_) {
      std::uniform_int_distribution<int64_t> phase(0, std::max<int64_t>(0, options_.ramp_ms));
      const auto when = start_ + std::chrono::milliseconds(phase(w.rng));
      TimerOf(w).At(when, [this, &w] { Take(w); });
    }
    SimulationResult result;
    {
      std::unique_lock<std::mutex> lock(mu_);
      result.timed_out = !done_cv_.wait_for(
          lock, std::chrono::milliseconds(options_.max_run_ms),
          [this] { return finished_workers_ == options_.workers; });
      result.run_seconds = Seconds(last_end_);
    }
    if (result.timed_out) {
      result.run_seconds = Seconds(SteadyClock::now());
      // RPCs may still be in flight; their callbacks reference this object.
      // The caller stops the server next, which ends them; wait for that.
    }
    if (!result.timed_out) {
      timers_.clear();  // joined: no timer fires after this
      // A progress report sent just before a worker's last completion may
      // still be in flight; its callback touches this object.
      for (int i = 0; i < 500 && inflight_progress_.load() > 0; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (const Worker& w : workers_) result.workers_connected += w.connected ? 1 : 0;
    result.workers_dropped = dropped_;
    result.rpc_errors = rpc_errors_;
    result.takes = takes_;
    result.empty_takes = empty_takes_;
    result.completions = completions_;
    result.duplicates = duplicates_;
    result.lost_leases = lost_leases_;
    result.progress_reports = progress_reports_;
    result.completed_per_item = completed_;
    result.take_latency_ns = std::move(latencies_);
    result.take_answered_s = std::move(answered_s_);
    result.window_start_s = Seconds(window_start_);
    result.window_end_s = Seconds(window_end_);
    result.window_completions = window_end_completions_ - window_start_completions_;
    result.calls = driver_.CallCounts();
    result.first_error = first_error_;
    return result;
  }

 private:
  double Seconds(SteadyClock::time_point t) const {
    if (t == SteadyClock::time_point()) return 0;
    return std::chrono::duration<double>(t - start_).count();
  }

  TimerThread& TimerOf(const Worker& w) {
    return *timers_[static_cast<size_t>(w.id) % timers_.size()];
  }

  std::chrono::nanoseconds DrawHold(Worker& w) {
    if (options_.mean_item_ms <= 0) return std::chrono::nanoseconds(0);
    std::lognormal_distribution<double> dist(log_mu_, options_.sigma);
    const double ms = std::min(dist(w.rng), options_.mean_item_ms * options_.max_item_factor);
    return std::chrono::nanoseconds(static_cast<int64_t>(ms * 1e6));
  }

  void Take(Worker& w) {
    driver_.Take(w.id, [this, &w](absl::StatusOr<TakeReply> reply) { OnTake(w, std::move(reply)); });
  }

  // Counts an RPC failure; true when the worker should go on.
  bool OnError(Worker& w, const absl::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    ++rpc_errors_;
    if (first_error_.empty()) first_error_ = absl::StrCat(WorkerName(w.id), ": ", status.ToString());
    if (++w.consecutive_errors < options_.max_consecutive_errors) return true;
    ++dropped_;
    FinishLocked();
    return false;
  }

  void FinishLocked() {
    ++finished_workers_;
    last_end_ = SteadyClock::now();
    if (finished_workers_ == options_.workers) done_cv_.notify_all();
  }

  void Retry(Worker& w, int64_t after_ms, void (Simulation::*step)(Worker&)) {
    TimerOf(w).At(SteadyClock::now() + std::chrono::milliseconds(after_ms),
                  [this, &w, step] { (this->*step)(w); });
  }

  void OnTake(Worker& w, absl::StatusOr<TakeReply> reply) {
    if (!reply.ok()) {
      if (OnError(w, reply.status())) Retry(w, 100, &Simulation::Take);
      return;
    }
    bool open_window = false, window_closed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      w.consecutive_errors = 0;
      w.connected = true;
      if (reply->end_of_input) {
        FinishLocked();
        window_closed = CloseWindowLocked();
      } else if (!reply->item.has_value()) {
        ++empty_takes_;
        window_closed = CloseWindowLocked();
      } else {
        ++takes_;
        latencies_.push_back(reply->latency_ns);
        answered_s_.push_back(static_cast<float>(Seconds(SteadyClock::now())));
        if (!w.started) {
          w.started = true;
          if (++started_workers_ == options_.workers) open_window = true;
        }
        // The last pending item handed out: the tail starts (no item comes
        // back while no lease expires and nothing is released).
        if (takes_ == options_.num_items) window_closed = CloseWindowLocked();
      }
    }
    if (open_window) {
      // Every worker holds an item; the completion rate settles after about
      // one mean per-item time.
      const auto when = SteadyClock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(options_.mean_item_ms * 1000));
      TimerOf(w).At(when, [this] {
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (window_end_ != SteadyClock::time_point()) return;  // closed first
          window_start_ = SteadyClock::now();
          window_start_completions_ = completions_;
        }
        if (on_window_) on_window_(true);
      });
    }
    if (window_closed && on_window_) on_window_(false);
    if (reply->end_of_input) return;
    if (!reply->item.has_value()) {
      // Answered at once (the server's waiting takes are full) or after the
      // long poll: ask again, after a pause only in the first case.
      const bool fast = reply->latency_ns < 50'000'000;
      Retry(w, fast ? options_.empty_backoff_ms : 0, &Simulation::Take);
      return;
    }
    Hold(w, *reply->item);
  }

  // The first empty take or end of input closes the steady window.
  bool CloseWindowLocked() {
    if (window_end_ != SteadyClock::time_point()) return false;
    window_end_ = SteadyClock::now();
    window_end_completions_ = completions_;
    if (window_start_ == SteadyClock::time_point()) {
      // The tail came before a steady state: count from the start (no
      // /proc sample opens this window).
      window_start_ = start_;
      window_start_completions_ = 0;
    }
    return true;
  }

  void Hold(Worker& w, const Lease& lease) {
    w.lease = lease;
    w.taken_at = SteadyClock::now();
    w.hold = DrawHold(w);
    const uint64_t gen = w.generation.load();
    if (w.hold.count() == 0) {
      Complete(w);
      return;
    }
    if (w.hold > std::chrono::milliseconds(options_.heartbeat_ms) / 2) {
      // The real client's progress loop runs on its own clock: a random phase.
      std::uniform_int_distribution<int64_t> phase(options_.heartbeat_ms / 2,
                                                   options_.heartbeat_ms);
      ScheduleProgress(w, gen, w.taken_at + std::chrono::milliseconds(phase(w.rng)));
    }
    TimerOf(w).At(w.taken_at + w.hold, [this, &w] { Complete(w); });
  }

  void ScheduleProgress(Worker& w, uint64_t gen, SteadyClock::time_point when) {
    if (when >= w.taken_at + w.hold) return;
    TimerOf(w).At(when, [this, &w, gen, when] {
      if (w.generation.load() != gen) return;  // completed meanwhile
      Progress progress;
      progress.lease = w.lease;
      progress.offset = std::chrono::duration_cast<std::chrono::milliseconds>(
                            SteadyClock::now() - w.taken_at).count();
      inflight_progress_.fetch_add(1);
      driver_.ReportProgress(w.id, progress, [this, &w, gen](absl::StatusOr<int64_t> lost) {
        std::lock_guard<std::mutex> lock(mu_);
        inflight_progress_.fetch_sub(1);
        if (!lost.ok()) {
          ++rpc_errors_;
          if (first_error_.empty()) first_error_ = lost.status().ToString();
          return;
        }
        ++progress_reports_;
        // A heartbeat overtaken by the item's completion (another channel
        // stream) names a lease the worker no longer holds: not a loss.
        if (w.generation.load() == gen) lost_leases_ += *lost;
      });
      ScheduleProgress(w, gen, when + std::chrono::milliseconds(options_.heartbeat_ms));
    });
  }

  void Complete(Worker& w) {
    w.generation.fetch_add(1);
    const Lease lease = w.lease;
    driver_.CompleteAndTake(
        w.id, lease,
        [this, &w, lease](absl::StatusOr<bool> completed, absl::StatusOr<TakeReply> next) {
          if (!completed.ok()) {
            w.generation.fetch_sub(1);  // still held: progress stays off, retry
            if (OnError(w, completed.status())) Retry(w, 100, &Simulation::Complete);
            return;
          }
          {
            std::lock_guard<std::mutex> lock(mu_);
            if (*completed) {
              ++duplicates_;
            } else {
              ++completions_;
              if (lease.epoch == 0 && lease.index >= 0 &&
                  lease.index < static_cast<int64_t>(completed_.size())) {
                ++completed_[static_cast<size_t>(lease.index)];
              }
            }
          }
          OnTake(w, std::move(next));
        });
  }

  WorkerDriver& driver_;
  const SimulationOptions options_;
  const std::function<void(bool)> on_window_;
  double log_mu_ = 0;
  SteadyClock::time_point start_;
  std::vector<std::unique_ptr<TimerThread>> timers_;
  std::atomic<int> inflight_progress_{0};

  std::mutex mu_;
  std::condition_variable done_cv_;
  std::vector<uint32_t> completed_;
  std::vector<int64_t> latencies_;
  std::vector<float> answered_s_;
  int finished_workers_ = 0, started_workers_ = 0, dropped_ = 0;
  int64_t rpc_errors_ = 0, takes_ = 0, empty_takes_ = 0, completions_ = 0, duplicates_ = 0;
  int64_t lost_leases_ = 0, progress_reports_ = 0;
  SteadyClock::time_point window_start_, window_end_, last_end_;
  int64_t window_start_completions_ = 0, window_end_completions_ = 0;
  std::string first_error_;
  std::vector<Worker> workers_;
};

}  // namespace

SimulationResult RunSimulation(WorkerDriver& driver, const SimulationOptions& options,
                               const std::function<void(bool)>& on_window) {
  // Leaked on a timeout: RPC callbacks in flight still point into it.
  auto* sim = new Simulation(driver, options, on_window);
  SimulationResult result = sim->Run();
  if (!result.timed_out) delete sim;
  return result;
}

}  // namespace shardq::scale
