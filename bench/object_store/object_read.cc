// bench/object_store's C++ reader (issue 21): shardq's TFRecordReader over
// a WorkQueue, as a C++ training process reads, with no Python between the
// records and the caller. Each of --workers threads makes its own
// WorkQueue of one name (so each is a worker of the one embedded queue)
// and reads records with ReadUpTo(64) into a reused vector until the
// queue is finished. Prints "<records> <bytes> <plan seconds>": the
// values read, and the seconds the queues took to create (the plan).
//
//   object_read [--workers N] [--slices S] [--no-open-ahead] WORK...
//
// --slices 0 gives the queue no num_slices: every work is one whole item.
// --no-open-ahead hides the queue's items taken ahead from the reader
// (ItemSource::PeekNextItem), so that it opens each item only when it
// starts it, as before the readers opened the next item ahead.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "shardq/tfrecord_reader.h"
#include "shardq/work_queue.h"
#include "src/log/mutex_mode.h"

namespace shardq {
namespace {

// A WorkQueue as an ItemSource that never says which item comes next.
class NoPeekSource final : public ItemSource {
 public:
  explicit NoPeekSource(WorkQueue* queue) : queue_(queue) {}
  absl::StatusOr<WorkItem> NextItem() override { return queue_->NextItem(); }
  absl::Status ItemDone(const WorkItem& item) override { return queue_->ItemDone(item); }
  void NoteProgress(const WorkItem& item, int64_t offset) override {
    queue_->NoteProgress(item, offset);
  }

 private:
  WorkQueue* const queue_;
};

int Run(const std::vector<std::string>& works, int workers, int64_t slices,
        bool open_ahead) {
  WorkQueueOptions options;
  options.works = works;
  // 0: no num_slices, every work one whole item (an object is then not
  // sniffed at planning: one request fewer per object).
  if (slices > 0) options.num_slices = slices;
  options.name = "object-read";
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<WorkQueue>> queues;
  for (int i = 0; i < workers; ++i) {
    absl::StatusOr<std::unique_ptr<WorkQueue>> queue = WorkQueue::Create(options);
    if (!queue.ok()) {
      std::cerr << "object_read: " << queue.status() << "\n";
      return 1;
    }
    queues.push_back(*std::move(queue));
  }
  const double plan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::atomic<int64_t> records{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < workers; ++i) {
    threads.emplace_back([&, i] {
      TFRecordReader reader;
      NoPeekSource no_peek(queues[i].get());
      ItemSource& source = open_ahead ? static_cast<ItemSource&>(*queues[i]) : no_peek;
      std::vector<Record> batch;
      int64_t n = 0;
      int64_t b = 0;
      while (true) {
        absl::Status s = reader.ReadUpTo(source, 64, &batch);
        if (absl::IsOutOfRange(s)) break;
        if (!s.ok()) {
          std::cerr << "object_read: " << s << "\n";
          failed = true;
          return;
        }
        for (const Record& r : batch) {
          ++n;
          b += static_cast<int64_t>(r.value.size());
        }
      }
      records += n;
      bytes += b;
    });
  }
  for (std::thread& t : threads) t.join();
  if (failed) return 1;
  std::printf("%lld %lld %.3f\n", static_cast<long long>(records.load()),
              static_cast<long long>(bytes.load()), plan_seconds);
  return 0;
}

}  // namespace
}  // namespace shardq

int main(int argc, char** argv) {
  shardq::UseProductionMutexMode();
  CLI::App app{"shardq's TFRecordReader over a WorkQueue (bench/object_store)"};
  int workers = 1;
  int64_t slices = 128;
  std::vector<std::string> works;
  bool no_open_ahead = false;
  app.add_flag("--no-open-ahead", no_open_ahead,
               "open each item only when its reading starts");
  app.add_option("--workers", workers, "reader threads, each a worker")
      ->check(CLI::Range(1, 256));
  app.add_option("--slices", slices,
                 "num_slices of the queue (0: none, every work a whole item)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("works", works, "files or s3:// names (globs allowed)")->required();
  CLI11_PARSE(app, argc, argv);
  return shardq::Run(works, workers, slices, !no_open_ahead);
}
