// bench/read_throughput driver: makes the data set, and reads it one way
// per invocation, printing "<seconds> <records> <data bytes>" on stdout
// (bench/read_throughput/run times `cat` and tf.data next to it, repeats
// each reader and prints the table).
//
//   read_throughput gen --tfrecord F.tfrecord --text F.txt --bytes N
//                       --record-bytes A [--seed S]
//       Random printable records (no newline) of A/2..3A/2 bytes, written
//       as TFRecord (TFRecordWriter) and as text lines, until the TFRecord
//       file holds at least N bytes.
//   read_throughput tfrecord-slice F [--buffer-bytes B]
//                                        TFRecordSliceReader::Next into one
//                                        reused string, CRCs checked
//   read_throughput tfrecord-reader F [--batch N]
//                                        TFRecordReader::ReadUpTo(N = 1024)
//                                        over a ListItemSource (the public
//                                        API: a Record with its key each)
//   read_throughput text-slice F         TextSliceReader::Next, reused string
//   read_throughput text-reader F [--batch N]
//                                        TextLineReader::ReadUpTo(N = 1024)
//   --reuse (the -reader modes): the ReadUpTo that fills the caller's
//   vector, passed back every call (the Records' strings keep their
//   capacity), instead of a new vector of new Records per call.
//
// One thread each. Errors go to stderr with a non-zero exit.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "shardq/item_source.h"
#include "shardq/text_line_reader.h"
#include "shardq/tfrecord_reader.h"
#include "src/io/text_slice_reader.h"
#include "src/io/tfrecord.h"
#include "src/log/mutex_mode.h"

namespace shardq {
namespace {

struct Totals {
  int64_t records = 0;
  int64_t bytes = 0;
};

class Xorshift {
 public:
  explicit Xorshift(uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 1) {}
  uint64_t Next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }

 private:
  uint64_t s_;
};

absl::Status Generate(const std::string& tfrecord_path,
                      const std::string& text_path, int64_t target_bytes,
                      int64_t record_bytes, uint64_t seed) {
  absl::StatusOr<std::unique_ptr<TFRecordWriter>> writer =
      TFRecordWriter::Create(tfrecord_path);
  if (!writer.ok()) return writer.status();
  std::ofstream text(text_path, std::ios::binary | std::ios::trunc);
  if (!text) return absl::NotFoundError("cannot create " + text_path);
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/ ,.:;";
  Xorshift rng(seed);
  std::string record;
  const int64_t low = std::max<int64_t>(1, record_bytes / 2);
  const int64_t span = std::max<int64_t>(1, record_bytes);
  while ((*writer)->size() < target_bytes) {
    const int64_t length = low + static_cast<int64_t>(rng.Next() % span);
    record.resize(static_cast<size_t>(length));
    for (int64_t i = 0; i < length; i += 8) {
      uint64_t bits = rng.Next();
      for (int64_t j = i; j < length && j < i + 8; ++j, bits >>= 8) {
        record[static_cast<size_t>(j)] =
            kAlphabet[(bits & 0xff) % (sizeof(kAlphabet) - 1)];
      }
    }
    if (absl::Status s = (*writer)->Write(record); !s.ok()) return s;
    text.write(record.data(), static_cast<std::streamsize>(record.size()));
    text.put('\n');
  }
  if (absl::Status s = (*writer)->Close(); !s.ok()) return s;
  text.close();
  if (!text) return absl::DataLossError("cannot write " + text_path);
  return absl::OkStatus();
}

absl::StatusOr<Totals> ReadTFRecordSlice(const std::string& path,
                                         size_t buffer_bytes) {
  TFRecordReadOptions options;
  if (buffer_bytes > 0) options.buffer_bytes = buffer_bytes;
  absl::StatusOr<std::unique_ptr<TFRecordSliceReader>> reader =
      TFRecordSliceReader::Open(path, 0, -1, options);
  if (!reader.ok()) return reader.status();
  Totals totals;
  std::string record;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&record, nullptr);
    if (!more.ok()) return more.status();
    if (!*more) break;
    ++totals.records;
    totals.bytes += static_cast<int64_t>(record.size());
  }
  return totals;
}

template <typename Reader>
absl::StatusOr<Totals> ReadUpToAll(Reader& reader, const std::string& path,
                                   int64_t batch_records, bool reuse) {
  ListItemSource source({path});
  Totals totals;
  if (reuse) {
    std::vector<Record> batch;
    while (true) {
      absl::Status s = reader.ReadUpTo(source, batch_records, &batch);
      if (absl::IsOutOfRange(s)) break;
      if (!s.ok()) return s;
      for (const Record& r : batch) {
        ++totals.records;
        totals.bytes += static_cast<int64_t>(r.value.size());
      }
    }
    return totals;
  }
  while (true) {
    absl::StatusOr<std::vector<Record>> batch =
        reader.ReadUpTo(source, batch_records);
    if (absl::IsOutOfRange(batch.status())) break;
    if (!batch.ok()) return batch.status();
    for (const Record& r : *batch) {
      ++totals.records;
      totals.bytes += static_cast<int64_t>(r.value.size());
    }
  }
  return totals;
}

absl::StatusOr<Totals> ReadTextSlice(const std::string& path) {
  absl::StatusOr<std::unique_ptr<TextSliceReader>> reader =
      TextSliceReader::Open(path, 0, -1);
  if (!reader.ok()) return reader.status();
  Totals totals;
  std::string line;
  int64_t offset = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&line, &offset);
    if (!more.ok()) return more.status();
    if (!*more) break;
    ++totals.records;
    totals.bytes += static_cast<int64_t>(line.size());
  }
  return totals;
}

int Run(const std::string& mode, const std::string& path,
        size_t buffer_bytes, int64_t batch_records, bool reuse) {
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Totals> totals;
  if (mode == "tfrecord-slice") {
    totals = ReadTFRecordSlice(path, buffer_bytes);
  } else if (mode == "tfrecord-reader") {
    TFRecordReaderOptions options;
    if (buffer_bytes > 0) options.buffer_bytes = buffer_bytes;
    TFRecordReader reader(options);
    totals = ReadUpToAll(reader, path, batch_records, reuse);
  } else if (mode == "text-slice") {
    totals = ReadTextSlice(path);
  } else {
    TextLineReader reader;
    totals = ReadUpToAll(reader, path, batch_records, reuse);
  }
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  if (!totals.ok()) {
    std::cerr << "read_throughput " << mode << ": " << totals.status() << "\n";
    return 1;
  }
  std::printf("%.6f %lld %lld\n", seconds,
              static_cast<long long>(totals->records),
              static_cast<long long>(totals->bytes));
  return 0;
}

}  // namespace
}  // namespace shardq

int main(int argc, char** argv) {
  shardq::UseProductionMutexMode();  // as `shardq serve` (src/log/mutex_mode.h)
  CLI::App app{"bench/read_throughput driver"};
  app.require_subcommand(1);
  std::string tfrecord;
  std::string text;
  int64_t bytes = 1LL << 30;
  int64_t record_bytes = 1000;
  uint64_t seed = 1;
  CLI::App* gen = app.add_subcommand("gen", "write the data set");
  gen->add_option("--tfrecord", tfrecord)->required();
  gen->add_option("--text", text)->required();
  gen->add_option("--bytes", bytes, "TFRecord file size to reach");
  gen->add_option("--record-bytes", record_bytes, "mean record size");
  gen->add_option("--seed", seed);
  std::string path;
  std::string mode;
  size_t buffer_bytes = 0;
  int64_t batch_records = 1024;
  bool reuse = false;
  for (const char* name :
       {"tfrecord-slice", "tfrecord-reader", "text-slice", "text-reader"}) {
    CLI::App* sub = app.add_subcommand(name, "read FILE once, print "
                                             "'<seconds> <records> <bytes>'");
    sub->add_option("file", path)->required();
    if (absl::StartsWith(name, "tfrecord-")) {
      sub->add_option("--buffer-bytes", buffer_bytes,
                      "TFRecordReadOptions::buffer_bytes (default: its default)");
    }
    if (absl::EndsWith(name, "-reader")) {
      sub->add_option("--batch", batch_records, "records per ReadUpTo call")
          ->check(CLI::PositiveNumber);
      sub->add_flag("--reuse", reuse,
                    "fill one caller-owned vector, passed back every call");
    }
    sub->callback([&mode, name] { mode = name; });
  }
  CLI11_PARSE(app, argc, argv);
  if (gen->parsed()) {
    absl::Status s = shardq::Generate(tfrecord, text, bytes, record_bytes, seed);
    if (!s.ok()) {
      std::cerr << "read_throughput gen: " << s << "\n";
      return 1;
    }
    return 0;
  }
  return shardq::Run(mode, path, buffer_bytes, batch_records, reuse);
}
