// bench/pipeline_throughput driver (issue 6): the input pipeline
// (ReadItems -> Shuffle -> Batch -> Prefetch over a WorkQueue) next to a
// plain single-threaded loop doing the same work (TextLineReader /
// TFRecordReader over the same WorkQueue, the same shuffle buffer and
// batching, by hand). One configuration per invocation, so that each has
// its own process and peak RSS; bench/pipeline_throughput/run makes the
// data and prints the table.
//
//   pipeline_throughput gen --dir D --format text|tfrecord --files F
//                           --bytes N [--record-bytes A]
//       F files of random printable records of A/2..3A/2 bytes, N bytes in
//       all.
//   pipeline_throughput read --dir D --format text|tfrecord --files F
//                            --mode plain|pipeline [--threads T]
//                            [--slices S] [--shuffle B] [--batch K]
//       Reads every record once through a fresh embedded WorkQueue of S
//       slices and prints one line:
//         <mode> <threads> <seconds> <records> <bytes> <rss25> <rss50>
//         <rss75> <rss100> <peak_rss> <reader_cpu>      (RSS in MiB)
//       reader_cpu: CPU seconds of the reading thread (plain: the loop's
//       thread from the first read on; pipeline: the thread named
//       sq:prefetch, which reads and runs the stages with --threads 1, as
//       of the last batch but a few), steadier than the wall time on a
//       shared host.
//       threads (pipeline only): 1 = every stage in one reading thread
//       plus the prefetch thread; T > 1 = T parallel reads and T map
//       threads. --step-us U: the consumer busy-works U us per batch (a
//       training step), after the batch, in both modes. --recycle 0:
//       the pipeline's consumer drops each batch instead of handing it
//       back with Iterator::Recycle.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "shardq/pipeline/dataset.h"
#include "shardq/text_line_reader.h"
#include "shardq/tfrecord_reader.h"
#include "shardq/work_queue.h"
#include "src/core/rng.h"
#include "src/io/tfrecord.h"
#include "src/log/mutex_mode.h"

namespace shardq {
namespace {

using pipeline::Batch;

std::string FilePath(const std::string& dir, const std::string& format,
                     int index) {
  return absl::StrCat(dir, "/part-", index,
                      format == "text" ? ".txt" : ".tfrecord");
}

// Resident and peak resident memory of this process, in MiB.
void ReadRss(double* rss, double* peak) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) *rss = std::stod(line.substr(6)) / 1024;
    if (line.rfind("VmHWM:", 0) == 0) *peak = std::stod(line.substr(6)) / 1024;
  }
}

absl::Status Generate(const std::string& dir, const std::string& format,
                      int files, int64_t bytes, int64_t record_bytes) {
  SplitMix64 rng(12345);
  const int64_t per_file = bytes / files;
  for (int f = 0; f < files; ++f) {
    const std::string path = FilePath(dir, format, f);
    std::unique_ptr<TFRecordWriter> tfrecord;
    std::ofstream text;
    if (format == "text") {
      text.open(path, std::ios::binary | std::ios::trunc);
      if (!text) return absl::NotFoundError(absl::StrCat("cannot write ", path));
    } else {
      absl::StatusOr<std::unique_ptr<TFRecordWriter>> writer =
          TFRecordWriter::Create(path);
      if (!writer.ok()) return writer.status();
      tfrecord = *std::move(writer);
    }
    int64_t written = 0;
    std::string record;
    while (written < per_file) {
      const int64_t n = record_bytes / 2 +
                        static_cast<int64_t>(rng.UniformBelow(
                            static_cast<uint64_t>(record_bytes) + 1));
      record.resize(static_cast<size_t>(n));
      for (char& c : record) c = static_cast<char>('a' + rng.UniformBelow(26));
      if (tfrecord != nullptr) {
        if (absl::Status s = tfrecord->Write(record); !s.ok()) return s;
      } else {
        text << record << '\n';
      }
      written += n + 1;
    }
    if (tfrecord != nullptr) {
      if (absl::Status s = tfrecord->Close(); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

struct Options {
  std::string dir;
  std::string format = "text";
  int files = 8;
  std::string mode = "pipeline";
  int threads = 1;
  int64_t slices = 64;
  int64_t shuffle = 1024;
  int64_t batch = 256;
  int64_t expected_bytes = 0;  // for the RSS checkpoints
  int map_threads = -1;        // -1: as threads
  int64_t step_us = 0;         // simulated training step per batch
  bool recycle = true;         // pipeline: hand spent batches back
  int64_t cycle = 4;           // pipeline: items read at once (interleave)
};

// Busy-waits `us` microseconds: a training step that keeps its core busy
// (the work an accelerator's host thread does per batch).
void Step(int64_t us) {
  if (us <= 0) return;
  const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < end) {
  }
}

// CPU seconds a thread of this process has run (/proc schedstat; `task`
// "thread-self" or "self/task/TID"); 0 when unreadable.
double ThreadCpuSeconds(const std::string& task) {
  std::ifstream in("/proc/" + task + "/schedstat");
  double ns = 0;
  if (!(in >> ns)) return 0;
  return ns / 1e9;
}

// The "self/task/TID" of the thread of this process named `name` (the
// first found); empty when there is none.
std::string NamedThread(const std::string& name) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(entry.path() / "comm");
    std::string got;
    if (std::getline(comm, got) && got == name) {
      return "self/task/" + entry.path().filename().string();
    }
  }
  return "";
}

// Prints RSS at each quarter of the expected bytes.
class RssProbe {
 public:
  explicit RssProbe(int64_t total) : total_(total) {}
  void Update(int64_t bytes) {
    while (next_ < 4 && bytes * 4 >= total_ * (next_ + 1)) {
      double peak = 0;
      ReadRss(&rss_[next_], &peak);
      ++next_;
    }
  }
  void Finish() {
    while (next_ < 4) {
      double peak = 0;
      ReadRss(&rss_[next_++], &peak);
    }
  }
  const double* rss() const { return rss_; }

 private:
  const int64_t total_;
  int next_ = 0;
  double rss_[4] = {0, 0, 0, 0};
};

absl::StatusOr<std::unique_ptr<WorkQueue>> MakeQueue(const Options& o) {
  WorkQueueOptions options;
  options.name = "bench";
  for (int f = 0; f < o.files; ++f) {
    options.works.push_back(FilePath(o.dir, o.format, f));
  }
  options.num_slices = o.slices;
  options.num_clients = 64;
  options.seed = 1;
  return WorkQueue::Create(options);
}

// The plain loop: one thread reads records, keeps a shuffle buffer, and
// forms batches, as the pipeline does.
absl::Status ReadPlain(WorkQueue& queue, const Options& o, int64_t* records,
                       int64_t* bytes, RssProbe& probe, double* reader_cpu) {
  const double cpu_at_start = ThreadCpuSeconds("thread-self");
  TextLineReader text;
  TFRecordReader tfrecord;
  SplitMix64 rng(5);
  std::vector<Record> buffer;
  buffer.reserve(static_cast<size_t>(o.shuffle));
  std::vector<Record> batch;
  auto take_one = [&] {
    const size_t i = static_cast<size_t>(rng.UniformBelow(buffer.size()));
    batch.push_back(std::move(buffer[i]));
    if (i + 1 != buffer.size()) buffer[i] = std::move(buffer.back());
    buffer.pop_back();
    if (static_cast<int64_t>(batch.size()) == o.batch) {
      for (const Record& r : batch) *bytes += static_cast<int64_t>(r.value.size());
      *records += static_cast<int64_t>(batch.size());
      probe.Update(*bytes);
      Step(o.step_us);
      batch.clear();
    }
  };
  while (true) {
    absl::StatusOr<std::vector<Record>> got =
        o.format == "text" ? text.ReadUpTo(queue, 256)
                           : tfrecord.ReadUpTo(queue, 256);
    if (absl::IsOutOfRange(got.status())) break;
    if (!got.ok()) return got.status();
    for (Record& r : *got) {
      buffer.push_back(std::move(r));
      if (static_cast<int64_t>(buffer.size()) == o.shuffle) take_one();
    }
  }
  while (!buffer.empty()) take_one();
  for (const Record& r : batch) *bytes += static_cast<int64_t>(r.value.size());
  *records += static_cast<int64_t>(batch.size());
  *reader_cpu = ThreadCpuSeconds("thread-self") - cpu_at_start;
  return absl::OkStatus();
}

absl::Status ReadPipeline(WorkQueue& queue, const Options& o,
                          int64_t* records, int64_t* bytes, RssProbe& probe,
                          double* reader_cpu) {
  pipeline::InterleaveOptions read;
  read.cycle_length = o.cycle;
  read.block_length = 16;
  read.num_parallel_reads = o.threads > 1 ? o.threads : 1;
  pipeline::ShuffleOptions shuffle;
  shuffle.buffer_size = o.shuffle;
  shuffle.seed = 5;
  pipeline::BatchOptions batch;
  batch.batch_size = o.batch;
  pipeline::MapOptions map;
  map.num_threads = o.map_threads >= 0 ? o.map_threads
                                      : (o.threads > 1 ? o.threads : 0);
  pipeline::RecordReaderFactory factory =
      o.format == "text" ? pipeline::TextReaderFactory()
                         : pipeline::TFRecordReaderFactory();
  auto dataset = pipeline::ReadItems(&queue, factory, read)
                     .Map([](Record r) { return std::move(r.value); }, map)
                     .Shuffle(shuffle)
                     .Batch(batch)
                     .Prefetch(4);
  absl::StatusOr<std::unique_ptr<pipeline::Iterator<Batch<std::string>>>> it =
      dataset.MakeIterator();
  if (!it.ok()) return it.status();
  // The reading thread ends with the data: its CPU time is read after
  // each batch, the last reading kept.
  std::string reader;
  while (true) {
    absl::StatusOr<Batch<std::string>> next = (*it)->Next();
    if (absl::IsOutOfRange(next.status())) break;
    if (!next.ok()) return next.status();
    if (reader.empty()) reader = NamedThread("sq:prefetch");
    if (!reader.empty()) {
      const double cpu = ThreadCpuSeconds(reader);
      if (cpu > 0) *reader_cpu = cpu;
    }
    for (const std::string& v : next->rows) *bytes += static_cast<int64_t>(v.size());
    *records += next->size();
    probe.Update(*bytes);
    Step(o.step_us);
    if (o.recycle) (*it)->Recycle(*std::move(next));
  }
  return absl::OkStatus();
}

int Read(const Options& o) {
  absl::StatusOr<std::unique_ptr<WorkQueue>> queue = MakeQueue(o);
  if (!queue.ok()) {
    std::cerr << queue.status() << "\n";
    return 1;
  }
  int64_t records = 0;
  int64_t bytes = 0;
  RssProbe probe(o.expected_bytes);
  const auto start = std::chrono::steady_clock::now();
  double reader_cpu = 0;
  absl::Status status =
      o.mode == "plain" ? ReadPlain(**queue, o, &records, &bytes, probe, &reader_cpu)
                        : ReadPipeline(**queue, o, &records, &bytes, probe, &reader_cpu);
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  probe.Finish();
  double rss = 0;
  double peak = 0;
  ReadRss(&rss, &peak);
  std::printf("%s %d %.3f %lld %lld %.1f %.1f %.1f %.1f %.1f %.3f\n",
              o.mode.c_str(), o.mode == "plain" ? 1 : o.threads, seconds,
              static_cast<long long>(records), static_cast<long long>(bytes),
              probe.rss()[0], probe.rss()[1], probe.rss()[2], probe.rss()[3],
              peak, reader_cpu);
  return 0;
}

}  // namespace
}  // namespace shardq

int main(int argc, char** argv) {
  shardq::UseProductionMutexMode();  // as `shardq serve` (src/log/mutex_mode.h)
  CLI::App app("shardq input pipeline throughput");
  app.require_subcommand(1);
  shardq::Options o;
  int64_t gen_bytes = 64 << 20;
  int64_t record_bytes = 200;
  CLI::App* gen = app.add_subcommand("gen", "make the data set");
  gen->add_option("--dir", o.dir)->required();
  gen->add_option("--format", o.format)->check(CLI::IsMember({"text", "tfrecord"}));
  gen->add_option("--files", o.files);
  gen->add_option("--bytes", gen_bytes);
  gen->add_option("--record-bytes", record_bytes);
  CLI::App* read = app.add_subcommand("read", "read it once");
  read->add_option("--dir", o.dir)->required();
  read->add_option("--format", o.format)->check(CLI::IsMember({"text", "tfrecord"}));
  read->add_option("--files", o.files);
  read->add_option("--mode", o.mode)->check(CLI::IsMember({"plain", "pipeline"}));
  read->add_option("--threads", o.threads);
  read->add_option("--slices", o.slices);
  read->add_option("--shuffle", o.shuffle);
  read->add_option("--batch", o.batch);
  read->add_option("--step-us", o.step_us,
                   "busy work of the consumer per batch (a training step)");
  read->add_option("--recycle", o.recycle,
                   "pipeline: hand each spent batch back with Iterator::Recycle "
                   "(default 1; 0: drop it in the consumer)");
  read->add_option("--cycle", o.cycle,
                   "pipeline: items read at once, interleaved block by block (default 4; "
                   "1 reads them one after another, as the plain loop does)");
  read->add_option("--map-threads", o.map_threads,
                   "map threads (default: 0 with --threads 1, else threads)");
  read->add_option("--expected-bytes", o.expected_bytes,
                   "payload bytes in the data set, for the RSS checkpoints");
  CLI11_PARSE(app, argc, argv);
  if (gen->parsed()) {
    absl::Status s =
        shardq::Generate(o.dir, o.format, o.files, gen_bytes, record_bytes);
    if (!s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
    return 0;
  }
  return shardq::Read(o);
}
