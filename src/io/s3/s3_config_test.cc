#include "src/io/s3/s3_config.h"

#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

using ::testing::HasSubstr;

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(S3Config, ReadsTheStandardAwsVariables) {
  absl::StatusOr<S3Config> config = S3ConfigFromEnv(Env({
      {"AWS_ACCESS_KEY_ID", "AK"},
      {"AWS_SECRET_ACCESS_KEY", "SK"},
      {"AWS_SESSION_TOKEN", "TOKEN"},
      {"AWS_REGION", "eu-west-1"},
      {"AWS_DEFAULT_REGION", "ignored-1"},
      {"AWS_ENDPOINT_URL", "http://127.0.0.1:9000/"},
  }));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->access_key, "AK");
  EXPECT_EQ(config->secret_key, "SK");
  EXPECT_EQ(config->session_token, "TOKEN");
  EXPECT_EQ(config->region, "eu-west-1");
  EXPECT_EQ(config->endpoint, "http://127.0.0.1:9000");  // trailing '/' dropped
  EXPECT_FALSE(config->anonymous());
}

TEST(S3Config, DefaultsWithAnEmptyEnvironment) {
  absl::StatusOr<S3Config> config = S3ConfigFromEnv(Env({}));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->region, "us-east-1");
  EXPECT_EQ(config->endpoint, "");
  EXPECT_TRUE(config->anonymous());
  EXPECT_EQ(config->retry.max_attempts, 6);
  EXPECT_EQ(config->park_after, absl::Seconds(5));
  EXPECT_TRUE(config->open_ahead);
}

TEST(S3Config, OpenAheadIsTurnedOffByZeroOnly) {
  absl::StatusOr<S3Config> off = S3ConfigFromEnv(Env({{"SHARDQ_S3_OPEN_AHEAD", "0"}}));
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->open_ahead);
  absl::StatusOr<S3Config> on = S3ConfigFromEnv(Env({{"SHARDQ_S3_OPEN_AHEAD", "1"}}));
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->open_ahead);
  EXPECT_FALSE(*off == *on);
  EXPECT_THAT(S3ConfigFromEnv(Env({{"SHARDQ_S3_OPEN_AHEAD", "yes"}})).status().message(),
              HasSubstr("SHARDQ_S3_OPEN_AHEAD='yes' must be 1 or 0"));
}

TEST(S3Config, ServiceSpecificEndpointWinsAndRegionFallsBack) {
  absl::StatusOr<S3Config> config = S3ConfigFromEnv(Env({
      {"AWS_ENDPOINT_URL", "http://generic:1"},
      {"AWS_ENDPOINT_URL_S3", "https://s3-only:2"},
      {"AWS_DEFAULT_REGION", "ap-south-1"},
  }));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->endpoint, "https://s3-only:2");
  EXPECT_EQ(config->region, "ap-south-1");
}

TEST(S3Config, RefusesMalformedValuesNamingTheVariable) {
  EXPECT_THAT(S3ConfigFromEnv(Env({{"AWS_ENDPOINT_URL", "127.0.0.1:9000"}}))
                  .status().message(),
              HasSubstr("AWS_ENDPOINT_URL='127.0.0.1:9000' must start with http://"));
  EXPECT_THAT(S3ConfigFromEnv(Env({{"SHARDQ_S3_MAX_ATTEMPTS", "0"}}))
                  .status().message(),
              HasSubstr("SHARDQ_S3_MAX_ATTEMPTS='0' is not a positive integer"));
  EXPECT_THAT(S3ConfigFromEnv(Env({{"SHARDQ_S3_PARK_AFTER_MS", "-1"}}))
                  .status().message(),
              HasSubstr("SHARDQ_S3_PARK_AFTER_MS='-1' is not a positive integer"));
  EXPECT_THAT(S3ConfigFromEnv(Env({{"SHARDQ_S3_PARK_AFTER_MS", "5s"}}))
                  .status().message(),
              HasSubstr("SHARDQ_S3_PARK_AFTER_MS='5s' is not a positive integer"));
  EXPECT_THAT(S3ConfigFromEnv(Env({{"AWS_ACCESS_KEY_ID", "AK"}})).status().message(),
              HasSubstr("AWS_SECRET_ACCESS_KEY is not"));
}

TEST(S3Config, EnvironmentOverridesAttemptsChunkSizeAndParkTime) {
  absl::StatusOr<S3Config> config = S3ConfigFromEnv(Env({
      {"SHARDQ_S3_MAX_ATTEMPTS", "3"}, {"SHARDQ_S3_CHUNK_BYTES", "65536"},
      {"SHARDQ_S3_PARK_AFTER_MS", "300"}}));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->retry.max_attempts, 3);
  EXPECT_EQ(config->chunk_bytes, 65536);
  EXPECT_EQ(config->park_after, absl::Milliseconds(300));
  // The shared client follows the environment: another park time is
  // another configuration.
  absl::StatusOr<S3Config> other = S3ConfigFromEnv(Env({
      {"SHARDQ_S3_MAX_ATTEMPTS", "3"}, {"SHARDQ_S3_CHUNK_BYTES", "65536"},
      {"SHARDQ_S3_PARK_AFTER_MS", "301"}}));
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(*config == *other);
}

TEST(S3Request, EndpointOverrideIsAddressedPathStyle) {
  S3Config config;
  config.endpoint = "http://127.0.0.1:9000";
  EXPECT_EQ(ObjectRequestUrl(config, "bkt", "dir/a b+c.txt"),
            "http://127.0.0.1:9000/bkt/dir/a%20b%2Bc.txt");
}

TEST(S3Request, AwsIsAddressedVirtualHostStyle) {
  S3Config config;
  config.region = "eu-central-1";
  EXPECT_EQ(ObjectRequestUrl(config, "bkt", "k"),
            "https://bkt.s3.eu-central-1.amazonaws.com/k");
}

TEST(S3Request, ListQueryIsInCanonicalOrderAndEncoded) {
  S3Config config;
  config.endpoint = "http://h:1";
  EXPECT_EQ(ListRequestUrl(config, "bkt", "dir/x y", ""),
            "http://h:1/bkt/?list-type=2&prefix=dir%2Fx%20y");
  EXPECT_EQ(ListRequestUrl(config, "bkt", "p", "a/b=="),
            "http://h:1/bkt/?continuation-token=a%2Fb%3D%3D&list-type=2&prefix=p");
}

TEST(S3Request, SigV4ParameterNamesRegionAndService) {
  S3Config config;
  config.region = "us-west-2";
  EXPECT_EQ(SigV4Parameter(config), "aws:amz:us-west-2:s3");
}

TEST(RetryPolicy, RetriesServerErrorsAndBrokenConnectionsOnly) {
  EXPECT_TRUE(ShouldRetry(TransportOutcome::kCompleted, 500));
  EXPECT_TRUE(ShouldRetry(TransportOutcome::kCompleted, 503));
  EXPECT_TRUE(ShouldRetry(TransportOutcome::kTimeout, 0));
  EXPECT_TRUE(ShouldRetry(TransportOutcome::kConnection, 0));
  EXPECT_TRUE(ShouldRetry(TransportOutcome::kConnection, 206));  // reset mid-body
  EXPECT_FALSE(ShouldRetry(TransportOutcome::kFatal, 0));
  for (int status : {400, 401, 403, 404, 412, 416, 429}) {
    EXPECT_FALSE(ShouldRetry(TransportOutcome::kCompleted, status)) << status;
  }
  EXPECT_FALSE(ShouldRetry(TransportOutcome::kCompleted, 200));
}

TEST(RetryPolicy, BackoffDoublesUpToTheCapWithJitter) {
  RetryPolicy policy;
  policy.initial_backoff = absl::Milliseconds(100);
  policy.max_backoff = absl::Milliseconds(1000);
  EXPECT_EQ(BackoffBefore(1, policy, 1.0), absl::Milliseconds(100));
  EXPECT_EQ(BackoffBefore(2, policy, 1.0), absl::Milliseconds(200));
  EXPECT_EQ(BackoffBefore(4, policy, 1.0), absl::Milliseconds(800));
  EXPECT_EQ(BackoffBefore(5, policy, 1.0), absl::Milliseconds(1000));
  EXPECT_EQ(BackoffBefore(60, policy, 1.0), absl::Milliseconds(1000));
  EXPECT_EQ(BackoffBefore(1, policy, 0.0), absl::Milliseconds(50));
  EXPECT_EQ(BackoffBefore(2, policy, 7.0), absl::Milliseconds(200));  // clamped
}

}  // namespace
}  // namespace shardq
