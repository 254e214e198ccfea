#include "src/io/s3/s3_config.h"

#include <algorithm>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "src/io/s3/s3_url.h"

namespace shardq {
namespace {

absl::StatusOr<int64_t> PositiveNumber(const EnvLookup& getenv,
                                       const char* name, int64_t fallback) {
  std::optional<std::string> value = getenv(name);
  if (!value || value->empty()) return fallback;
  int64_t n = 0;
  if (!absl::SimpleAtoi(*value, &n) || n < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, "='", *value, "' is not a positive integer"));
  }
  return n;
}

std::string NonEmpty(const EnvLookup& getenv, const char* name) {
  std::optional<std::string> value = getenv(name);
  return value ? *value : std::string();
}

}  // namespace

bool ShouldRetry(TransportOutcome outcome, int http_status) {
  switch (outcome) {
    case TransportOutcome::kTimeout:
    case TransportOutcome::kConnection:
      return true;
    case TransportOutcome::kFatal:
      return false;
    case TransportOutcome::kCompleted:
      return http_status >= 500 && http_status <= 599;
  }
  return false;
}

absl::Duration BackoffBefore(int retry, const RetryPolicy& policy,
                             double jitter) {
  absl::Duration pause = policy.initial_backoff;
  for (int i = 1; i < retry && pause < policy.max_backoff; ++i) pause *= 2;
  pause = std::min(pause, policy.max_backoff);
  jitter = std::clamp(jitter, 0.0, 1.0);
  return pause * (0.5 + 0.5 * jitter);
}

bool S3Config::operator==(const S3Config& o) const {
  return access_key == o.access_key && secret_key == o.secret_key &&
         session_token == o.session_token && region == o.region &&
         endpoint == o.endpoint && retry.max_attempts == o.retry.max_attempts &&
         retry.initial_backoff == o.retry.initial_backoff &&
         retry.max_backoff == o.retry.max_backoff &&
         chunk_bytes == o.chunk_bytes && park_after == o.park_after &&
         open_ahead == o.open_ahead &&
         stall_timeout == o.stall_timeout &&
         connect_timeout == o.connect_timeout;
}

absl::StatusOr<S3Config> S3ConfigFromEnv(const EnvLookup& getenv) {
  S3Config config;
  config.access_key = NonEmpty(getenv, "AWS_ACCESS_KEY_ID");
  config.secret_key = NonEmpty(getenv, "AWS_SECRET_ACCESS_KEY");
  config.session_token = NonEmpty(getenv, "AWS_SESSION_TOKEN");
  if (!config.access_key.empty() && config.secret_key.empty()) {
    return absl::InvalidArgumentError(
        "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
  }
  for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
    std::string region = NonEmpty(getenv, name);
    if (!region.empty()) {
      config.region = region;
      break;
    }
  }
  for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"}) {
    std::string endpoint = NonEmpty(getenv, name);
    if (endpoint.empty()) continue;
    if (!absl::StartsWith(endpoint, "http://") &&
        !absl::StartsWith(endpoint, "https://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, "='", endpoint, "' must start with http:// or https://"));
    }
    while (absl::EndsWith(endpoint, "/")) endpoint.pop_back();
    config.endpoint = endpoint;
    break;
  }
  absl::StatusOr<int64_t> attempts = PositiveNumber(
      getenv, "SHARDQ_S3_MAX_ATTEMPTS", config.retry.max_attempts);
  if (!attempts.ok()) return attempts.status();
  config.retry.max_attempts = static_cast<int>(std::min<int64_t>(*attempts, 100));
  absl::StatusOr<int64_t> chunk =
      PositiveNumber(getenv, "SHARDQ_S3_CHUNK_BYTES", config.chunk_bytes);
  if (!chunk.ok()) return chunk.status();
  config.chunk_bytes = *chunk;
  absl::StatusOr<int64_t> park_ms =
      PositiveNumber(getenv, "SHARDQ_S3_PARK_AFTER_MS",
                     absl::ToInt64Milliseconds(config.park_after));
  if (!park_ms.ok()) return park_ms.status();
  config.park_after = absl::Milliseconds(*park_ms);
  if (std::optional<std::string> ahead = getenv("SHARDQ_S3_OPEN_AHEAD");
      ahead && !ahead->empty()) {
    if (*ahead != "0" && *ahead != "1") {
      return absl::InvalidArgumentError(
          absl::StrCat("SHARDQ_S3_OPEN_AHEAD='", *ahead, "' must be 1 or 0"));
    }
    config.open_ahead = *ahead == "1";
  }
  return config;
}

absl::StatusOr<S3Config> S3ConfigFromProcessEnv() {
  return S3ConfigFromEnv([](const char* name) -> std::optional<std::string> {
    const char* value = std::getenv(name);
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

std::string ObjectRequestUrl(const S3Config& config, absl::string_view bucket,
                             absl::string_view key) {
  if (!config.endpoint.empty()) {
    return absl::StrCat(config.endpoint, "/", bucket, "/",
                        UriEncode(key, /*keep_slash=*/true));
  }
  return absl::StrCat("https://", bucket, ".s3.", config.region,
                      ".amazonaws.com/", UriEncode(key, /*keep_slash=*/true));
}

std::string ListRequestUrl(const S3Config& config, absl::string_view bucket,
                           absl::string_view prefix,
                           absl::string_view continuation_token) {
  std::string base =
      config.endpoint.empty()
          ? absl::StrCat("https://", bucket, ".s3.", config.region,
                         ".amazonaws.com/")
          : absl::StrCat(config.endpoint, "/", bucket, "/");
  // Sorted by name: continuation-token < list-type < prefix.
  std::string query;
  if (!continuation_token.empty()) {
    absl::StrAppend(&query, "continuation-token=",
                    UriEncode(continuation_token, false), "&");
  }
  absl::StrAppend(&query, "list-type=2&prefix=", UriEncode(prefix, false));
  return absl::StrCat(base, "?", query);
}

std::string SigV4Parameter(const S3Config& config) {
  return absl::StrCat("aws:amz:", config.region, ":s3");
}

}  // namespace shardq
