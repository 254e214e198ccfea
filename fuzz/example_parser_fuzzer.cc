// Fuzz target: the tf.Example wire parser (src/parse/example_parser.h).
//
// Input: one byte choosing a feature spec, then records, each a 2-byte
// little-endian length and that many bytes (the last one cut by the end of
// the input). Checks:
//  - never a crash, an over-read (ASan) or a code other than
//    INVALID_ARGUMENT / DATA_LOSS; on success every buffer has
//    batch * prod(shape) values;
//  - differential, against protobuf's own parser (proto/shardq/example.proto
//    is wire-compatible with TensorFlow's): when every record is a
//    canonical Example (protobuf parses it and, without unknown fields,
//    re-serialises the same bytes, as TensorFlow's writers emit them), the
//    parser must agree with protobuf: the same values, bit for bit, or
//    INVALID_ARGUMENT for the first record whose feature is missing, of
//    another type or of another length. A Feature holding no list is read as an empty float list (what
//    the parser does; shapes with zero values accept it).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/stubs/logging.h"
#include "proto/shardq/example.pb.h"
#include "src/parse/example_parser.h"

namespace shardq {
namespace {

const std::vector<std::vector<FixedLenFeature>>& Specs() {
  static const auto* specs = new std::vector<std::vector<FixedLenFeature>>{
      {{"a", {2}, DType::kFloat32}, {"b", {}, DType::kInt64},
       {"c", {1}, DType::kBytes}},
      {{"a", {3}, DType::kInt64}},
      {{"c", {2, 1}, DType::kBytes}, {"b", {2}, DType::kFloat32}},
      {{"a", {0}, DType::kFloat32}, {"b", {0}, DType::kBytes}},
      {{"b", {1, 2}, DType::kInt64}, {"a", {}, DType::kBytes}},
  };
  return *specs;
}

int64_t ValuesPerRecord(const FixedLenFeature& f) {
  int64_t n = 1;
  for (int64_t d : f.shape) n *= d;
  return n;
}

// protobuf logs invalid UTF-8 in map keys; the fuzzer expects such input.
void IgnoreLog(google::protobuf::LogLevel, const char*, int,
               const std::string&) {}

// True when `record` is exactly what protobuf writes for *out: parsed, its
// unknown fields dropped (a field of the wrong wire type is one; the parser
// rejects those as malformed, protobuf keeps them aside), and re-serialised
// deterministically to the same bytes.
bool ParseCanonical(absl::string_view record, example::Example* out) {
  if (!out->ParseFromArray(record.data(), static_cast<int>(record.size()))) {
    return false;
  }
  out->DiscardUnknownFields();
  std::string again;
  {
    google::protobuf::io::StringOutputStream stream(&again);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!out->SerializeToCodedStream(&coded)) return false;
  }
  return again == record;
}

// What the parser must make of one canonical record for one feature:
// empty when it must accept it (values appended to *floats/ints/strings).
std::string Expect(const example::Example& e, const FixedLenFeature& f,
                   std::vector<char>* numbers,
                   std::vector<std::string>* strings) {
  const auto& map = e.features().feature();
  auto it = map.find(f.name);
  if (it == map.end()) return "missing";
  const example::Feature& feature = it->second;
  const int64_t want = ValuesPerRecord(f);
  switch (feature.kind_case()) {
    case example::Feature::kBytesList:
      if (f.dtype != DType::kBytes) return "type";
      if (feature.bytes_list().value_size() != want) return "count";
      for (const std::string& v : feature.bytes_list().value()) {
        strings->push_back(v);
      }
      return "";
    case example::Feature::kFloatList:
      if (f.dtype != DType::kFloat32) return "type";
      if (feature.float_list().value_size() != want) return "count";
      for (float v : feature.float_list().value()) {
        const char* p = reinterpret_cast<const char*>(&v);
        numbers->insert(numbers->end(), p, p + sizeof(v));
      }
      return "";
    case example::Feature::kInt64List:
      if (f.dtype != DType::kInt64) return "type";
      if (feature.int64_list().value_size() != want) return "count";
      for (int64_t v : feature.int64_list().value()) {
        const char* p = reinterpret_cast<const char*>(&v);
        numbers->insert(numbers->end(), p, p + sizeof(v));
      }
      return "";
    case example::Feature::KIND_NOT_SET:
      if (f.dtype != DType::kFloat32) return "type";
      return want == 0 ? "" : "count";
  }
  return "unreachable";
}

void Check(const std::vector<FixedLenFeature>& spec,
           const std::vector<absl::string_view>& records) {
  absl::StatusOr<ExampleParser> parser = ExampleParser::Create(spec);
  FUZZ_CHECK(parser.ok(), parser.status().ToString());
  absl::StatusOr<std::vector<ParsedFeature>> parsed = parser->Parse(records);
  const int64_t batch = static_cast<int64_t>(records.size());
  if (parsed.ok()) {
    FUZZ_CHECK(parsed->size() == spec.size(), "one output per feature");
    for (size_t i = 0; i < spec.size(); ++i) {
      const ParsedFeature& p = (*parsed)[i];
      const int64_t n = batch * ValuesPerRecord(spec[i]);
      FUZZ_CHECK(p.name == spec[i].name && p.dtype == spec[i].dtype &&
                     p.shape.size() == spec[i].shape.size() + 1 &&
                     p.shape[0] == batch,
                 "output " + p.name + " has the wrong name, type or shape");
      if (spec[i].dtype == DType::kBytes) {
        FUZZ_CHECK(static_cast<int64_t>(p.strings.size()) == n,
                   absl::StrCat(p.name, ": ", p.strings.size(),
                                " strings, expected ", n));
      } else {
        const int64_t width = spec[i].dtype == DType::kFloat32 ? 4 : 8;
        FUZZ_CHECK(p.data != nullptr &&
                       static_cast<int64_t>(p.data->size()) == n * width,
                   p.name + ": data buffer of the wrong size");
      }
    }
  } else {
    FUZZ_CHECK(absl::IsInvalidArgument(parsed.status()) ||
                   absl::IsDataLoss(parsed.status()),
               parsed.status().ToString());
  }

  // The differential check, on canonical input only.
  std::vector<std::vector<char>> numbers(spec.size());
  std::vector<std::vector<std::string>> strings(spec.size());
  int64_t first_bad = -1;
  for (int64_t r = 0; r < batch; ++r) {
    example::Example e;
    if (!ParseCanonical(records[static_cast<size_t>(r)], &e)) return;
    if (first_bad >= 0) continue;  // later records must still be canonical
    for (size_t i = 0; i < spec.size(); ++i) {
      if (!Expect(e, spec[i], &numbers[i], &strings[i]).empty()) {
        first_bad = r;
        break;
      }
    }
  }
  if (first_bad >= 0) {
    FUZZ_CHECK(absl::IsInvalidArgument(parsed.status()),
               absl::StrCat("record ", first_bad,
                            " does not match the spec, but Parse returned ",
                            parsed.status().ToString()));
    FUZZ_CHECK(absl::StartsWith(parsed.status().message(),
                                absl::StrCat("record ", first_bad, ":")),
               "the error names the wrong record: " +
                   parsed.status().ToString());
    return;
  }
  FUZZ_CHECK(parsed.ok(), "canonical records matching the spec failed: " +
                              parsed.status().ToString());
  for (size_t i = 0; i < spec.size(); ++i) {
    const ParsedFeature& p = (*parsed)[i];
    if (spec[i].dtype == DType::kBytes) {
      FUZZ_CHECK(p.strings == strings[i], p.name + ": strings differ");
    } else {
      FUZZ_CHECK(*p.data == numbers[i], p.name + ": values differ");
    }
  }
}

}  // namespace
}  // namespace shardq

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    google::protobuf::SetLogHandler(&shardq::IgnoreLog);
    return true;
  }();
  (void)quiet;
  if (size == 0) return 0;
  const auto& specs = shardq::Specs();
  const auto& spec = specs[data[0] % specs.size()];
  std::vector<absl::string_view> records;
  size_t p = 1;
  while (p < size && records.size() < 64) {
    size_t length = data[p];
    if (p + 1 < size) length |= static_cast<size_t>(data[p + 1]) << 8;
    p += 2;
    length = std::min(length, size > p ? size - p : 0);
    records.emplace_back(reinterpret_cast<const char*>(data) + std::min(p, size),
                         length);
    p += length;
  }
  shardq::Check(spec, records);
  return 0;
}
