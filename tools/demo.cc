#include "tools/demo.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "shardq/item_source.h"
#include "shardq/text_line_reader.h"
#include "shardq/work_queue.h"
#include "src/core/rng.h"

namespace shardq {
namespace {

namespace fs = std::filesystem;
using SteadyClock = std::chrono::steady_clock;

double Slowdown(int worker) { return worker == 0 ? 4.0 : worker == 1 ? 2.0 : 1.0; }

// Emulates per-record work at a fixed rate without drifting: the worker
// sleeps only when it is ahead of its schedule.
class Pacer {
 public:
  explicit Pacer(double micros_per_record)
      : step_(std::chrono::nanoseconds(static_cast<int64_t>(micros_per_record * 1000))),
        next_(SteadyClock::now()) {}
  void Record() {
    next_ += step_;
    if (next_ > SteadyClock::now() + std::chrono::milliseconds(1)) {
      std::this_thread::sleep_until(next_);
    }
  }

 private:
  std::chrono::nanoseconds step_;
  SteadyClock::time_point next_;
};

struct ModeResult {
  std::string mode;
  double seconds = 0;
  std::vector<int64_t> records_per_worker;
  int64_t distinct = 0;
  int64_t repeated = 0;
  std::string error;
};

// Shows records done / total on stderr while a mode runs.
class Progress {
 public:
  Progress(std::string label, int64_t total, const std::atomic<int64_t>* done)
      : label_(std::move(label)), total_(total), done_(done),
        tty_(::isatty(STDERR_FILENO) != 0),
        thread_([this] { Loop(); }) {}
  ~Progress() {
    stop_ = true;
    thread_.join();
    Print(true);
  }

 private:
  void Loop() {
    int last_decile = -1;
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const int decile = static_cast<int>(10 * done_->load() / total_);
      if (tty_ || decile != last_decile) Print(false);
      last_decile = decile;
    }
  }
  void Print(bool final) {
    const int64_t done = done_->load();
    const int width = 30;
    const int filled = static_cast<int>(width * done / total_);
    std::string bar(filled, '#');
    bar.resize(width, ' ');
    std::fprintf(stderr, "%s%-22s [%s] %3d%% %lld/%lld records%s",
                 tty_ ? "\r" : "", label_.c_str(), bar.c_str(),
                 static_cast<int>(100 * done / total_),
                 static_cast<long long>(done), static_cast<long long>(total_),
                 (final || !tty_) ? "\n" : "");
    std::fflush(stderr);
  }

  const std::string label_;
  const int64_t total_;
  const std::atomic<int64_t>* done_;
  const bool tty_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::vector<std::string> MakeDataSet(const DemoOptions& o, const fs::path& dir) {
  std::vector<std::string> files;
  SplitMix64 rng(o.seed);
  for (int f = 0; f < o.files; ++f) {
    fs::path path = dir / absl::StrFormat("part-%03d.txt", f);
    std::ofstream out(path);
    for (int64_t l = 0; l < o.lines_per_file; ++l) {
      out << "file " << f << " line " << l << " "
          << std::string(rng.UniformBelow(80), 'x') << "\n";
    }
    files.push_back(path.string());
  }
  return files;
}

// Every worker drains `source` with a TextLineReader at its own pace.
void ReadAll(ItemSource& source, int worker, const DemoOptions& o,
             std::atomic<int64_t>* done, std::vector<std::string>* keys,
             std::string* error) {
  TextLineReader reader;
  Pacer pacer(o.record_micros * Slowdown(worker));
  while (true) {
    absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(source, 16);
    if (absl::IsOutOfRange(batch.status())) return;
    if (!batch.ok()) {
      *error = batch.status().ToString();
      return;
    }
    for (Record& r : *batch) {
      pacer.Record();
      keys->push_back(std::move(r.key));
      done->fetch_add(1);
    }
  }
}

ModeResult Finish(std::string mode, SteadyClock::time_point start,
                  std::vector<std::vector<std::string>>& keys,
                  std::vector<std::string>& errors) {
  ModeResult result;
  result.mode = std::move(mode);
  result.seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  // Keys name item and offset; map them to (file, offset) to compare modes.
  std::map<std::string, int> seen;
  for (const auto& worker_keys : keys) {
    result.records_per_worker.push_back(static_cast<int64_t>(worker_keys.size()));
    for (const std::string& key : worker_keys) {
      const size_t q = key.find('?');
      const size_t colon = key.rfind(':');
      ++seen[key.substr(0, q == std::string::npos ? colon : q) + key.substr(colon)];
    }
  }
  result.distinct = static_cast<int64_t>(seen.size());
  for (const auto& [key, count] : seen) result.repeated += count - 1;
  for (const std::string& e : errors) {
    if (!e.empty()) result.error = e;
  }
  return result;
}

ModeResult RunStatic(const DemoOptions& o, const std::vector<std::string>& files,
                     int64_t total) {
  std::atomic<int64_t> done{0};
  std::vector<std::vector<std::string>> keys(o.workers);
  std::vector<std::string> errors(o.workers);
  const auto start = SteadyClock::now();
  {
    Progress progress("static sharding", total, &done);
    std::vector<std::thread> threads;
    for (int w = 0; w < o.workers; ++w) {
      threads.emplace_back([&, w] {
        std::vector<std::string> mine;
        for (size_t f = w; f < files.size(); f += o.workers) mine.push_back(files[f]);
        ListItemSource source(std::move(mine));
        ReadAll(source, w, o, &done, &keys[w], &errors[w]);
      });
    }
    for (auto& t : threads) t.join();
  }
  return Finish("static (1/N files)", start, keys, errors);
}

ModeResult RunElastic(const DemoOptions& o, const std::vector<std::string>& files,
                      int64_t total) {
  std::atomic<int64_t> done{0};
  std::vector<std::vector<std::string>> keys(o.workers);
  std::vector<std::string> errors(o.workers);
  const int64_t slices = o.slices_per_worker * o.workers;
  const std::string name = absl::StrCat("demo-", ::getpid());
  const auto start = SteadyClock::now();
  {
    Progress progress("shardq WorkQueue", total, &done);
    std::vector<std::thread> threads;
    for (int w = 0; w < o.workers; ++w) {
      threads.emplace_back([&, w] {
        WorkQueueOptions options;
        options.works = files;
        options.num_slices = slices;
        options.seed = o.seed;
        options.name = name;
        options.worker_id = absl::StrCat("worker-", w);
        absl::StatusOr<std::unique_ptr<WorkQueue>> queue = WorkQueue::Create(options);
        if (!queue.ok()) {
          errors[w] = queue.status().ToString();
          return;
        }
        ReadAll(**queue, w, o, &done, &keys[w], &errors[w]);
      });
    }
    for (auto& t : threads) t.join();
  }
  return Finish(absl::StrCat("shardq (", slices, " slices)"), start, keys, errors);
}

}  // namespace

int RunDemo(const DemoOptions& o) {
  fs::path dir = o.data_dir;
  const bool temporary = dir.empty();
  if (temporary) {
    dir = fs::temp_directory_path() / absl::StrCat("shardq-demo-", ::getpid());
  }
  fs::create_directories(dir);
  const std::vector<std::string> files = MakeDataSet(o, dir);
  const int64_t total = o.files * o.lines_per_file;
  double speed_sum = 0;
  for (int w = 0; w < o.workers; ++w) speed_sum += 1.0 / Slowdown(w);
  const double ideal = total * o.record_micros * 1e-6 / speed_sum;

  std::printf("shardq demo: %d files, %lld records in %s\n", o.files,
              static_cast<long long>(total), dir.c_str());
  std::printf("%d worker threads, %.0f us per record; worker 0 is 4x slower, "
              "worker 1 2x slower.\nideal epoch time (total work / sum of "
              "speeds) = %.2f s\n\n", o.workers, o.record_micros, ideal);
  std::fflush(stdout);

  std::vector<ModeResult> results;
  results.push_back(RunStatic(o, files, total));
  results.push_back(RunElastic(o, files, total));
  if (temporary) fs::remove_all(dir);

  std::printf("\n| %-20s | %8s | %14s | %-48s |\n", "mode", "wall (s)",
              "ratio to ideal", "records per worker (w0 4x slow, w1 2x slow)");
  std::printf("|%s|%s|%s|%s|\n", std::string(22, '-').c_str(),
              std::string(10, '-').c_str(), std::string(16, '-').c_str(),
              std::string(50, '-').c_str());
  bool all_exact = true;
  for (const ModeResult& r : results) {
    std::string per_worker;
    for (int64_t n : r.records_per_worker) absl::StrAppend(&per_worker, n, " ");
    std::printf("| %-20s | %8.2f | %14.2f | %-48s |\n", r.mode.c_str(),
                r.seconds, r.seconds / ideal, per_worker.c_str());
  }
  std::printf("\n");
  for (const ModeResult& r : results) {
    const bool exact = r.error.empty() && r.distinct == total && r.repeated == 0;
    all_exact = all_exact && exact;
    if (exact) {
      std::printf("%s: every one of the %lld records read exactly once\n",
                  r.mode.c_str(), static_cast<long long>(total));
    } else {
      std::printf("%s: FAILED: %lld of %lld records read, %lld repeated%s%s\n",
                  r.mode.c_str(), static_cast<long long>(r.distinct),
                  static_cast<long long>(total), static_cast<long long>(r.repeated),
                  r.error.empty() ? "" : "; error: ", r.error.c_str());
    }
  }
  return all_exact ? 0 : 1;
}

}  // namespace shardq
