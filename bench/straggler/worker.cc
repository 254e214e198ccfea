// straggler_worker: one worker process of the real-process straggler
// benchmark. Reads text lines with TextLineReader either from its own list
// of files (static sharding, no coordinator) or from a shardq queue on a
// running `shardq serve` (WorkQueue::Attach by name over --address), and
// emulates the per-record work of a training step by pacing: record k is
// finished no earlier than start + k * record_us * slowdown. Time spent
// waiting for input (a take round trip, a blocked take) moves the schedule
// back by as long, so waiting for data costs time as it would a trainer.
//
// Start handshake, so that every worker of a run starts together: it
// connects, prints "ready", reads the common start time (unix seconds) from
// a line of stdin and waits for it. It writes the first token of every line
// it read (the data set's unique record key) to --keys-out, and prints:
//   worker=<i> records=<n> items=<k> first=<unix s> last=<unix s>
// (the times of its first and last record).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "shardq/input_producer.h"
#include "shardq/item_source.h"
#include "shardq/text_line_reader.h"
#include "shardq/work_queue.h"
#include "src/log/mutex_mode.h"

namespace shardq::straggler {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct WorkerOptions {
  int64_t heartbeat_ms = 1000;
  int worker_index = 0;
  double slowdown = 1.0;
  double record_us = 2000;
  int64_t batch = 16;
  std::string address;  // queue mode
  std::string name;     // queue mode
  int64_t prefetch = 0;  // queue mode: read through an InputProducer of this capacity
  std::vector<std::string> static_files;  // static mode
  std::string keys_out;
};

// Per-record pacing on a steady schedule (see the file comment).
class Pacer {
 public:
  explicit Pacer(double micros_per_record)
      : step_(std::chrono::nanoseconds(static_cast<int64_t>(micros_per_record * 1000))),
        next_(SteadyClock::now()) {}
  // Input waits shift the schedule: the record's work starts after them.
  void Waited(SteadyClock::duration wait) { next_ += wait; }
  void Record() {
    next_ += step_;
    if (next_ > SteadyClock::now()) std::this_thread::sleep_until(next_);
  }

 private:
  std::chrono::nanoseconds step_;
  SteadyClock::time_point next_;
};

void WaitUntilUnix(double unix_seconds) {
  const absl::Duration wait =
      absl::FromUnixMicros(static_cast<int64_t>(unix_seconds * 1e6)) - absl::Now();
  if (wait > absl::ZeroDuration()) absl::SleepFor(wait);
}

int Run(const WorkerOptions& o) {
  std::unique_ptr<WorkQueue> queue;
  std::unique_ptr<InputProducer> producer;
  std::unique_ptr<ListItemSource> list;
  ItemSource* source = nullptr;
  if (!o.static_files.empty()) {
    list = std::make_unique<ListItemSource>(o.static_files);
    source = list.get();
  } else {
    WorkQueueOptions options;
    options.address = o.address;
    options.name = o.name;
    options.worker_id = absl::StrCat("worker-", o.worker_index);
    options.heartbeat_interval = absl::Milliseconds(o.heartbeat_ms);
    absl::StatusOr<std::unique_ptr<WorkQueue>> attached = WorkQueue::Attach(options);
    if (!attached.ok()) {
      std::fprintf(stderr, "straggler_worker %d: %s\n", o.worker_index,
                   attached.status().ToString().c_str());
      return 1;
    }
    queue = *std::move(attached);
    source = queue.get();
    if (o.prefetch > 0) {
      producer = queue->MakeInputProducer(o.prefetch);
      source = producer.get();
    }
  }
  std::ofstream keys(o.keys_out);
  if (!keys) {
    std::fprintf(stderr, "straggler_worker %d: cannot write %s\n", o.worker_index,
                 o.keys_out.c_str());
    return 1;
  }

  std::printf("ready\n");
  std::fflush(stdout);
  double start_at = 0;
  if (std::scanf("%lf", &start_at) != 1) {
    std::fprintf(stderr, "straggler_worker %d: no start time on stdin\n", o.worker_index);
    return 1;
  }
  WaitUntilUnix(start_at);
  TextLineReader reader;
  Pacer pacer(o.record_us * o.slowdown);
  int64_t records = 0;
  absl::Time first = absl::InfiniteFuture();
  absl::Time last = absl::Now();
  while (true) {
    const SteadyClock::time_point asked = SteadyClock::now();
    absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(*source, o.batch);
    pacer.Waited(SteadyClock::now() - asked);
    if (absl::IsOutOfRange(batch.status())) break;
    if (!batch.ok()) {
      std::fprintf(stderr, "straggler_worker %d: %s\n", o.worker_index,
                   batch.status().ToString().c_str());
      return 1;
    }
    for (const Record& record : *batch) {
      pacer.Record();
      keys << record.value.substr(0, record.value.find(' ')) << '\n';
      ++records;
    }
    if (!batch->empty()) {
      last = absl::Now();
      first = std::min(first, last);
    }
  }
  keys.close();
  if (first == absl::InfiniteFuture()) first = last;
  std::printf("worker=%d records=%lld items=%lld first=%.6f last=%.6f\n", o.worker_index,
              static_cast<long long>(records), static_cast<long long>(reader.items_done()),
              absl::ToUnixMicros(first) * 1e-6, absl::ToUnixMicros(last) * 1e-6);
  return keys.fail() ? 1 : 0;
}

}  // namespace
}  // namespace shardq::straggler

int main(int argc, char** argv) {
  shardq::UseProductionMutexMode();  // as `shardq serve` (src/log/mutex_mode.h)
  shardq::straggler::WorkerOptions o;
  CLI::App app{"One worker of the straggler benchmark (see bench/straggler/README.md)"};
  app.add_option("--worker-index", o.worker_index, "this worker's index")->required();
  app.add_option("--slowdown", o.slowdown, "per-record time multiplier (4 = 4x slower)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--record-us", o.record_us, "per-record time at 1x, microseconds")
      ->capture_default_str();
  app.add_option("--batch", o.batch, "records per ReadUpTo")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--address", o.address, "coordinator HOST:PORT (queue mode)");
  app.add_option("--name", o.name, "queue name (queue mode)");
  app.add_option("--heartbeat-ms", o.heartbeat_ms,
                 "heartbeat interval (queue mode): progress reports and split proposals")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--prefetch", o.prefetch,
                 "queue mode: read through an InputProducer holding this many items "
                 "(the queue's num_clients must allow it)")->capture_default_str();
  app.add_option("--static-files", o.static_files,
                 "static sharding: read these files, no coordinator");
  app.add_option("--keys-out", o.keys_out, "file for the keys of the records read")->required();
  CLI11_PARSE(app, argc, argv);
  if (o.static_files.empty() && (o.address.empty() || o.name.empty())) {
    std::fprintf(stderr, "straggler_worker: give --static-files, or --address and --name\n");
    return 2;
  }
  return shardq::straggler::Run(o);
}
