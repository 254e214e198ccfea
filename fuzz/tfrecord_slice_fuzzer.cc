// Fuzz target: TFRecord files of arbitrary bytes, read whole and as byte
// range slices by TFRecordSliceReader under both on_corrupt policies, and
// whole by TFRecordReader (which adds the GZIP/ZLIB path).
//
// The input is the file. The slice cuts and read-buffer sizes are derived
// from a hash of it: one plan of K even cuts, one of random cuts with an
// end past the end of the file. Beyond "no crash, no hang, no unbounded
// allocation" (ASan, libFuzzer's -timeout and -rss_limit_mb), it checks the
// contract of src/io/tfrecord.h:
//  - every record returned is a valid record at the offset returned, inside
//    its slice, in file order; stats() counts them;
//  - errors are DATA_LOSS naming the file; kSkip never fails;
//  - a whole-file kSkip read accounts for every byte (records + skipped);
//  - unless a valid record starts inside another record (the residual risk
//    the header documents, detected here by brute force): the slices'
//    records are exactly the whole file's, in order, under kSkip with the
//    same skip counts; under kFail a valid file reads identically, and a
//    corrupt one fails in some slice at the same byte offset as the
//    whole-file read, after returning a prefix of its records.
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "shardq/item_source.h"
#include "shardq/tfrecord_reader.h"
#include "src/io/crc32c.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace {

constexpr int64_t kFraming = kTFRecordHeaderBytes + kTFRecordFooterBytes;

// Two files in a private temporary directory, rewritten for every input and
// removed at exit: "input.tfrecord" (plain or GZIP, told by its magic bytes)
// and "input.zz" (read as ZLIB by its name).
struct TempFiles {
  std::string dir;
  std::string plain;
  std::string zlib;

  static const TempFiles& Get() {
    static const TempFiles* files = [] {
      const char* tmp = std::getenv("TMPDIR");
      std::string pattern =
          absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                       "/shardq-fuzz-XXXXXX");
      FUZZ_CHECK(::mkdtemp(pattern.data()) != nullptr, "mkdtemp failed");
      auto* made = new TempFiles{pattern, pattern + "/input.tfrecord",
                                 pattern + "/input.zz"};
      std::atexit([] {
        const TempFiles& f = Get();
        ::unlink(f.plain.c_str());
        ::unlink(f.zlib.c_str());
        ::rmdir(f.dir.c_str());
      });
      return made;
    }();
    return *files;
  }
};

void WriteFile(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  FUZZ_CHECK(fd >= 0, "cannot create " + path);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    FUZZ_CHECK(n > 0, "cannot write " + path);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

uint64_t Mix(uint64_t x) {  // SplitMix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Hash(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (char c : bytes) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return Mix(h);
}

uint64_t Load64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

uint32_t Load32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// The oracle, written independently of the reader (portable CRC, no
// buffering): whether a complete valid record starts at byte p.
bool ValidRecordAt(const std::string& file, int64_t p) {
  const int64_t size = static_cast<int64_t>(file.size());
  if (p < 0 || size - p < kFraming) return false;
  const char* h = file.data() + p;
  if (Crc32cPortable(0, h, 8) != UnmaskCrc(Load32(h + 8))) return false;
  const uint64_t length = Load64(h);
  if (length > static_cast<uint64_t>(size - p - kFraming)) return false;
  const char* d = h + kTFRecordHeaderBytes;
  return Crc32cPortable(0, d, length) == UnmaskCrc(Load32(d + length));
}

struct ReadRecord {
  int64_t offset;
  std::string data;
  bool operator==(const ReadRecord& o) const {
    return offset == o.offset && data == o.data;
  }
};

struct ReadResult {
  absl::Status status;
  std::vector<ReadRecord> records;
  TFRecordReadStats stats;
};

std::string Describe(int64_t start, int64_t end,
                     TFRecordReadOptions::OnCorrupt policy) {
  return absl::StrCat("slice [", start, ", ", end, ") ",
                      policy == TFRecordReadOptions::kFail ? "kFail" : "kSkip");
}

// Reads one slice and checks what holds for any single reader.
ReadResult ReadSlice(const std::string& path, const std::string& file,
                     int64_t start, int64_t end,
                     TFRecordReadOptions::OnCorrupt policy,
                     size_t buffer_bytes) {
  const std::string what = Describe(start, end, policy);
  TFRecordReadOptions options;
  options.on_corrupt = policy;
  options.buffer_bytes = buffer_bytes;
  absl::StatusOr<std::unique_ptr<TFRecordSliceReader>> reader =
      TFRecordSliceReader::Open(path, start, end, options);
  FUZZ_CHECK(reader.ok(), what + ": " + reader.status().ToString());

  ReadResult result;
  const int64_t size = static_cast<int64_t>(file.size());
  const int64_t slice_end = end < 0 || end > size ? size : end;
  std::string data;
  int64_t offset = -1;
  int64_t next_free = start;  // records never overlap
  int64_t data_bytes = 0;
  while (true) {
    FUZZ_CHECK(static_cast<int64_t>(result.records.size()) <=
                   size / kFraming,
               what + ": more records than fit in the file");
    absl::StatusOr<bool> more = (*reader)->Next(&data, &offset);
    if (!more.ok()) {
      result.status = more.status();
      break;
    }
    if (!*more) break;
    FUZZ_CHECK(offset >= next_free && offset < slice_end,
               absl::StrCat(what, ": record offset ", offset));
    FUZZ_CHECK(ValidRecordAt(file, offset) &&
                   file.compare(static_cast<size_t>(offset),
                                data.size() + kFraming,
                                EncodeTFRecord(data)) == 0,
               absl::StrCat(what, ": record at ", offset,
                            " is not the file's bytes"));
    next_free = offset + kFraming + static_cast<int64_t>(data.size());
    data_bytes += static_cast<int64_t>(data.size());
    result.records.push_back({offset, data});
  }
  result.stats = (*reader)->stats();
  FUZZ_CHECK(result.stats.records ==
                     static_cast<int64_t>(result.records.size()) &&
                 result.stats.bytes == data_bytes,
             what + ": stats do not count the records returned");

  // The end, or the error, is sticky.
  absl::StatusOr<bool> again = (*reader)->Next(&data, &offset);
  if (result.status.ok()) {
    FUZZ_CHECK(again.ok() && !*again, what + ": read past the end");
  } else {
    FUZZ_CHECK(again.status() == result.status, what + ": error not sticky");
    FUZZ_CHECK(absl::IsDataLoss(result.status),
               what + ": unexpected error " + result.status.ToString());
    FUZZ_CHECK(absl::StrContains(result.status.message(), path),
               what + ": error does not name the file");
    FUZZ_CHECK(policy == TFRecordReadOptions::kFail,
               what + ": kSkip failed: " + result.status.ToString());
  }
  if (policy == TFRecordReadOptions::kFail) {
    FUZZ_CHECK(result.stats.skipped_bytes == 0 &&
                   result.stats.corrupt_regions == 0,
               what + ": kFail skipped bytes");
  }
  return result;
}

// True when a valid record starts strictly inside one of `records` (the
// chain of a whole-file kSkip read): the case in which slicing may
// legitimately diverge from a whole-file read.
bool HasFalseBoundary(const std::string& file,
                      const std::vector<ReadRecord>& records) {
  for (const ReadRecord& r : records) {
    const int64_t end = r.offset + kFraming + static_cast<int64_t>(r.data.size());
    for (int64_t p = r.offset + 1; p < end; ++p) {
      if (ValidRecordAt(file, p)) return true;
    }
  }
  return false;
}

std::string OffsetText(int64_t offset) {
  return absl::StrCat("at byte offset ", offset, ":");
}

void CheckPlan(const std::string& path, const std::string& file,
               const std::vector<int64_t>& cuts, size_t buffer_bytes,
               const ReadResult& whole_fail, const ReadResult& whole_skip,
               bool clean) {
  for (TFRecordReadOptions::OnCorrupt policy :
       {TFRecordReadOptions::kFail, TFRecordReadOptions::kSkip}) {
    std::vector<ReadResult> parts;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      parts.push_back(
          ReadSlice(path, file, cuts[i], cuts[i + 1], policy, buffer_bytes));
    }
    if (!clean) continue;
    const std::string what =
        absl::StrCat(cuts.size() - 1, " slices, ",
                     policy == TFRecordReadOptions::kFail ? "kFail" : "kSkip");
    if (policy == TFRecordReadOptions::kSkip) {
      std::vector<ReadRecord> all;
      int64_t skipped = 0;
      int64_t regions = 0;
      for (const ReadResult& part : parts) {
        all.insert(all.end(), part.records.begin(), part.records.end());
        skipped += part.stats.skipped_bytes;
        regions += part.stats.corrupt_regions;
      }
      FUZZ_CHECK(all == whole_skip.records,
                 what + ": records differ from the whole-file read");
      FUZZ_CHECK(skipped == whole_skip.stats.skipped_bytes &&
                     regions == whole_skip.stats.corrupt_regions,
                 absl::StrCat(what, ": skipped ", skipped, " bytes in ",
                              regions, " regions, whole-file read ",
                              whole_skip.stats.skipped_bytes, " in ",
                              whole_skip.stats.corrupt_regions));
      continue;
    }
    std::vector<ReadRecord> before_error;
    const ReadResult* failed = nullptr;
    for (const ReadResult& part : parts) {
      if (!part.status.ok()) {
        failed = &part;
        break;
      }
      before_error.insert(before_error.end(), part.records.begin(),
                          part.records.end());
    }
    if (whole_fail.status.ok()) {
      FUZZ_CHECK(failed == nullptr,
                 what + ": a valid file failed: " + failed->status.ToString());
      FUZZ_CHECK(before_error == whole_fail.records,
                 what + ": records differ from the whole-file read");
      continue;
    }
    FUZZ_CHECK(failed != nullptr,
               what + ": corruption passed over silently (whole file: " +
                   whole_fail.status.ToString() + ")");
    const int64_t bad = whole_fail.records.empty()
                            ? 0
                            : whole_fail.records.back().offset + kFraming +
                                  static_cast<int64_t>(
                                      whole_fail.records.back().data.size());
    FUZZ_CHECK(absl::StrContains(failed->status.message(), OffsetText(bad)),
               absl::StrCat(what, ": expected the error at ", bad, ", got ",
                            failed->status.ToString()));
    FUZZ_CHECK(before_error.size() <= whole_fail.records.size() &&
                   std::equal(before_error.begin(), before_error.end(),
                              whole_fail.records.begin()),
               what + ": records before the error are not the file's first");
  }
}

// TFRecordReader over a whole item: plain files must read as the slice
// reader reads them; compressed ones must end cleanly or with DATA_LOSS.
void CheckTFRecordReader(const std::string& path, bool compressed,
                         const ReadResult& whole_fail,
                         const ReadResult& whole_skip) {
  for (auto policy : {TFRecordReaderOptions::OnCorrupt::kFail,
                      TFRecordReaderOptions::OnCorrupt::kSkip}) {
    TFRecordReaderOptions options;
    options.on_corrupt = policy;
    options.buffer_bytes = 64;
    options.log_skips = false;
    TFRecordReader reader(options);
    ListItemSource source({path});
    std::vector<std::string> values;
    absl::Status end;
    while (true) {
      absl::StatusOr<std::vector<Record>> batch = reader.ReadUpTo(source, 7);
      if (!batch.ok()) {
        end = batch.status();
        break;
      }
      for (Record& r : *batch) values.push_back(std::move(r.value));
    }
    FUZZ_CHECK(absl::IsOutOfRange(end) || absl::IsDataLoss(end),
               "TFRecordReader: unexpected error " + end.ToString());
    if (compressed) continue;
    const bool fail = policy == TFRecordReaderOptions::OnCorrupt::kFail;
    const ReadResult& expected = fail ? whole_fail : whole_skip;
    FUZZ_CHECK(absl::IsOutOfRange(end) == expected.status.ok(),
               "TFRecordReader ended with " + end.ToString() +
                   ", the slice reader with " + expected.status.ToString());
    FUZZ_CHECK(values.size() == expected.records.size(),
               absl::StrCat("TFRecordReader read ", values.size(),
                            " records, the slice reader ",
                            expected.records.size()));
    for (size_t i = 0; i < values.size(); ++i) {
      FUZZ_CHECK(values[i] == expected.records[i].data,
                 absl::StrCat("TFRecordReader record ", i, " differs"));
    }
  }
}

}  // namespace
}  // namespace shardq

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using shardq::TFRecordReadOptions;
  const shardq::TempFiles& files = shardq::TempFiles::Get();
  const std::string file(reinterpret_cast<const char*>(data), size);
  const std::string& path = files.plain;
  shardq::WriteFile(path, file);
  const int64_t n = static_cast<int64_t>(size);

  const shardq::ReadResult whole_fail = shardq::ReadSlice(
      path, file, 0, -1, TFRecordReadOptions::kFail, 4096);
  const shardq::ReadResult whole_skip =
      shardq::ReadSlice(path, file, 0, -1, TFRecordReadOptions::kSkip, 64);

  // A whole-file read under kFail walks record after record from 0; under
  // kSkip it also accounts for every byte.
  int64_t expected_offset = 0;
  for (const shardq::ReadRecord& r : whole_fail.records) {
    FUZZ_CHECK(r.offset == expected_offset, "whole-file read left a gap");
    expected_offset += shardq::kFraming + static_cast<int64_t>(r.data.size());
  }
  FUZZ_CHECK(!whole_fail.status.ok() || expected_offset == n,
             "whole-file read ended before the end of the file");
  int64_t accounted = whole_skip.stats.skipped_bytes;
  for (const shardq::ReadRecord& r : whole_skip.records) {
    accounted += shardq::kFraming + static_cast<int64_t>(r.data.size());
  }
  FUZZ_CHECK(accounted == n,
             absl::StrCat("kSkip accounted for ", accounted, " of ", n,
                          " bytes"));
  if (whole_fail.status.ok()) {
    FUZZ_CHECK(whole_skip.records == whole_fail.records &&
                   whole_skip.stats.corrupt_regions == 0,
               "kSkip read a valid file differently");
  } else {
    FUZZ_CHECK(whole_skip.stats.corrupt_regions >= 1 &&
                   std::equal(whole_fail.records.begin(),
                              whole_fail.records.end(),
                              whole_skip.records.begin()),
               "kSkip disagrees with kFail before the first corruption");
  }

  const bool clean = !shardq::HasFalseBoundary(file, whole_skip.records);
  const uint64_t h = shardq::Hash(file);
  // Plan 1: K even cuts, as the planner makes them, with a tiny buffer.
  const int64_t k = 2 + static_cast<int64_t>(h % 4);
  std::vector<int64_t> even;
  for (int64_t i = 0; i <= k; ++i) even.push_back(n * i / k);
  shardq::CheckPlan(path, file, even, 64, whole_fail, whole_skip, clean);
  // Plan 2: random cuts (empty slices allowed).
  std::vector<int64_t> random = {0};
  for (int i = 1; i <= 3; ++i) {
    random.push_back(static_cast<int64_t>(shardq::Mix(h + i) %
                                          static_cast<uint64_t>(n + 1)));
  }
  std::sort(random.begin(), random.end());
  random.push_back(n);
  shardq::CheckPlan(path, file, random, 100 + (h >> 32) % 200, whole_fail,
                    whole_skip, clean);
  // A range ending past the file was planned on a longer file: refused.
  const int64_t past = n + 1 + static_cast<int64_t>(h % 7);
  const absl::Status refused =
      shardq::TFRecordSliceReader::Open(path, random[1], past).status();
  FUZZ_CHECK(absl::IsFailedPrecondition(refused),
             absl::StrCat("slice [", random[1], ", ", past,
                          ") of a file of ", n, " bytes: ",
                          refused.ToString()));

  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  shardq::CheckTFRecordReader(path, gzip, whole_fail, whole_skip);
  if (size >= 2 && data[0] == 0x78) {  // a likely ZLIB header
    shardq::WriteFile(files.zlib, file);
    shardq::CheckTFRecordReader(files.zlib, /*compressed=*/true, whole_fail,
                                whole_skip);
  }
  return 0;
}
