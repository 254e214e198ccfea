#include "src/io/s3/s3_url.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

TEST(S3Url, ParsesBucketAndKey) {
  absl::StatusOr<S3Url> url = ParseS3Url("s3://my-bucket/dir/part-0.tfrecord");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->bucket, "my-bucket");
  EXPECT_EQ(url->key, "dir/part-0.tfrecord");
  EXPECT_EQ(url->ToString(), "s3://my-bucket/dir/part-0.tfrecord");
}

TEST(S3Url, KeyKeepsEverythingAfterTheBucket) {
  absl::StatusOr<S3Url> url = ParseS3Url("s3://bkt/a//b c/+x");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->key, "a//b c/+x");
}

TEST(S3Url, RefusesOtherSchemesAndBadBuckets) {
  EXPECT_THAT(ParseS3Url("/data/x").status().message(),
              HasSubstr("not an s3://bucket/key URL"));
  EXPECT_THAT(ParseS3Url("s3://Upper/x").status().message(),
              HasSubstr("'Upper' is not a bucket name"));
  EXPECT_THAT(ParseS3Url("s3://ab/x").status().message(),
              HasSubstr("not a bucket name"));
  EXPECT_EQ(ParseS3Url("s3:///x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(S3Url, BucketWithoutKeyIsRefusedUnlessAllowed) {
  EXPECT_THAT(ParseS3Url("s3://bkt/").status().message(),
              HasSubstr("names a bucket, not an object"));
  EXPECT_THAT(ParseS3Url("s3://bkt").status().message(),
              HasSubstr("names a bucket, not an object"));
  absl::StatusOr<S3Url> url = ParseS3Url("s3://bkt", /*allow_empty_key=*/true);
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->key, "");
}

TEST(S3Url, IsS3PathLooksAtTheScheme) {
  EXPECT_TRUE(IsS3Path("s3://b/k"));
  EXPECT_FALSE(IsS3Path("data/s3://b/k"));
  EXPECT_FALSE(IsS3Path("sqlite:x.db"));
}

TEST(UriEncode, KeepsUnreservedAndEncodesTheRestInUpperHex) {
  EXPECT_EQ(UriEncode("aZ09-_.~", false), "aZ09-_.~");
  EXPECT_EQ(UriEncode("a b/c+d=e&f", false), "a%20b%2Fc%2Bd%3De%26f");
  EXPECT_EQ(UriEncode("a b/c", true), "a%20b/c");
  EXPECT_EQ(UriEncode("\xc3\xa9", true), "%C3%A9");
}

TEST(KeyPattern, PrefixStopsAtTheFirstWildcard) {
  EXPECT_TRUE(IsKeyPattern("train/*.tfrecord"));
  EXPECT_FALSE(IsKeyPattern("train/part-0.tfrecord"));
  EXPECT_EQ(PatternListPrefix("train/part-*.tfrecord"), "train/part-");
  EXPECT_EQ(PatternListPrefix("t?/x"), "t");
  EXPECT_EQ(PatternListPrefix("*"), "");
}

TEST(KeyPattern, StarDoesNotCrossSlashes) {
  EXPECT_TRUE(KeyMatches("train/*.tfrecord", "train/a.tfrecord"));
  EXPECT_FALSE(KeyMatches("train/*.tfrecord", "train/sub/a.tfrecord"));
  EXPECT_FALSE(KeyMatches("train/*.tfrecord", "train/a.tfrecord.gz"));
  EXPECT_TRUE(KeyMatches("train/part-[0-1]", "train/part-1"));
  EXPECT_FALSE(KeyMatches("train/part-[0-1]", "train/part-2"));
}

}  // namespace
}  // namespace shardq
