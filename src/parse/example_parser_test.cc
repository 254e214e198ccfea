#include "src/parse/example_parser.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/shardq/example.pb.h"

namespace shardq {
namespace {

std::string MakeExample(int i, int floats = 4) {
  example::Example e;
  auto& f = *e.mutable_features()->mutable_feature();
  for (int k = 0; k < floats; ++k) f["x"].mutable_float_list()->add_value(i + 0.5f * k);
  f["y"].mutable_int64_list()->add_value(-i);
  f["name"].mutable_bytes_list()->add_value("rec" + std::to_string(i));
  f["ignored"].mutable_int64_list()->add_value(7);
  return e.SerializeAsString();
}

std::vector<FixedLenFeature> Spec() {
  return {{"x", {2, 2}, DType::kFloat32}, {"y", {}, DType::kInt64}, {"name", {1}, DType::kBytes}};
}

TEST(ExampleParser, ParsesABatchIntoContiguousBuffers) {
  std::vector<std::string> records = {MakeExample(1), MakeExample(2), MakeExample(3)};
  std::vector<absl::string_view> views(records.begin(), records.end());
  auto parser = ExampleParser::Create(Spec());
  ASSERT_TRUE(parser.ok());
  auto parsed = parser->Parse(views);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ParsedFeature& x = (*parsed)[0];
  EXPECT_EQ(x.shape, (std::vector<int64_t>{3, 2, 2}));
  const float* xs = reinterpret_cast<const float*>(x.data->data());
  EXPECT_FLOAT_EQ(xs[0], 1.0f);
  EXPECT_FLOAT_EQ(xs[3], 2.5f);
  EXPECT_FLOAT_EQ(xs[4], 2.0f);
  EXPECT_FLOAT_EQ(xs[11], 4.5f);
  const int64_t* ys = reinterpret_cast<const int64_t*>((*parsed)[1].data->data());
  EXPECT_EQ(ys[0], -1);
  EXPECT_EQ(ys[2], -3);
  EXPECT_EQ((*parsed)[1].shape, (std::vector<int64_t>{3}));
  EXPECT_EQ((*parsed)[2].strings, (std::vector<std::string>{"rec1", "rec2", "rec3"}));
}

// Field `field` with wire type 2 holding `bytes` (lengths < 128).
std::string Nested(int field, const std::string& bytes) {
  return std::string(1, static_cast<char>(field << 3 | 2)) +
         std::string(1, static_cast<char>(bytes.size())) + bytes;
}

TEST(ExampleParser, UnpackedValuesAreAcceptedToo) {
  // Writers other than protobuf's may emit repeated scalars unpacked:
  // int64 5 and 6 as two varint fields, float 1.5 as one fixed32 field.
  const std::string ints = Nested(3, std::string("\x08\x05\x08\x06", 4));
  float f = 1.5f;
  char raw[4];
  std::memcpy(raw, &f, 4);
  const std::string floats = Nested(2, std::string("\x0d", 1) + std::string(raw, 4));
  const std::string record =
      Nested(1, Nested(1, Nested(1, "y") + Nested(2, ints)) +
                    Nested(1, Nested(1, "x") + Nested(2, floats)));
  auto parser = ExampleParser::Create({{"y", {2}, DType::kInt64}, {"x", {}, DType::kFloat32}});
  auto parsed = parser->Parse({record});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const int64_t* y = reinterpret_cast<const int64_t*>((*parsed)[0].data->data());
  EXPECT_EQ(y[0], 5);
  EXPECT_EQ(y[1], 6);
  EXPECT_FLOAT_EQ(reinterpret_cast<const float*>((*parsed)[1].data->data())[0], 1.5f);
}

TEST(ExampleParser, ErrorsNameTheRecordAndTheFeature) {
  auto parser = ExampleParser::Create(Spec());
  std::string good = MakeExample(1);
  std::string short_x = MakeExample(2, 3);
  auto parsed = parser->Parse({good, short_x});
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find("record 1: feature 'x' has 3 values, expected 4"),
            std::string::npos) << parsed.status();

  auto wrong_type = ExampleParser::Create({{"y", {}, DType::kFloat32}});
  parsed = wrong_type->Parse({good});
  EXPECT_NE(parsed.status().message().find("holds int64 values, expected float32"),
            std::string::npos) << parsed.status();

  auto missing = ExampleParser::Create({{"absent", {}, DType::kInt64}});
  parsed = missing->Parse({good});
  EXPECT_NE(parsed.status().message().find("'absent' is missing"), std::string::npos);

  std::string garbage = "\x0a\xff\xff\xff\xff\x0f";
  parsed = parser->Parse({garbage});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
}

// A length-delimited field as it lies on the wire.
std::string Len(int field, const std::string& bytes) {
  std::string out(1, static_cast<char>(field << 3 | 2));
  for (size_t n = bytes.size(); ; n >>= 7) {
    out.push_back(static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0)));
    if (n < 0x80) break;
  }
  return out + bytes;
}

// A FloatList of `values`, packed.
std::string PackedFloats(const std::vector<float>& values) {
  std::string packed(values.size() * 4, '\0');
  if (!values.empty()) std::memcpy(&packed[0], values.data(), packed.size());
  return Len(1, packed);
}

// An Example with one feature "x" whose Feature holds one float_list per
// element of `lists` (a writer that merged several: values concatenate).
std::string SplitFloatsExample(const std::vector<std::vector<float>>& lists) {
  std::string feature;
  for (const std::vector<float>& l : lists) feature += Len(2, PackedFloats(l));
  return Len(1, Len(1, Len(1, "x") + Len(2, feature)));
}

TEST(ExampleParser, PackedFloatsAcrossListsAndTooManyValues) {
  auto parser = ExampleParser::Create({{"x", {4}, DType::kFloat32}});
  ASSERT_TRUE(parser.ok());
  // One record's values in two packed lists, and in one with none before it.
  const std::string split = SplitFloatsExample({{1, 2}, {3, 4}});
  const std::string empty_first = SplitFloatsExample({{}, {5, 6, 7, 8}});
  auto parsed = parser->Parse({split, empty_first});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const float* xs = reinterpret_cast<const float*>((*parsed)[0].data->data());
  EXPECT_EQ(std::vector<float>(xs, xs + 8), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));

  // More values than the shape holds, in one list or over two: refused
  // with the whole count, nothing written past the record's values.
  const std::vector<std::pair<std::string, std::string>> too_many = {
      {SplitFloatsExample({{1, 2, 3, 4, 5}}), "5"},
      {SplitFloatsExample({{1, 2, 3}, {4, 5, 6}}), "6"}};
  for (const auto& [bad, count] : too_many) {
    parsed = parser->Parse({split, bad});
    ASSERT_FALSE(parsed.ok());
    EXPECT_NE(parsed.status().message().find("record 1: feature 'x' has " + count +
                                             " values, expected 4"),
              std::string::npos)
        << parsed.status();
  }

  // A variable-length feature takes every list's values.
  auto var = ExampleParser::Create({{"x", {}, DType::kFloat32, /*var_len=*/true}});
  ASSERT_TRUE(var.ok());
  parsed = var->Parse({split, SplitFloatsExample({{9}, {}, {10, 11}})});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ParsedFeature& v = (*parsed)[0];
  EXPECT_EQ(v.row_lengths, (std::vector<int64_t>{4, 3}));
  const float* vs = reinterpret_cast<const float*>(v.data->data());
  EXPECT_EQ(std::vector<float>(vs, vs + 7), (std::vector<float>{1, 2, 3, 4, 9, 10, 11}));
}

std::string ImageExample(const std::string& pixels, int label) {
  example::Example e;
  auto& f = *e.mutable_features()->mutable_feature();
  f["image"].mutable_bytes_list()->add_value(pixels);
  f["label"].mutable_int64_list()->add_value(label);
  return e.SerializeAsString();
}

TEST(ExampleParser, Uint8ReadsABytesFeatureAsRawBytes) {
  std::string a(2 * 3 * 2, '\0'), b(12, '\0');
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<char>(i);
    b[i] = static_cast<char>(250 - i);  // values above 127 stay unsigned
  }
  std::vector<std::string> records = {ImageExample(a, 1), ImageExample(b, 2)};
  std::vector<absl::string_view> views(records.begin(), records.end());
  auto parser = ExampleParser::Create(
      {{"image", {2, 3, 2}, DType::kUInt8}, {"label", {}, DType::kInt64}});
  ASSERT_TRUE(parser.ok());
  auto parsed = parser->Parse(views);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ParsedFeature& image = (*parsed)[0];
  EXPECT_EQ(image.dtype, DType::kUInt8);
  EXPECT_EQ(image.shape, (std::vector<int64_t>{2, 2, 3, 2}));
  ASSERT_EQ(image.data->size(), 24u);
  const uint8_t* px = reinterpret_cast<const uint8_t*>(image.data->data());
  EXPECT_EQ(px[0], 0);
  EXPECT_EQ(px[11], 11);
  EXPECT_EQ(px[12], 250);
  EXPECT_EQ(px[23], 239);
  EXPECT_EQ(reinterpret_cast<const int64_t*>((*parsed)[1].data->data())[1], 2);
}

TEST(ExampleParser, Uint8ConcatenatesSeveralValues) {
  example::Example e;
  auto& list = *(*e.mutable_features()->mutable_feature())["image"].mutable_bytes_list();
  list.add_value("ab");
  list.add_value("");
  list.add_value("cd");
  const std::string record = e.SerializeAsString();
  auto parser = ExampleParser::Create({{"image", {4}, DType::kUInt8}});
  auto parsed = parser->Parse({record});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(std::string((*parsed)[0].data->data(), 4), "abcd");
}

TEST(ExampleParser, Uint8LengthMismatchNamesTheFeatureAndBothCounts) {
  auto parser = ExampleParser::Create({{"image", {3, 2, 2}, DType::kUInt8}});
  for (size_t size : {11u, 13u, 0u, 1000u}) {
    const std::string record = ImageExample(std::string(size, 'x'), 0);
    auto parsed = parser->Parse({ImageExample(std::string(12, 'x'), 0), record});
    ASSERT_FALSE(parsed.ok()) << size;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(
                  absl::StrCat("record 1: feature 'image' has ", size,
                               " bytes, expected 12 (uint8 of shape [3, 2, 2])")),
              std::string::npos) << parsed.status();
  }
  auto wrong_type = ExampleParser::Create({{"label", {}, DType::kUInt8}});
  auto parsed = wrong_type->Parse({ImageExample("x", 0)});
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(parsed.status().message().find(
                "feature 'label' holds int64 values, expected bytes (read as uint8)"),
            std::string::npos) << parsed.status();
}

TEST(ExampleParser, RandomBytesNeverCrash) {
  auto parser = ExampleParser::Create(Spec());
  std::string record = MakeExample(9);
  for (size_t cut = 0; cut < record.size(); ++cut) {
    std::string truncated = record.substr(0, cut);
    parser->Parse({truncated}).status().IgnoreError();
    std::string flipped = record;
    flipped[cut] = static_cast<char>(flipped[cut] ^ 0x5a);
    parser->Parse({flipped}).status().IgnoreError();
  }
}

TEST(ExampleParser, BadSpecsAreRejected) {
  EXPECT_FALSE(ExampleParser::Create({}).ok());
  EXPECT_FALSE(ExampleParser::Create({{"a", {}, DType::kInt64}, {"a", {}, DType::kInt64}}).ok());
  EXPECT_FALSE(ExampleParser::Create({{"a", {-1}, DType::kInt64}}).ok());
}

TEST(ExampleParser, HugeShapesAreRefusedNotAllocated) {
  // More per record than a tf.Example can carry (and 10^10 x 10^10 would
  // overflow the count): refused at Create, naming the feature.
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{int64_t{1} << 40}, std::vector<int64_t>{10'000'000'000, 10'000'000'000},
        std::vector<int64_t>{int64_t{1} << 30}}) {
    absl::StatusOr<ExampleParser> p = ExampleParser::Create({{"x", shape, DType::kFloat32}});
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
    EXPECT_NE(p.status().message().find("feature 'x'"), absl::string_view::npos) << p.status();
  }
  // 1 GiB a record is allowed; a batch of 100 of them is 100 GiB: refused
  // before anything is allocated.
  absl::StatusOr<ExampleParser> p =
      ExampleParser::Create({{"x", {int64_t{1} << 28}, DType::kFloat32}});
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<std::string> records(100);
  std::vector<absl::string_view> views(records.begin(), records.end());
  absl::StatusOr<std::vector<ParsedFeature>> parsed = p->Parse(views);
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kResourceExhausted) << parsed.status();
  EXPECT_NE(parsed.status().message().find("feature 'x'"), absl::string_view::npos);
}

TEST(ExampleParser, PlacedFeaturesAreWrittenAtTheCallersMemoryInOrder) {
  // x (float32 2x2) then y (int64); the bytes and var-len features keep
  // buffers of their own. Each placed feature starts on a kPlacedAlign boundary.
  FixedLenFeature ids{"ids", {}, DType::kInt64};
  ids.var_len = true;
  std::vector<FixedLenFeature> spec = Spec();
  spec.push_back(ids);
  auto parser = ExampleParser::Create(spec);
  ASSERT_TRUE(parser.ok()) << parser.status();
  std::vector<std::string> records = {MakeExample(1), MakeExample(2), MakeExample(3)};
  std::vector<absl::string_view> views(records.begin(), records.end());
  // x: 3 rows * 4 floats = 48 bytes -> 64; y: 3 * 8 = 24 -> 64.
  ASSERT_EQ(parser->PlacedBytes(3), 128);
  EXPECT_EQ(parser->PlacedBytes(0), 0);
  alignas(64) char area[128 + 16];
  std::memset(area, 0x5a, sizeof(area));
  auto placed = parser->Parse(views, area);
  auto own = parser->Parse(views);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_TRUE(own.ok()) << own.status();
  const ParsedFeature& x = (*placed)[0];
  const ParsedFeature& y = (*placed)[1];
  EXPECT_EQ(x.placed, area);
  EXPECT_EQ(y.placed, area + 64);
  EXPECT_EQ(x.data, nullptr);
  EXPECT_EQ(x.values(), area);
  EXPECT_EQ(x.shape, (*own)[0].shape);
  EXPECT_EQ(std::memcmp(x.values(), (*own)[0].values(), 48), 0);
  EXPECT_EQ(std::memcmp(y.values(), (*own)[1].values(), 24), 0);
  EXPECT_EQ(static_cast<unsigned char>(area[128]), 0x5a);  // nothing written past the end
  EXPECT_EQ((*placed)[2].placed, nullptr);
  EXPECT_EQ((*placed)[2].strings, (std::vector<std::string>{"rec1", "rec2", "rec3"}));
  EXPECT_EQ((*placed)[3].placed, nullptr);  // var-len: its own buffer
  ASSERT_NE((*placed)[3].data, nullptr);
  EXPECT_EQ((*placed)[3].row_lengths, (*own)[3].row_lengths);
  // A batch the parser would refuse anyway is -1, not an overflowed size.
  auto huge = ExampleParser::Create({{"x", {int64_t{1} << 28}, DType::kFloat32}});
  ASSERT_TRUE(huge.ok());
  EXPECT_EQ(huge->PlacedBytes(100), -1);
}

}  // namespace
}  // namespace shardq

namespace shardq {
namespace {

// Issue 19: FixedLen defaults fill a record that lacks the feature.
TEST(ExampleParser, DefaultsFillMissingFeaturesAndMustMatchTheShape) {
  example::Example e;
  (*e.mutable_features()->mutable_feature())["y"].mutable_int64_list()->add_value(5);
  const std::string only_y = e.SerializeAsString();
  const std::string full = MakeExample(2);
  std::vector<absl::string_view> views = {full, only_y};

  FixedLenFeature x{"x", {2, 2}, DType::kFloat32};
  x.has_default = true;
  const float fill[4] = {-1, -2, -3, -4};
  x.default_data.assign(reinterpret_cast<const char*>(fill),
                        reinterpret_cast<const char*>(fill) + sizeof(fill));
  FixedLenFeature name{"name", {1}, DType::kBytes};
  name.has_default = true;
  name.default_strings = {"none"};
  auto parser = ExampleParser::Create({x, {"y", {}, DType::kInt64}, name});
  ASSERT_TRUE(parser.ok()) << parser.status();
  auto parsed = parser->Parse(views);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const float* xs = reinterpret_cast<const float*>((*parsed)[0].data->data());
  EXPECT_FLOAT_EQ(xs[0], 2.0f);  // record 0 has its own x
  EXPECT_FLOAT_EQ(xs[4], -1.0f);
  EXPECT_FLOAT_EQ(xs[7], -4.0f);
  EXPECT_EQ((*parsed)[2].strings, (std::vector<std::string>{"rec2", "none"}));

  // Without a default the missing feature is still an error naming it.
  auto strict = ExampleParser::Create(Spec());
  ASSERT_TRUE(strict.ok());
  absl::Status s = strict->Parse(views).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("record 1: feature 'x' is missing"), std::string::npos) << s;

  x.default_data.resize(3 * sizeof(float));
  s = ExampleParser::Create({x}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("feature 'x': its default has 3 values, its shape [2, 2] holds 4"),
            std::string::npos)
      << s;
}

// VarLen: every row's values one after the other, with row lengths; a
// record lacking the feature is an empty row, not an error.
TEST(ExampleParser, VarLenFeaturesGiveValuesAndRowLengths) {
  std::vector<std::string> records;
  for (int i = 0; i < 3; ++i) {
    example::Example e;
    auto& f = *e.mutable_features()->mutable_feature();
    if (i != 1) {  // record 1 lacks both features
      for (int k = 0; k <= i; ++k) f["ids"].mutable_int64_list()->add_value(10 * i + k);
      for (int k = 0; k < i; ++k) f["tags"].mutable_bytes_list()->add_value(absl::StrCat("t", k));
    }
    f["y"].mutable_int64_list()->add_value(i);
    records.push_back(e.SerializeAsString());
  }
  std::vector<absl::string_view> views(records.begin(), records.end());
  FixedLenFeature ids{"ids", {}, DType::kInt64};
  ids.var_len = true;
  FixedLenFeature tags{"tags", {}, DType::kBytes};
  tags.var_len = true;
  auto parser = ExampleParser::Create({ids, tags, {"y", {}, DType::kInt64}});
  ASSERT_TRUE(parser.ok()) << parser.status();
  auto parsed = parser->Parse(views);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const ParsedFeature& p = (*parsed)[0];
  EXPECT_TRUE(p.var_len);
  EXPECT_EQ(p.row_lengths, (std::vector<int64_t>{1, 0, 3}));
  EXPECT_EQ(p.shape, (std::vector<int64_t>{4}));
  const int64_t* v = reinterpret_cast<const int64_t*>(p.data->data());
  EXPECT_EQ(std::vector<int64_t>(v, v + 4), (std::vector<int64_t>{0, 20, 21, 22}));
  EXPECT_EQ((*parsed)[1].row_lengths, (std::vector<int64_t>{0, 0, 2}));
  EXPECT_EQ((*parsed)[1].strings, (std::vector<std::string>{"t0", "t1"}));
  EXPECT_FALSE((*parsed)[2].var_len);
}

TEST(ExampleParser, VarLenRefusesAShapeADefaultOrTheWrongType) {
  FixedLenFeature shaped{"ids", {2}, DType::kInt64};
  shaped.var_len = true;
  EXPECT_TRUE(absl::IsInvalidArgument(ExampleParser::Create({shaped}).status()));
  FixedLenFeature with_default{"ids", {}, DType::kInt64};
  with_default.var_len = true;
  with_default.has_default = true;
  with_default.default_data.resize(8);
  EXPECT_TRUE(absl::IsInvalidArgument(ExampleParser::Create({with_default}).status()));
  FixedLenFeature floats{"x", {}, DType::kFloat32};
  floats.var_len = true;
  auto parser = ExampleParser::Create({floats});
  ASSERT_TRUE(parser.ok());
  const std::string record = MakeExample(1);  // "y" is int64
  FixedLenFeature wrong{"y", {}, DType::kFloat32};
  wrong.var_len = true;
  auto wrong_parser = ExampleParser::Create({wrong});
  ASSERT_TRUE(wrong_parser.ok());
  auto parsed = wrong_parser->Parse({record});
  ASSERT_TRUE(absl::IsInvalidArgument(parsed.status())) << parsed.status();
  EXPECT_NE(std::string(parsed.status().message()).find("'y'"), std::string::npos);
  auto ok = parser->Parse({record});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)[0].row_lengths, (std::vector<int64_t>{4}));
}

}  // namespace
}  // namespace shardq
