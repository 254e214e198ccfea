#include "shardq/slice.h"

#include "gtest/gtest.h"

namespace shardq {
namespace {

TEST(ParseItem, PlainPathIsAWholeWork) {
  absl::StatusOr<SliceSpec> spec = ParseItem("data/part-1.txt");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->work, "data/part-1.txt");
  EXPECT_TRUE(spec->whole());
}

TEST(ParseItem, RangeIsParsed) {
  absl::StatusOr<SliceSpec> spec = ParseItem("d/p.tfrecord?start=1048576&end=2097152");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->work, "d/p.tfrecord");
  EXPECT_EQ(*spec->start, 1048576);
  EXPECT_EQ(*spec->end, 2097152);
}

TEST(ParseItem, TableParamsAreKept) {
  absl::StatusOr<SliceSpec> spec =
      ParseItem("sqlite:data/train.db?table=clicks&start=100000&end=200000");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->work, "sqlite:data/train.db");
  EXPECT_EQ(spec->params.at("table"), "clicks");
  EXPECT_EQ(FormatItem(*spec), "sqlite:data/train.db?table=clicks&start=100000&end=200000");
}

TEST(ParseItem, QuestionMarkWithoutParamsIsPartOfTheName) {
  absl::StatusOr<SliceSpec> spec = ParseItem("weird?name");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->work, "weird?name");
}

TEST(ParseItem, BadRangeNamesTheField) {
  absl::StatusOr<SliceSpec> spec = ParseItem("f?start=x&end=3");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("start='x'"), std::string::npos);
  spec = ParseItem("f?start=5&end=3");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("after end=3"), std::string::npos);
}

}  // namespace
}  // namespace shardq
