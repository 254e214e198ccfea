// A client of S3-compatible object storage over libcurl: HEAD, ranged GET
// and ListObjectsV2, signed with AWS Signature V4 (CURLOPT_AWS_SIGV4).
// Connections are reused: each request borrows a curl handle from a small
// pool, and a handle keeps its connections open between requests (HTTP
// keep-alive). Failed attempts are retried as RetryPolicy says (5xx,
// timeouts, broken connections; never 4xx); a transfer that moves fewer
// than 1 KiB per second for S3Config::stall_timeout is a timeout, not
// counting the time a sink (below) made it wait. Every error names the s3:// URL and, for an
// HTTP answer, its status: 403 PERMISSION_DENIED naming the bucket, 404
// NOT_FOUND, 412 (the object changed) FAILED_PRECONDITION, other 4xx
// INVALID_ARGUMENT, 5xx and transport failures left after the retries
// UNAVAILABLE. Thread-safe.
#ifndef SHARDQ_IO_S3_S3_CLIENT_H_
#define SHARDQ_IO_S3_S3_CLIENT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "src/io/s3/s3_config.h"
#include "src/io/s3/s3_url.h"
#include "src/io/s3/s3_xml.h"

namespace shardq {
namespace s3_internal {
struct Request;  // one HTTP request and its answer (s3_client.cc)
}  // namespace s3_internal

// Where a ranged GET puts the object's bytes as they arrive off the
// connection: in order, each byte once (a retry asks only for the bytes
// not yet delivered). Called on the thread that called GetRange.
class S3RangeSink {
 public:
  virtual ~S3RangeSink() = default;
  // An answer's headers arrived: the object's size and ETag. Called once
  // per attempt that got a 2xx answer, before that attempt's bytes.
  virtual void OnAnswer(const S3ObjectInfo& info) {}
  // Takes up to n of the next bytes and returns how many it took; fewer
  // than n ends the transfer early (the connection is closed), and
  // GetRange returns the bytes taken. May block (the time blocked is not a
  // stall).
  virtual size_t Write(const char* data, size_t n) = 0;
  // True once the bytes are no longer wanted: a failed attempt is then not
  // retried (GetRange returns CANCELLED).
  virtual bool Abandoned() const { return false; }
};

class S3Client {
 public:
  // Never fails for a well-formed config (curl is initialised once per
  // process).
  explicit S3Client(S3Config config);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  // The client of the process environment (S3ConfigFromProcessEnv), shared:
  // the same one while the environment says the same. INVALID_ARGUMENT
  // from the configuration.
  static absl::StatusOr<std::shared_ptr<S3Client>> Default();

  const S3Config& config() const { return config_; }

  // Size and ETag of an object (info.key is url.key).
  absl::StatusOr<S3ObjectInfo> Head(const S3Url& url);

  // Opens an object for reading in one request: a ranged GET of its first
  // `n` bytes (into *head, fewer when the object is shorter), whose answer
  // also gives the size and ETag that a HEAD would. Errors as Head.
  absl::StatusOr<S3ObjectInfo> OpenRead(const S3Url& url, size_t n,
                                        std::string* head);

  // Reads [offset, offset + n) of the object into dst: n bytes, fewer only
  // where the object ends. With a non-empty `etag` the object must still
  // have it (If-Match): FAILED_PRECONDITION when it was replaced. A retry
  // after a broken connection asks only for the bytes not yet received.
  // `cancel` (may be null) becomes true to abandon the read: CANCELLED.
  absl::StatusOr<size_t> GetRange(const S3Url& url, int64_t offset, size_t n,
                                  const std::string& etag, char* dst,
                                  const std::atomic<bool>* cancel = nullptr);

  // GetRange that hands the bytes to `sink` as they arrive (no buffer of
  // the range's size) and returns how many it took. With an empty `etag`
  // the first answer's ETag pins the retries, so one call never mixes two
  // versions of the object. The range starting at or after the end of the
  // object returns 0 without a call to sink.OnAnswer.
  absl::StatusOr<size_t> GetRange(const S3Url& url, int64_t offset, size_t n,
                                  const std::string& etag, S3RangeSink& sink,
                                  const std::atomic<bool>* cancel = nullptr);

  // Every object whose key starts with `prefix`, sorted by key (all pages
  // of ListObjectsV2). NOT_FOUND / PERMISSION_DENIED name the bucket.
  absl::StatusOr<std::vector<S3ObjectInfo>> List(const std::string& bucket,
                                                 const std::string& prefix);

  // Attempts repeated so far by this client (all requests).
  int64_t retries() const { return retries_.load(); }

 private:
  using Request = s3_internal::Request;
  struct Attempt;
  // Runs `request` with retries; fills its answer.
  absl::Status Run(Request& request);
  Attempt Perform(Request& request);
  void* Borrow();
  void Return(void* handle);

  const S3Config config_;
  absl::Mutex mu_;
  std::vector<void*> idle_handles_ ABSL_GUARDED_BY(mu_);  // CURL*
  std::atomic<int64_t> retries_{0};
};

}  // namespace shardq

#endif  // SHARDQ_IO_S3_S3_CLIENT_H_
