#include "src/io/s3/s3_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "src/log/log.h"

namespace shardq {
namespace {

constexpr size_t kMaxErrorBody = 64 << 10;
constexpr size_t kMaxListBody = 64 << 20;
constexpr size_t kMaxIdleHandles = 64;
// A transfer moving fewer bytes than this per second of
// S3Config::stall_timeout has stalled.
constexpr int64_t kStallBytesPerSecond = 1024;
// A sink's Write that took longer than this was waiting for its reader:
// the stall watch starts again after it.
constexpr absl::Duration kSinkWaitExcused = absl::Milliseconds(50);

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

TransportOutcome OutcomeOf(CURLcode code) {
  switch (code) {
    case CURLE_OK:
      return TransportOutcome::kCompleted;
    case CURLE_OPERATION_TIMEDOUT:
      return TransportOutcome::kTimeout;
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return TransportOutcome::kConnection;
    default:
      return TransportOutcome::kFatal;
  }
}

double Jitter() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

}  // namespace

namespace s3_internal {
struct Request {
  const char* method = "GET";  // "GET" or "HEAD"
  std::string url;             // the HTTP request's URL
  std::string display;         // s3://bucket/key, for messages
  std::string bucket;
  std::string etag;  // If-Match, when not empty
  const std::atomic<bool>* cancel = nullptr;
  // A ranged GET hands [offset, offset + n) to sink; `got` bytes went there.
  bool ranged = false;
  int64_t offset = 0;
  size_t n = 0;
  S3RangeSink* sink = nullptr;
  size_t got = 0;
  // The sink took fewer bytes than it was given: the transfer ends early.
  bool stopped = false;
  // The stall watch of the attempt: bytes moved since watch_start (a
  // sample of about a second), and since when every sample was too slow.
  absl::Duration stall_timeout;
  absl::Time watch_start;
  int64_t watch_bytes = 0;
  absl::Time slow_since = absl::InfiniteFuture();
  bool stalled = false;
  // The answer of the last attempt.
  int status = 0;
  std::string body;  // a non-ranged answer, or an error's XML (bounded)
  std::string etag_header;
  int64_t content_length = -1;
  int64_t content_range_total = -1;  // the TOTAL of "Content-Range: bytes A-B/TOTAL"
  // Per attempt: bytes of a 200 answer to a range request to drop first.
  int64_t skip = 0;
  bool overflow = false;

  std::string What() const {
    std::string what = absl::StrCat(method, " ", display);
    if (ranged) {
      absl::StrAppend(&what, " bytes ", offset, "-",
                      offset + static_cast<int64_t>(n) - 1);
    }
    return what;
  }
};

}  // namespace s3_internal

struct S3Client::Attempt {
  TransportOutcome outcome = TransportOutcome::kFatal;
  std::string error;  // curl's message when not completed
  bool cancelled = false;
  bool stopped = false;  // by the sink: the request is done
};

namespace {

// A sink that fills a caller's buffer of the range's size.
class BufferSink final : public S3RangeSink {
 public:
  explicit BufferSink(char* dst) : dst_(dst) {}
  size_t Write(const char* data, size_t n) override {
    std::memcpy(dst_, data, n);
    dst_ += n;
    return n;
  }

 private:
  char* dst_;
};

// The object's size and ETag as a 2xx answer to a ranged GET gives them.
S3ObjectInfo AnswerInfo(const s3_internal::Request& request) {
  S3ObjectInfo info;
  info.etag = request.etag_header;
  info.size = request.status == 206 ? request.content_range_total
                                    : request.content_length;
  return info;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* request = static_cast<s3_internal::Request*>(user);
  const size_t bytes = size * count;
  request->watch_bytes += static_cast<int64_t>(bytes);
  absl::string_view line(data, bytes);
  line = absl::StripTrailingAsciiWhitespace(line);
  if (line.empty()) {  // the end of an answer's headers
    if (request->ranged && request->status >= 200 && request->status <= 299) {
      request->sink->OnAnswer(AnswerInfo(*request));
    }
    return bytes;
  }
  if (absl::StartsWith(line, "HTTP/")) {
    // A new answer (after a 100 Continue, or a retry): reset what it sets.
    const size_t space = line.find(' ');
    int status = 0;
    if (space != absl::string_view::npos &&
        absl::SimpleAtoi(line.substr(space + 1, 3), &status)) {
      request->status = status;
    }
    request->content_length = -1;
    request->content_range_total = -1;
    request->etag_header.clear();
    return bytes;
  }
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return bytes;
  const std::string name = absl::AsciiStrToLower(line.substr(0, colon));
  const absl::string_view value =
      absl::StripAsciiWhitespace(line.substr(colon + 1));
  if (name == "content-length") {
    int64_t length = -1;
    if (absl::SimpleAtoi(value, &length)) request->content_length = length;
  } else if (name == "etag") {
    request->etag_header = TrimETag(value);
  } else if (name == "content-range") {
    const size_t slash = value.rfind('/');
    int64_t total = -1;
    if (slash != absl::string_view::npos &&
        absl::SimpleAtoi(value.substr(slash + 1), &total)) {
      request->content_range_total = total;
    }
  }
  return bytes;
}

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* request = static_cast<s3_internal::Request*>(user);
  const size_t bytes = size * count;
  request->watch_bytes += static_cast<int64_t>(bytes);
  const bool success = request->status >= 200 && request->status <= 299;
  if (request->ranged && success) {
    size_t used = 0;
    if (request->status == 200 && request->skip > 0) {
      // A server that ignored the Range header: drop the bytes before it.
      used = static_cast<size_t>(std::min<int64_t>(request->skip, bytes));
      request->skip -= static_cast<int64_t>(used);
    }
    const size_t room = request->n - request->got;
    const size_t take = std::min(bytes - used, room);
    if (take > 0) {
      const absl::Time before = absl::Now();
      const size_t took = request->sink->Write(data + used, take);
      const absl::Time after = absl::Now();
      if (after - before > kSinkWaitExcused) {
        request->watch_start = after;
        request->watch_bytes = 0;
        request->slow_since = absl::InfiniteFuture();
      }
      request->got += took;
      if (took < take) {
        request->stopped = true;
        return 0;
      }
    }
    if (used + take < bytes && request->status == 206) {
      request->overflow = true;  // more than the range asked for
      return 0;
    }
    return bytes;  // a 200 answer's bytes after the range are dropped
  }
  const size_t limit = success ? kMaxListBody : kMaxErrorBody;
  if (request->body.size() + bytes > limit) {
    if (success) {
      request->overflow = true;
      return 0;
    }
    return bytes;  // an error's body is only a message: keep its start
  }
  request->body.append(data, bytes);
  return bytes;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* request = static_cast<s3_internal::Request*>(user);
  if (request->cancel != nullptr && request->cancel->load()) return 1;
  const absl::Time now = absl::Now();
  const absl::Duration sample = now - request->watch_start;
  if (sample < absl::Seconds(1)) return 0;
  const bool slow = static_cast<double>(request->watch_bytes) <
                    kStallBytesPerSecond * absl::ToDoubleSeconds(sample);
  if (!slow) {
    request->slow_since = absl::InfiniteFuture();
  } else if (request->slow_since == absl::InfiniteFuture()) {
    request->slow_since = request->watch_start;
  }
  request->watch_start = now;
  request->watch_bytes = 0;
  if (now - request->slow_since >= request->stall_timeout) {
    request->stalled = true;
    return 1;
  }
  return 0;
}

}  // namespace

S3Client::S3Client(S3Config config) : config_(std::move(config)) {
  InitCurlOnce();
}

S3Client::~S3Client() {
  absl::MutexLock lock(&mu_);
  for (void* handle : idle_handles_) curl_easy_cleanup(static_cast<CURL*>(handle));
}

absl::StatusOr<std::shared_ptr<S3Client>> S3Client::Default() {
  static absl::Mutex mu(absl::kConstInit);
  static std::shared_ptr<S3Client>* client = new std::shared_ptr<S3Client>();
  absl::StatusOr<S3Config> config = S3ConfigFromProcessEnv();
  if (!config.ok()) return config.status();
  absl::MutexLock lock(&mu);
  if (*client == nullptr || !((*client)->config() == *config)) {
    *client = std::make_shared<S3Client>(*std::move(config));
  }
  return *client;
}

void* S3Client::Borrow() {
  {
    absl::MutexLock lock(&mu_);
    if (!idle_handles_.empty()) {
      void* handle = idle_handles_.back();
      idle_handles_.pop_back();
      return handle;
    }
  }
  return curl_easy_init();
}

void S3Client::Return(void* handle) {
  {
    absl::MutexLock lock(&mu_);
    if (idle_handles_.size() < kMaxIdleHandles) {
      idle_handles_.push_back(handle);
      return;
    }
  }
  curl_easy_cleanup(static_cast<CURL*>(handle));
}

S3Client::Attempt S3Client::Perform(Request& request) {
  Attempt attempt;
  CURL* curl = static_cast<CURL*>(Borrow());
  if (curl == nullptr) {
    attempt.error = "curl_easy_init failed";
    return attempt;
  }
  // Keeps the handle's open connections (curl_easy_reset does not close them).
  curl_easy_reset(curl);
  request.status = 0;
  request.body.clear();
  request.overflow = false;
  request.stopped = false;
  request.stalled = false;
  request.stall_timeout = std::max(config_.stall_timeout, absl::Seconds(1));
  request.watch_start = absl::Now();
  request.watch_bytes = 0;
  request.slow_since = absl::InfiniteFuture();
  request.skip = request.offset + static_cast<int64_t>(request.got);
  struct curl_slist* headers = nullptr;
  if (request.ranged) {
    const int64_t first = request.offset + static_cast<int64_t>(request.got);
    const int64_t last = request.offset + static_cast<int64_t>(request.n) - 1;
    headers = curl_slist_append(
        headers, absl::StrCat("Range: bytes=", first, "-", last).c_str());
  }
  if (!request.etag.empty()) {
    headers = curl_slist_append(
        headers, absl::StrCat("If-Match: \"", request.etag, "\"").c_str());
  }
  if (!config_.session_token.empty()) {
    headers = curl_slist_append(
        headers,
        absl::StrCat("x-amz-security-token: ", config_.session_token).c_str());
  }
  char error[CURL_ERROR_SIZE] = {0};
  const std::string sigv4 = SigV4Parameter(config_);
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(absl::ToInt64Milliseconds(config_.connect_timeout)));
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, 512L << 10);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &request);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &request);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, OnProgress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &request);
  if (std::strcmp(request.method, "HEAD") == 0) {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  }
  if (!config_.anonymous()) {
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERNAME, config_.access_key.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, config_.secret_key.c_str());
  }
  if (headers != nullptr) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  Return(curl);
  if (code == CURLE_ABORTED_BY_CALLBACK && request.stalled) {
    attempt.outcome = TransportOutcome::kTimeout;
    attempt.error = absl::StrCat("stalled: fewer than ", kStallBytesPerSecond,
                                 " bytes per second for ",
                                 absl::FormatDuration(request.stall_timeout));
    return attempt;
  }
  if (code == CURLE_ABORTED_BY_CALLBACK) {
    attempt.cancelled = true;
    return attempt;
  }
  if (code == CURLE_WRITE_ERROR && request.stopped) {
    attempt.outcome = TransportOutcome::kCompleted;
    attempt.stopped = true;
    return attempt;
  }
  if (code == CURLE_WRITE_ERROR && request.overflow) {
    attempt.outcome = TransportOutcome::kFatal;
    attempt.error = request.ranged
                        ? "the server sent more bytes than the range asked for"
                        : "the answer is larger than 64 MiB";
    return attempt;
  }
  attempt.outcome = OutcomeOf(code);
  if (code != CURLE_OK) {
    attempt.error = error[0] != '\0' ? std::string(error) : curl_easy_strerror(code);
  }
  return attempt;
}

namespace {

absl::Status HttpError(const s3_internal::Request& request, int attempts) {
  const std::string summary = ParseErrorSummary(request.body);
  std::string what = absl::StrCat(request.What(), ": HTTP ", request.status);
  if (!summary.empty()) absl::StrAppend(&what, " (", summary, ")");
  const int status = request.status;
  if (status == 403) {
    return absl::PermissionDeniedError(absl::StrCat(
        what, ": access to bucket '", request.bucket,
        "' denied (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and the "
        "bucket's policy)"));
  }
  if (status == 404) {
    const bool no_bucket = absl::StrContains(summary, "NoSuchBucket");
    return absl::NotFoundError(absl::StrCat(
        what, no_bucket ? absl::StrCat(": no bucket '", request.bucket, "'")
                        : absl::StrCat(": ", request.display, " does not exist")));
  }
  if (status == 412) {
    return absl::FailedPreconditionError(absl::StrCat(
        "'", request.display, "' changed while it was read (its ETag is no longer ",
        request.etag, "): ", what));
  }
  if (status == 401) return absl::UnauthenticatedError(what);
  if (status >= 400 && status <= 499) return absl::InvalidArgumentError(what);
  if (status >= 500) {
    return absl::UnavailableError(
        absl::StrCat(what, "; gave up after ", attempts, " attempts"));
  }
  return absl::UnknownError(absl::StrCat(what, ": unexpected answer"));
}

}  // namespace

absl::Status S3Client::Run(Request& request) {
  const int max_attempts = std::max(1, config_.retry.max_attempts);
  for (int attempt = 1;; ++attempt) {
    const Attempt result = Perform(request);
    if (result.cancelled) {
      return absl::CancelledError(absl::StrCat(request.What(), ": cancelled"));
    }
    if (result.stopped) return absl::OkStatus();
    if (request.ranged && request.etag.empty() && request.status >= 200 &&
        request.status <= 299) {
      // The rest of the range must come from the version this answer is of.
      request.etag = request.etag_header;
    }
    const bool completed = result.outcome == TransportOutcome::kCompleted;
    if (completed && request.status >= 200 && request.status <= 299) {
      return absl::OkStatus();
    }
    if (completed && request.ranged && request.status == 416) {
      return absl::OkStatus();  // the range starts at or after the end
    }
    if (request.sink != nullptr && request.sink->Abandoned()) {
      return absl::CancelledError(absl::StrCat(request.What(), ": abandoned"));
    }
    const bool retry = ShouldRetry(result.outcome, request.status);
    if (!retry || attempt >= max_attempts) {
      if (completed) return HttpError(request, attempt);
      const std::string what =
          absl::StrCat(request.What(), " (", request.url, "): ", result.error);
      if (result.outcome == TransportOutcome::kFatal) {
        return absl::InternalError(what);
      }
      return absl::UnavailableError(
          absl::StrCat(what, "; gave up after ", attempt, " attempts"));
    }
    const absl::Duration pause = BackoffBefore(attempt, config_.retry, Jitter());
    SHARDQ_LOG_WARN("{}: {}; retry {} of {} in {}", request.What(),
                    completed ? absl::StrCat("HTTP ", request.status) : result.error,
                    attempt, max_attempts - 1, absl::FormatDuration(pause));
    retries_.fetch_add(1);
    const absl::Time until = absl::Now() + pause;
    while (absl::Now() < until) {
      if ((request.cancel != nullptr && request.cancel->load()) ||
          (request.sink != nullptr && request.sink->Abandoned())) {
        return absl::CancelledError(absl::StrCat(request.What(), ": cancelled"));
      }
      absl::SleepFor(std::min(absl::Milliseconds(20), until - absl::Now()));
    }
  }
}

absl::StatusOr<S3ObjectInfo> S3Client::Head(const S3Url& url) {
  Request request;
  request.method = "HEAD";
  request.url = ObjectRequestUrl(config_, url.bucket, url.key);
  request.display = url.ToString();
  request.bucket = url.bucket;
  if (absl::Status s = Run(request); !s.ok()) return s;
  if (request.content_length < 0) {
    return absl::DataLossError(absl::StrCat(
        "HEAD ", request.display, ": the answer has no Content-Length"));
  }
  S3ObjectInfo info;
  info.key = url.key;
  info.size = request.content_length;
  info.etag = request.etag_header;
  return info;
}

absl::StatusOr<S3ObjectInfo> S3Client::OpenRead(const S3Url& url, size_t n,
                                                std::string* head) {
  head->resize(n);
  BufferSink sink(head->data());
  Request request;
  request.url = ObjectRequestUrl(config_, url.bucket, url.key);
  request.display = url.ToString();
  request.bucket = url.bucket;
  request.ranged = true;
  request.n = n;
  request.sink = &sink;
  if (absl::Status s = Run(request); !s.ok()) return s;
  if (request.status == 416) {  // an empty object has no byte 0
    head->clear();
    return Head(url);
  }
  head->resize(request.got);
  S3ObjectInfo info = AnswerInfo(request);
  info.key = url.key;
  if (info.size < 0 || info.size < static_cast<int64_t>(request.got)) {
    return absl::DataLossError(absl::StrCat(
        "GET ", request.display, ": the answer gives no object size (HTTP ",
        request.status, " without Content-Range)"));
  }
  return info;
}

absl::StatusOr<size_t> S3Client::GetRange(const S3Url& url, int64_t offset,
                                          size_t n, const std::string& etag,
                                          char* dst,
                                          const std::atomic<bool>* cancel) {
  BufferSink sink(dst);
  return GetRange(url, offset, n, etag, sink, cancel);
}

absl::StatusOr<size_t> S3Client::GetRange(const S3Url& url, int64_t offset,
                                          size_t n, const std::string& etag,
                                          S3RangeSink& sink,
                                          const std::atomic<bool>* cancel) {
  if (n == 0) return size_t{0};
  Request request;
  request.url = ObjectRequestUrl(config_, url.bucket, url.key);
  request.display = url.ToString();
  request.bucket = url.bucket;
  request.etag = etag;
  request.cancel = cancel;
  request.ranged = true;
  request.offset = offset;
  request.n = n;
  request.sink = &sink;
  if (absl::Status s = Run(request); !s.ok()) return s;
  return request.got;
}

absl::StatusOr<std::vector<S3ObjectInfo>> S3Client::List(
    const std::string& bucket, const std::string& prefix) {
  std::vector<S3ObjectInfo> objects;
  std::string token;
  const std::string display = absl::StrCat(kS3Scheme, bucket, "/", prefix);
  do {
    Request request;
    request.url = ListRequestUrl(config_, bucket, prefix, token);
    request.display = display;
    request.bucket = bucket;
    if (absl::Status s = Run(request); !s.ok()) return s;
    absl::StatusOr<S3ListPage> page = ParseListPage(request.body, display);
    if (!page.ok()) return page.status();
    for (S3ObjectInfo& info : page->objects) objects.push_back(std::move(info));
    token = page->next_continuation_token;
  } while (!token.empty());
  std::sort(objects.begin(), objects.end(),
            [](const S3ObjectInfo& a, const S3ObjectInfo& b) { return a.key < b.key; });
  return objects;
}

}  // namespace shardq
