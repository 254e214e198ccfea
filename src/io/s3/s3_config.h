// Where and how shardq talks to S3-compatible storage: credentials, region
// and endpoint from the standard AWS environment, the URLs of requests, and
// the retry policy. Pure (the environment is passed in), thread-safe.
#ifndef SHARDQ_IO_S3_S3_CONFIG_H_
#define SHARDQ_IO_S3_S3_CONFIG_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace shardq {

// Retries of one request: on 5xx answers, timeouts and broken connections,
// never on 4xx (a wrong key or a missing object does not heal).
struct RetryPolicy {
  int max_attempts = 6;  // the first try included
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(5);
};

// How one attempt ended, as far as the retry policy cares.
enum class TransportOutcome {
  kCompleted,   // an HTTP answer arrived (its status decides)
  kTimeout,     // connect or transfer timed out, or stalled
  kConnection,  // refused, reset, closed early, a short body
  kFatal,       // a local error that a retry cannot fix (bad URL, TLS setup)
};

// True when an attempt that ended so is worth repeating: timeouts, broken
// connections, and completed answers with a 5xx status.
bool ShouldRetry(TransportOutcome outcome, int http_status);

// The pause before retry number `retry` (1 = the first retry): doubling from
// initial_backoff, capped at max_backoff, times a jitter factor in
// [0.5, 1.0] given by `jitter` in [0, 1].
absl::Duration BackoffBefore(int retry, const RetryPolicy& policy,
                             double jitter);

struct S3Config {
  std::string access_key;     // AWS_ACCESS_KEY_ID
  std::string secret_key;     // AWS_SECRET_ACCESS_KEY
  std::string session_token;  // AWS_SESSION_TOKEN (sent as x-amz-security-token)
  std::string region = "us-east-1";  // AWS_REGION, else AWS_DEFAULT_REGION
  // AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL ("http://127.0.0.1:9000"):
  // a MinIO/Ceph-style server, addressed path-style (endpoint/bucket/key).
  // Empty: AWS itself, virtual-hosted (https://bucket.s3.REGION.amazonaws.com/key).
  std::string endpoint;
  RetryPolicy retry;  // SHARDQ_S3_MAX_ATTEMPTS overrides max_attempts
  // Bytes one ranged GET of a sequential read asks for, at most
  // (SHARDQ_S3_CHUNK_BYTES): a slice up to this long (plus its 256 KiB
  // look-ahead) is one streaming request. Fewer requests cost the server
  // less; a replaced object is noticed at the next request. An open object
  // buffers min(chunk_bytes, 4 MiB) ahead of its reader.
  int64_t chunk_bytes = 64 << 20;
  // A streaming GET whose reader takes nothing from its full buffer for
  // this long is ended, and a new one started when the reader goes on
  // (SHARDQ_S3_PARK_AFTER_MS; S3StreamOptions::park_after says the
  // trade-off).
  absl::Duration park_after = absl::Seconds(5);
  // Whether a reader's next item starts on its way while the one before
  // is read (S3FileSystem::WillOpen; SHARDQ_S3_OPEN_AHEAD, 1 or 0): one
  // more open object's buffer and connection per reader, no wait for the
  // server's first byte between items.
  bool open_ahead = true;
  // A transfer slower than 1 KiB/s for this long is a timeout (retried).
  absl::Duration stall_timeout = absl::Seconds(30);
  absl::Duration connect_timeout = absl::Seconds(10);

  bool anonymous() const { return access_key.empty(); }
  bool operator==(const S3Config& o) const;
};

// Reads the configuration through `getenv` (returns nullopt for an unset
// variable). INVALID_ARGUMENT naming the variable for a malformed value
// (an endpoint without http:// or https://, a non-positive number).
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;
absl::StatusOr<S3Config> S3ConfigFromEnv(const EnvLookup& getenv);
// The process environment.
absl::StatusOr<S3Config> S3ConfigFromProcessEnv();

// The URL of an object ("http://127.0.0.1:9000/bucket/a%20b/c" path-style;
// "https://bucket.s3.us-east-1.amazonaws.com/a%20b/c" on AWS).
std::string ObjectRequestUrl(const S3Config& config, absl::string_view bucket,
                             absl::string_view key);

// The ListObjectsV2 URL of a bucket: keys under `prefix`, after
// `continuation_token` when not empty. The query is written in SigV4's
// canonical form (parameters sorted, values URI-encoded), so it is signed
// as sent.
std::string ListRequestUrl(const S3Config& config, absl::string_view bucket,
                           absl::string_view prefix,
                           absl::string_view continuation_token);

// CURLOPT_AWS_SIGV4's parameter: "aws:amz:REGION:s3".
std::string SigV4Parameter(const S3Config& config);

}  // namespace shardq

#endif  // SHARDQ_IO_S3_S3_CONFIG_H_
