// Parses batches of serialised tf.Example records into one contiguous
// buffer per feature (shape [batch, ...]), ready to hand to numpy/PyTorch
// without copies. Reads the protobuf wire format directly: no message
// objects, no per-record allocation beyond the output buffers.
#ifndef SHARDQ_PARSE_EXAMPLE_PARSER_H_
#define SHARDQ_PARSE_EXAMPLE_PARSER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardq {

// kUInt8 reads a bytes_list feature as raw bytes (like tf.io.decode_raw
// with out_type=uint8): its values, concatenated, must be exactly
// prod(shape) bytes per record (one value of that length in the usual case,
// e.g. an image stored as its pixels).
enum class DType { kFloat32, kInt64, kBytes, kUInt8 };

// Bytes per value in ParsedFeature::data: 4, 8, 0 (kBytes: strings), 1.
int64_t DTypeSize(DType dtype);

// A fixed-length feature: every record holds exactly prod(shape) values
// (bytes, for kUInt8). With var_len, a variable-length feature (tf's
// VarLenFeature): any number of values per record, none when the record
// lacks it; `shape` must be empty and there is no default.
struct FixedLenFeature {
  std::string name;
  std::vector<int64_t> shape;  // per record; {} is a scalar
  DType dtype = DType::kFloat32;
  bool var_len = false;
  // With has_default, a record that lacks the feature gets these values
  // instead of an error: prod(shape) values as they are stored in
  // ParsedFeature::data (float32 / int64 in native byte order, raw bytes for
  // kUInt8), or prod(shape) strings in default_strings for kBytes.
  bool has_default = false;
  std::vector<char> default_data = {};
  std::vector<std::string> default_strings = {};
};

// One parsed feature of a batch. For kFloat32/kInt64/kUInt8, `data` holds
// batch * prod(shape) values contiguously; for kBytes, `strings` holds them.
// A var_len feature holds every record's values one after the other
// (shape {total values}) and `row_lengths` says how many each record has
// (batch entries, summing to the total).
struct ParsedFeature {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // {batch, shape...}; var_len: {total values}
  std::shared_ptr<std::vector<char>> data;  // shared so Python can own it
  std::vector<std::string> strings;
  bool var_len = false;
  std::vector<int64_t> row_lengths;  // var_len only
  // Set instead of `data` when the batch was parsed into the caller's
  // memory (ExampleParser::Parse with `placed`): where this feature's values
  // are. `keep`, null from Parse, is for the caller: whatever keeps that
  // memory alive while the feature is in use.
  char* placed = nullptr;
  std::shared_ptr<void> keep;

  // The values of a float32/int64/uint8 feature, wherever they are.
  const char* values() const { return placed != nullptr ? placed : data->data(); }
};

// Thread-compatible (Parse is const).
class ExampleParser {
 public:
  // INVALID_ARGUMENT for no features, duplicate names, negative dims, a
  // shape of more than 2 GiB per record (more than a tf.Example carries), a
  // default of the wrong size (naming the feature and both counts), or a
  // var_len feature with a shape or a default.
  static absl::StatusOr<ExampleParser> Create(std::vector<FixedLenFeature> features);

  // Parses every record. INVALID_ARGUMENT naming the record index and the
  // feature when a feature is missing (and has no default), has the wrong type or the wrong
  // number of values (for kUInt8: of bytes, with the expected and the
  // actual count); DATA_LOSS when a record is not a valid Example;
  // RESOURCE_EXHAUSTED, naming the feature, when one fixed-length feature
  // of the batch would take more than kMaxBatchFeatureBytes (checked before
  // allocating) or its buffer cannot be allocated.
  static constexpr int64_t kMaxBatchFeatureBytes = int64_t{64} << 30;
  absl::StatusOr<std::vector<ParsedFeature>> Parse(
      const std::vector<absl::string_view>& records) const {
    return Parse(records, nullptr);
  }

  // Parse, with the fixed-length float32/int64/uint8 features written at
  // `placed` (when not null) instead of into buffers of their own: one after
  // the other in the order of features(), each starting at a multiple of
  // kPlacedAlign bytes from `placed`, PlacedBytes(records.size()) bytes in
  // all (`placed` itself should be kPlacedAlign-aligned). Their
  // ParsedFeature::placed points there and `data` is null; the other
  // features are as from Parse. On an error the placed bytes are undefined.
  static constexpr int64_t kPlacedAlign = 64;
  absl::StatusOr<std::vector<ParsedFeature>> Parse(
      const std::vector<absl::string_view>& records, char* placed) const;

  // The bytes Parse(records, placed) writes at `placed` for `rows` records:
  // 0 when no feature is placed, -1 when a batch that large would be
  // refused (RESOURCE_EXHAUSTED) anyway.
  int64_t PlacedBytes(int64_t rows) const;

  const std::vector<FixedLenFeature>& features() const { return features_; }

 private:
  explicit ExampleParser(std::vector<FixedLenFeature> features);
  std::vector<FixedLenFeature> features_;
  std::vector<int64_t> values_per_record_;
};

}  // namespace shardq

#endif  // SHARDQ_PARSE_EXAMPLE_PARSER_H_
