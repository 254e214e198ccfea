#include "src/parse/example_parser.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardq {
namespace {

constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "float32";
    case DType::kInt64: return "int64";
    case DType::kBytes: return "bytes";
    case DType::kUInt8: return "uint8";
  }
  return "?";
}

// The list type a feature of dtype `t` is stored as in the Example.
DType StoredAs(DType t) { return t == DType::kUInt8 ? DType::kBytes : t; }

// A cursor over protobuf wire bytes. Every method returns false on
// malformed input instead of reading past the end.
class Wire {
 public:
  explicit Wire(absl::string_view bytes)
      : p_(reinterpret_cast<const uint8_t*>(bytes.data())), end_(p_ + bytes.size()) {}
  bool done() const { return p_ >= end_; }

  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && p_ < end_; shift += 7) {
      const uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return true;
      }
    }
    return false;
  }
  bool Tag(uint32_t* field, int* wire_type) {
    uint64_t tag;
    if (!Varint(&tag) || (tag >> 3) == 0) return false;
    *field = static_cast<uint32_t>(tag >> 3);
    *wire_type = static_cast<int>(tag & 7);
    return true;
  }
  bool Bytes(absl::string_view* out) {
    uint64_t n;
    if (!Varint(&n) || n > static_cast<uint64_t>(end_ - p_)) return false;
    *out = absl::string_view(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return true;
  }
  bool Fixed32(uint32_t* out) {
    if (end_ - p_ < 4) return false;
    std::memcpy(out, p_, 4);
    p_ += 4;
    return true;
  }
  bool Skip(int wire_type) {
    uint64_t ignored;
    absl::string_view bytes;
    switch (wire_type) {
      case kVarint: return Varint(&ignored);
      case kFixed64:
        if (end_ - p_ < 8) return false;
        p_ += 8;
        return true;
      case kLengthDelimited: return Bytes(&bytes);
      case kFixed32:
        if (end_ - p_ < 4) return false;
        p_ += 4;
        return true;
      default: return false;
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Where one record's values of one feature go.
struct Sink {
  const FixedLenFeature* spec;
  int64_t capacity;          // values per record
  char* out;                 // numeric: start of this record's values
  std::vector<std::string>* strings;  // bytes: the batch's strings
  size_t strings_start;      // bytes: index of this record's first value
  std::vector<char>* grow = nullptr;  // var_len numeric: the batch's values
  size_t grow_start = 0;              // var_len: where this record's begin
  int64_t count = 0;
  bool seen = false;
  DType found = DType::kFloat32;
};

// Appends one value; false when the record has more than capacity.
template <typename T>
bool Put(Sink& s, T v) {
  if (s.grow != nullptr) {
    const size_t at = s.grow->size();
    s.grow->resize(at + sizeof(T));
    std::memcpy(s.grow->data() + at, &v, sizeof(T));
    ++s.count;
    return true;
  }
  if (s.count >= s.capacity) {
    ++s.count;  // keep counting for the error message
    return true;
  }
  std::memcpy(s.out + s.count * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
  ++s.count;
  return true;
}

bool ParseFeature(absl::string_view bytes, Sink& sink) {
  Wire w(bytes);
  sink.count = 0;
  sink.seen = true;
  if (sink.strings != nullptr) sink.strings->resize(sink.strings_start);
  if (sink.grow != nullptr) sink.grow->resize(sink.grow_start);
  while (!w.done()) {
    uint32_t field;
    int wt;
    absl::string_view list;
    if (!w.Tag(&field, &wt)) return false;
    if (field < 1 || field > 3 || wt != kLengthDelimited) {
      if (!w.Skip(wt)) return false;
      continue;
    }
    if (!w.Bytes(&list)) return false;
    sink.found = field == 1 ? DType::kBytes : field == 2 ? DType::kFloat32 : DType::kInt64;
    if (sink.found != StoredAs(sink.spec->dtype)) continue;  // reported after the record
    const bool raw_bytes = sink.spec->dtype == DType::kUInt8;
    Wire l(list);
    while (!l.done()) {
      uint32_t f;
      int lwt;
      if (!l.Tag(&f, &lwt)) return false;
      if (f != 1) {
        if (!l.Skip(lwt)) return false;
        continue;
      }
      if (field == 1 && raw_bytes) {  // bytes read as uint8 values
        absl::string_view v;
        if (lwt != kLengthDelimited || !l.Bytes(&v)) return false;
        const int64_t n = static_cast<int64_t>(v.size());
        if (sink.grow != nullptr) {
          sink.grow->insert(sink.grow->end(), v.begin(), v.end());
        } else if (n > 0 && sink.count + n <= sink.capacity) {
          std::memcpy(sink.out + sink.count, v.data(), v.size());
        }
        sink.count += n;  // past capacity: only counted, for the error message
      } else if (field == 1) {  // bytes
        absl::string_view v;
        if (lwt != kLengthDelimited || !l.Bytes(&v)) return false;
        sink.strings->emplace_back(v);
        ++sink.count;
      } else if (field == 2) {  // float: packed or not
        if (lwt == kLengthDelimited) {
          absl::string_view packed;
          if (!l.Bytes(&packed) || packed.size() % 4 != 0) return false;
          const int64_t n = static_cast<int64_t>(packed.size() / 4);
          // Stored as they lie on the wire (little-endian, as Put's copy
          // assumes too), in one copy: the common case is a whole record's
          // values in one packed list.
          if (sink.grow != nullptr) {
            sink.grow->insert(sink.grow->end(), packed.begin(), packed.end());
            sink.count += n;
            continue;
          }
          if (sink.count + n <= sink.capacity) {
            if (n > 0) std::memcpy(sink.out + sink.count * 4, packed.data(), packed.size());
            sink.count += n;
            continue;
          }
          for (size_t i = 0; i < packed.size(); i += 4) {
            float v;
            std::memcpy(&v, packed.data() + i, 4);
            Put(sink, v);
          }
        } else {
          uint32_t raw;
          if (lwt != kFixed32 || !l.Fixed32(&raw)) return false;
          float v;
          std::memcpy(&v, &raw, 4);
          Put(sink, v);
        }
      } else {  // int64: packed or not
        if (lwt == kLengthDelimited) {
          absl::string_view packed;
          if (!l.Bytes(&packed)) return false;
          Wire pw(packed);
          while (!pw.done()) {
            uint64_t v;
            if (!pw.Varint(&v)) return false;
            Put(sink, static_cast<int64_t>(v));
          }
        } else {
          uint64_t v;
          if (lwt != kVarint || !l.Varint(&v)) return false;
          Put(sink, static_cast<int64_t>(v));
        }
      }
    }
  }
  return true;
}

}  // namespace

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kInt64: return 8;
    case DType::kBytes: return 0;
    case DType::kUInt8: return 1;
  }
  return 0;
}

ExampleParser::ExampleParser(std::vector<FixedLenFeature> features)
    : features_(std::move(features)) {
  for (const FixedLenFeature& f : features_) {
    int64_t n = 1;
    for (int64_t d : f.shape) n *= d;
    values_per_record_.push_back(n);
  }
}

absl::StatusOr<ExampleParser> ExampleParser::Create(std::vector<FixedLenFeature> features) {
  if (features.empty()) return absl::InvalidArgumentError("parse_example needs at least one feature");
  std::set<std::string> names;
  for (const FixedLenFeature& f : features) {
    if (f.name.empty()) return absl::InvalidArgumentError("a feature has an empty name");
    if (!names.insert(f.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("feature '", f.name, "' is given twice"));
    }
    int64_t values = 1;
    // A record's feature of more bytes than a tf.Example can carry (a
    // protobuf message is under 2 GiB; a bytes value takes a byte at least)
    // could never be filled; refused before any batch is allocated.
    const int64_t width = std::max<int64_t>(1, DTypeSize(f.dtype));
    constexpr int64_t kMaxRecordBytes = int64_t{2} << 30;
    for (int64_t d : f.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("feature '", f.name, "' has a negative dimension ", d));
      }
      if (d > 0 && values > kMaxRecordBytes / width / d) {
        return absl::InvalidArgumentError(absl::StrCat(
            "feature '", f.name, "': shape [", absl::StrJoin(f.shape, ", "),
            "] holds more than ", kMaxRecordBytes, " bytes per record, more than a "
            "tf.Example can carry"));
      }
      values *= d;
    }
    if (f.var_len && (!f.shape.empty() || f.has_default)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feature '", f.name, "': a variable-length feature has no shape and no default"));
    }
    if (!f.has_default) continue;
    const int64_t given = f.dtype == DType::kBytes
                              ? static_cast<int64_t>(f.default_strings.size())
                              : static_cast<int64_t>(f.default_data.size()) / DTypeSize(f.dtype);
    const bool whole = f.dtype == DType::kBytes ||
                       static_cast<int64_t>(f.default_data.size()) % DTypeSize(f.dtype) == 0;
    if (!whole || given != values) {
      return absl::InvalidArgumentError(absl::StrCat(
          "feature '", f.name, "': its default has ", given, " values, its shape [",
          absl::StrJoin(f.shape, ", "), "] holds ", values));
    }
  }
  return ExampleParser(std::move(features));
}

namespace {

// A fixed-length feature of a fixed-width type: the ones Parse can place.
bool Placeable(const FixedLenFeature& f) { return !f.var_len && f.dtype != DType::kBytes; }

int64_t AlignedUp(int64_t bytes) {
  const int64_t a = ExampleParser::kPlacedAlign;
  return (bytes + a - 1) / a * a;
}

}  // namespace

int64_t ExampleParser::PlacedBytes(int64_t rows) const {
  int64_t total = 0;
  for (size_t i = 0; i < features_.size(); ++i) {
    if (!Placeable(features_[i])) continue;
    const int64_t width = DTypeSize(features_[i].dtype);
    if (rows < 0 || (rows > 0 && values_per_record_[i] > kMaxBatchFeatureBytes / width / rows)) {
      return -1;
    }
    total += AlignedUp(rows * values_per_record_[i] * width);  // < features * 64 GiB
  }
  return total;
}

absl::StatusOr<std::vector<ParsedFeature>> ExampleParser::Parse(
    const std::vector<absl::string_view>& records, char* placed) const {
  const int64_t batch = static_cast<int64_t>(records.size());
  std::vector<ParsedFeature> out(features_.size());
  for (size_t i = 0; i < features_.size(); ++i) {
    // A bytes value is a std::string of its own.
    const int64_t width = features_[i].dtype == DType::kBytes
                              ? static_cast<int64_t>(sizeof(std::string))
                              : std::max<int64_t>(1, DTypeSize(features_[i].dtype));
    if (!features_[i].var_len && batch > 0 &&
        values_per_record_[i] > kMaxBatchFeatureBytes / width / batch) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "feature '", features_[i].name, "': a batch of ", batch, " records of shape [",
          absl::StrJoin(features_[i].shape, ", "), "] would take more than ",
          kMaxBatchFeatureBytes, " bytes: parse smaller batches"));
    }
  }
  int64_t placed_at = 0;  // bytes of `placed` given to features so far
  for (size_t i = 0; i < features_.size(); ++i) {
    ParsedFeature& p = out[i];
    p.name = features_[i].name;
    p.dtype = features_[i].dtype;
    p.shape.push_back(batch);
    p.shape.insert(p.shape.end(), features_[i].shape.begin(), features_[i].shape.end());
    p.var_len = features_[i].var_len;
    if (p.var_len) {
      p.row_lengths.reserve(static_cast<size_t>(batch));
      if (p.dtype != DType::kBytes) p.data = std::make_shared<std::vector<char>>();
    } else if (placed != nullptr && Placeable(features_[i])) {
      p.placed = placed + placed_at;
      placed_at += AlignedUp(batch * values_per_record_[i] * DTypeSize(p.dtype));
    } else {
      const bool strings = p.dtype == DType::kBytes;
      const int64_t values = batch * values_per_record_[i];
      try {
        if (strings) {
          p.strings.reserve(static_cast<size_t>(values));
        } else {
          p.data = std::make_shared<std::vector<char>>(
              static_cast<size_t>(values * DTypeSize(p.dtype)));
        }
      } catch (const std::bad_alloc&) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "feature '", p.name, "': cannot allocate ", values, " values for a batch of ",
            batch, " records: parse smaller batches"));
      }
    }
  }
  std::vector<Sink> sinks(features_.size());
  for (int64_t r = 0; r < batch; ++r) {
    for (size_t i = 0; i < features_.size(); ++i) {
      const int64_t width = DTypeSize(features_[i].dtype);
      const bool var_len = features_[i].var_len;
      sinks[i] = Sink{&features_[i], values_per_record_[i],
                      out[i].placed != nullptr
                          ? out[i].placed + r * values_per_record_[i] * width
                      : out[i].data && !var_len
                          ? out[i].data->data() + r * values_per_record_[i] * width
                          : nullptr,
                      out[i].dtype == DType::kBytes ? &out[i].strings : nullptr,
                      out[i].strings.size()};
      if (var_len && out[i].data) {
        sinks[i].grow = out[i].data.get();
        sinks[i].grow_start = out[i].data->size();
      }
    }
    Wire example(records[static_cast<size_t>(r)]);
    bool ok = true;
    while (ok && !example.done()) {
      uint32_t field;
      int wt;
      absl::string_view features;
      if (!example.Tag(&field, &wt)) { ok = false; break; }
      if (field != 1 || wt != kLengthDelimited) { ok = example.Skip(wt); continue; }
      if (!example.Bytes(&features)) { ok = false; break; }
      Wire fw(features);
      while (ok && !fw.done()) {
        absl::string_view entry;
        if (!fw.Tag(&field, &wt)) { ok = false; break; }
        if (field != 1 || wt != kLengthDelimited) { ok = fw.Skip(wt); continue; }
        if (!fw.Bytes(&entry)) { ok = false; break; }
        Wire ew(entry);
        absl::string_view key, value;
        bool has_value = false;
        while (ok && !ew.done()) {
          if (!ew.Tag(&field, &wt)) { ok = false; break; }
          if (field == 1 && wt == kLengthDelimited) {
            ok = ew.Bytes(&key);
          } else if (field == 2 && wt == kLengthDelimited) {
            ok = ew.Bytes(&value);
            has_value = true;
          } else {
            ok = ew.Skip(wt);
          }
        }
        if (!ok || !has_value) continue;
        for (size_t i = 0; i < features_.size(); ++i) {
          if (features_[i].name == key) {
            ok = ParseFeature(value, sinks[i]);
            break;
          }
        }
      }
    }
    if (!ok) {
      return absl::DataLossError(absl::StrCat("record ", r, " of the batch is not a valid tf.Example"));
    }
    for (size_t i = 0; i < features_.size(); ++i) {
      const Sink& s = sinks[i];
      if (features_[i].var_len) {
        if (s.seen && s.found != StoredAs(features_[i].dtype)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "record ", r, ": feature '", features_[i].name, "' holds ", DTypeName(s.found),
              " values, expected ", DTypeName(StoredAs(features_[i].dtype)),
              features_[i].dtype == DType::kUInt8 ? " (read as uint8)" : ""));
        }
        out[i].row_lengths.push_back(s.seen ? s.count : 0);
        continue;
      }
      if (!s.seen && features_[i].has_default) {
        if (features_[i].dtype == DType::kBytes) {
          out[i].strings.insert(out[i].strings.end(), features_[i].default_strings.begin(),
                                features_[i].default_strings.end());
        } else if (!features_[i].default_data.empty()) {
          std::memcpy(s.out, features_[i].default_data.data(), features_[i].default_data.size());
        }
        continue;
      }
      if (!s.seen) {
        return absl::InvalidArgumentError(
            absl::StrCat("record ", r, ": feature '", features_[i].name, "' is missing"));
      }
      if (s.found != StoredAs(features_[i].dtype)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "record ", r, ": feature '", features_[i].name, "' holds ", DTypeName(s.found),
            " values, expected ", DTypeName(StoredAs(features_[i].dtype)),
            features_[i].dtype == DType::kUInt8 ? " (read as uint8)" : ""));
      }
      if (features_[i].dtype == DType::kUInt8 && s.count != values_per_record_[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "record ", r, ": feature '", features_[i].name, "' has ", s.count,
            " bytes, expected ", values_per_record_[i], " (uint8 of shape [",
            absl::StrJoin(features_[i].shape, ", "), "])"));
      }
      if (s.count != values_per_record_[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "record ", r, ": feature '", features_[i].name, "' has ", s.count,
            " values, expected ", values_per_record_[i]));
      }
    }
  }
  for (ParsedFeature& p : out) {
    if (!p.var_len) continue;
    int64_t total = 0;
    for (int64_t n : p.row_lengths) total += n;
    p.shape = {total};
  }
  return out;
}

}  // namespace shardq
