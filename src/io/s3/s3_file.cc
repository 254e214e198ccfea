#include "src/io/s3/s3_file.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "src/io/s3/s3_stream.h"

namespace shardq {
namespace {

// Bytes a plain Open fetches from the start of the object (they answer
// format sniffs), and bytes past the announced range that a stream also
// fetches (the readers' look-ahead for a record that ends past the range:
// both readers read 256 KiB buffers).
constexpr size_t kOpenBytes = 64 << 10;
constexpr int64_t kBoundaryBytes = 256 << 10;
// The most an open object buffers ahead of its reader.
constexpr size_t kMaxStreamBufferBytes = 4 << 20;
// The start of an object that the head cache keeps (format sniffs read 12
// bytes), and how many objects' starts it keeps.
constexpr size_t kCachedHeadBytes = 64;
constexpr size_t kCachedHeads = 4096;

}  // namespace

// The first bytes of recently opened objects, by s3:// name and ETag, so
// that a slice after an object's first one answers its format sniff at
// offset 0 without a request of its own. Thread-safe.
class S3HeadCache {
 public:
  // The known first bytes of `url` at `etag` ("" when none are).
  std::string Get(const std::string& url, const std::string& etag) const {
    absl::MutexLock lock(&mu_);
    auto it = heads_.find(url);
    if (it == heads_.end() || it->second.etag != etag) return "";
    return it->second.bytes;
  }

  // Remembers `bytes` as the first bytes of `url` at `etag`.
  void Put(const std::string& url, const std::string& etag,
           absl::string_view bytes) {
    if (etag.empty() || bytes.empty()) return;  // nothing to check it by
    bytes = bytes.substr(0, kCachedHeadBytes);
    absl::MutexLock lock(&mu_);
    auto [it, added] = heads_.try_emplace(url);
    if (!added && it->second.etag == etag &&
        it->second.bytes.size() >= bytes.size()) {
      return;
    }
    it->second.etag = etag;
    it->second.bytes = std::string(bytes);
    if (!added) return;
    order_.push_back(url);
    if (order_.size() > kCachedHeads) {
      heads_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  struct Head {
    std::string etag;
    std::string bytes;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Head> heads_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // oldest first
};

// Streams started by WillOpen for an open that has not come yet, oldest
// first. Thread-safe. A stream is dropped (its GET ended, its thread
// joined) outside the lock. In a child that inherited the cache through
// fork() the streams' threads do not exist: they are abandoned, never
// used or joined.
class S3OpenedAhead {
 public:
  using Stream = std::shared_ptr<S3RangeStream>;

  explicit S3OpenedAhead(absl::Duration life) : life_(life) {}

  // True when a stream for [start, end) of `path` may be added: none
  // waits for it already, and fewer than kMaxOpenedAhead wait.
  bool Wants(const std::string& path, int64_t start, int64_t end) {
    std::vector<Stream> dropped;
    absl::MutexLock lock(&mu_);
    DropStaleLocked(&dropped);
    return WantsLocked(path, start, end);
  }

  void Add(const std::string& path, int64_t start, int64_t end,
           std::shared_ptr<S3Client> client, Stream stream) {
    std::vector<Stream> dropped;
    absl::MutexLock lock(&mu_);
    DropStaleLocked(&dropped);
    if (!WantsLocked(path, start, end)) {  // another thread was first
      dropped.push_back(std::move(stream));
      return;
    }
    entries_.push_back(Entry{path, start, end, std::move(client), std::move(stream),
                             absl::Now() + life_});
  }

  // The stream waiting for [start, end) of `path` through `client` (one
  // that fetches up to `end` or further), taken out; null when none does.
  Stream Take(const std::string& path, int64_t start, int64_t end,
              const std::shared_ptr<S3Client>& client) {
    std::vector<Stream> dropped;
    absl::MutexLock lock(&mu_);
    DropStaleLocked(&dropped);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->path != path || it->start != start || it->end < end) continue;
      if (it->client != client) continue;  // the environment changed since
      Stream stream = std::move(it->stream);
      entries_.erase(it);
      return stream;
    }
    return nullptr;
  }

 private:
  struct Entry {
    std::string path;
    int64_t start;
    int64_t end;
    std::shared_ptr<S3Client> client;
    Stream stream;
    absl::Time expires;
  };

  // Full, a new hint is refused rather than an older one dropped: with
  // more readers hinting than streams may wait, dropping the oldest (the
  // nearest to its open) would waste every hint's GET.
  bool WantsLocked(const std::string& path, int64_t start, int64_t end) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (entries_.size() >= S3FileSystem::kMaxOpenedAhead) return false;
    for (const Entry& e : entries_) {
      if (e.path == path && e.start == start && e.end >= end) return false;
    }
    return true;
  }

  void DropStaleLocked(std::vector<Stream>* dropped) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (::getpid() != owner_) {  // inherited through fork(): see above
      for (Entry& e : entries_) new Stream(std::move(e.stream));  // NOLINT: leaked
      entries_.clear();
      owner_ = ::getpid();
    }
    const absl::Time now = absl::Now();
    while (!entries_.empty() && entries_.front().expires <= now) {
      dropped->push_back(std::move(entries_.front().stream));
      entries_.pop_front();
    }
  }

  const absl::Duration life_;
  absl::Mutex mu_;
  std::deque<Entry> entries_ ABSL_GUARDED_BY(mu_);
  pid_t owner_ ABSL_GUARDED_BY(mu_) = ::getpid();
};

namespace {

// The end of the stream an open for [start, end) fetches: the range and
// the look-ahead past it (to the end of the object for end < 0).
int64_t StreamEnd(int64_t start, int64_t end) {
  return end < 0 || end > std::numeric_limits<int64_t>::max() - kBoundaryBytes
             ? std::numeric_limits<int64_t>::max()
             : std::max(start, end) + kBoundaryBytes;
}

S3StreamOptions StreamOptions(const S3Config& config) {
  S3StreamOptions options;
  options.request_bytes = std::max<int64_t>(config.chunk_bytes, 1);
  options.park_after = config.park_after;
  options.buffer_bytes = static_cast<size_t>(
      std::min<int64_t>(options.request_bytes, kMaxStreamBufferBytes));
  return options;
}

// The bytes a reader announcing [start, end) reads in an object of `size`
// bytes: the range, and the look-ahead past its end.
std::pair<int64_t, int64_t> HintedRange(int64_t start, int64_t end,
                                        int64_t size) {
  start = std::clamp<int64_t>(start, 0, size);
  end = end < 0 ? size : std::min(end, size - kBoundaryBytes) + kBoundaryBytes;
  return {start, std::max(start, std::min(end, size))};
}

class S3File final : public RandomAccessFile {
 public:
  S3File(std::shared_ptr<S3Client> client, S3Url url, const S3ObjectInfo& info,
         std::string head, std::shared_ptr<S3HeadCache> heads)
      : RandomAccessFile(url.ToString(), info.size),
        client_(std::move(client)),
        url_(std::move(url)),
        etag_(info.etag),
        head_(std::move(head)),
        heads_(std::move(heads)),
        stream_options_(StreamOptions(client_->config())) {
    heads_->Put(path(), etag_, head_);
  }

  // With a stream already fetching [start, end) (as OpenForRange starts it).
  S3File(std::shared_ptr<S3Client> client, S3Url url, const S3ObjectInfo& info,
         std::shared_ptr<S3HeadCache> heads,
         std::shared_ptr<S3RangeStream> stream, int64_t start, int64_t end)
      : S3File(std::move(client), std::move(url), info, "", std::move(heads)) {
    absl::MutexLock lock(&mu_);
    std::tie(hint_start_, hint_end_) = HintedRange(start, end, size());
    stream_ = std::move(stream);
  }

  std::string version() const override { return etag_; }

  void WillRead(int64_t start, int64_t end) override {
    std::shared_ptr<S3RangeStream> dropped;
    absl::MutexLock lock(&mu_);
    const std::pair<int64_t, int64_t> range = HintedRange(start, end, size());
    if (range == std::make_pair(hint_start_, hint_end_)) return;
    std::tie(hint_start_, hint_end_) = range;
    dropped = std::move(stream_);  // ends after the lock is released
  }

  absl::StatusOr<size_t> ReadSome(int64_t offset, size_t n,
                                  char* dst) override {
    if (offset >= size() || n == 0) return size_t{0};
    n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(n), size() - offset));
    if (offset < static_cast<int64_t>(head_.size())) {
      const size_t take = std::min(n, head_.size() - static_cast<size_t>(offset));
      std::memcpy(dst, head_.data() + offset, take);
      return take;
    }
    absl::StatusOr<std::optional<size_t>> streamed = ReadStreamed(offset, n, dst);
    if (!streamed.ok()) return streamed.status();
    if (streamed->has_value()) {
      if (offset == 0) heads_->Put(path(), etag_, absl::string_view(dst, **streamed));
      return **streamed;
    }
    // Outside the announced range: exactly the bytes asked for.
    if (offset == 0) {
      const std::string known = heads_->Get(path(), etag_);
      if (known.size() >= n) {
        std::memcpy(dst, known.data(), n);
        return n;
      }
    }
    absl::StatusOr<size_t> got = client_->GetRange(url_, offset, n, etag_, dst);
    if (got.ok() && offset == 0) heads_->Put(path(), etag_, absl::string_view(dst, *got));
    return got;
  }

  absl::StatusOr<std::optional<absl::string_view>> Lend(int64_t offset,
                                                        size_t n) override {
    if (offset >= size() || n == 0) return std::optional<absl::string_view>(absl::string_view());
    n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(n), size() - offset));
    if (offset < static_cast<int64_t>(head_.size())) {
      const size_t take = std::min(n, head_.size() - static_cast<size_t>(offset));
      return std::optional<absl::string_view>(
          absl::string_view(head_.data() + offset, take));
    }
    absl::StatusOr<std::optional<absl::string_view>> lent =
        ThroughStream(offset, [&](S3RangeStream& stream) {
          return stream.Lend(offset, n);
        });
    // The object's first bytes are remembered for the next slice's sniff.
    if (offset == 0 && lent.ok() && lent->has_value()) {
      heads_->Put(path(), etag_, **lent);
    }
    return lent;
  }

 private:
  // A read through the stream of the announced range (started here when
  // the read is inside the range but outside the current stream); nullopt
  // for a read outside the announced range.
  absl::StatusOr<std::optional<size_t>> ReadStreamed(int64_t offset, size_t n,
                                                     char* dst) {
    return ThroughStream(offset, [&](S3RangeStream& stream) {
      return stream.Read(offset, n, dst);
    });
  }

  // `read` (a Read or Lend at `offset`) of the stream of the announced
  // range, started here when `offset` is inside the range but outside the
  // current stream; nullopt for an offset outside the announced range.
  template <typename ReadFn>
  std::invoke_result_t<ReadFn, S3RangeStream&> ThroughStream(int64_t offset,
                                                             ReadFn read) {
    using Result = std::invoke_result_t<ReadFn, S3RangeStream&>;
    std::shared_ptr<S3RangeStream> stream;
    {
      absl::MutexLock lock(&mu_);
      stream = stream_;
    }
    if (stream != nullptr) {
      Result got = read(*stream);
      if (!got.ok() || got->has_value()) return got;
    }
    std::shared_ptr<S3RangeStream> dropped;
    {
      absl::MutexLock lock(&mu_);
      if (offset < hint_start_ || offset >= hint_end_) {
        return typename Result::value_type();
      }
      stream = std::make_shared<S3RangeStream>(client_, url_, offset, hint_end_,
                                               etag_, stream_options_);
      dropped = std::exchange(stream_, stream);
    }
    dropped.reset();  // not under mu_: it may wait for its thread
    return read(*stream);
  }

  const std::shared_ptr<S3Client> client_;
  const S3Url url_;
  const std::string etag_;
  const std::string head_;  // the object's first bytes, from a plain Open
  const std::shared_ptr<S3HeadCache> heads_;
  const S3StreamOptions stream_options_;

  absl::Mutex mu_;
  int64_t hint_start_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hint_end_ ABSL_GUARDED_BY(mu_) = 0;  // no hint: exact reads
  std::shared_ptr<S3RangeStream> stream_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

S3FileSystem::S3FileSystem(std::shared_ptr<S3Client> client,
                           absl::Duration opened_ahead_life)
    : client_(std::move(client)),
      heads_(std::make_shared<S3HeadCache>()),
      ahead_(std::make_unique<S3OpenedAhead>(opened_ahead_life)) {}

S3FileSystem::~S3FileSystem() = default;

absl::StatusOr<std::shared_ptr<S3Client>> S3FileSystem::Client() const {
  if (client_ != nullptr) return client_;
  return S3Client::Default();
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> S3FileSystem::Open(
    const std::string& path) {
  absl::StatusOr<S3Url> url = ParseS3Url(path);
  if (!url.ok()) return url.status();
  absl::StatusOr<std::shared_ptr<S3Client>> client = Client();
  if (!client.ok()) return client.status();
  std::string head;
  absl::StatusOr<S3ObjectInfo> info = (*client)->OpenRead(*url, kOpenBytes, &head);
  if (!info.ok()) return info.status();
  return std::unique_ptr<RandomAccessFile>(new S3File(
      *std::move(client), *std::move(url), *info, std::move(head), heads_));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> S3FileSystem::OpenListed(
    const std::string& path, const S3ObjectInfo& info) {
  absl::StatusOr<S3Url> url = ParseS3Url(path);
  if (!url.ok()) return url.status();
  absl::StatusOr<std::shared_ptr<S3Client>> client = Client();
  if (!client.ok()) return client.status();
  return std::unique_ptr<RandomAccessFile>(
      new S3File(*std::move(client), *std::move(url), info, "", heads_));
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> S3FileSystem::OpenForRange(
    const std::string& path, int64_t start, int64_t end) {
  absl::StatusOr<S3Url> url = ParseS3Url(path);
  if (!url.ok()) return url.status();
  absl::StatusOr<std::shared_ptr<S3Client>> client = Client();
  if (!client.ok()) return client.status();
  start = std::max<int64_t>(start, 0);
  const int64_t stream_end = StreamEnd(start, end);
  // A stream WillOpen started for this range, unless its first answer
  // failed: then this open asks again, and reports its own answer.
  std::shared_ptr<S3RangeStream> stream = ahead_->Take(path, start, stream_end, *client);
  if (stream != nullptr && !stream->Answer().ok()) stream.reset();
  if (stream == nullptr) {
    stream = std::make_shared<S3RangeStream>(*client, *url, start, stream_end,
                                             /*etag=*/"", StreamOptions((*client)->config()));
  }
  absl::StatusOr<std::optional<S3ObjectInfo>> answer = stream->Answer();
  if (!answer.ok()) return answer.status();
  S3ObjectInfo info;
  if (answer->has_value()) {
    info = **answer;
  } else {  // the range starts past the end: no bytes, so no size either
    stream.reset();
    absl::StatusOr<S3ObjectInfo> head = (*client)->Head(*url);
    if (!head.ok()) return head.status();
    info = *std::move(head);
  }
  if (info.size < 0) {
    return absl::DataLossError(absl::StrCat(
        "GET ", path, ": the answer gives no object size (no Content-Range)"));
  }
  info.key = url->key;
  return std::unique_ptr<RandomAccessFile>(
      new S3File(*std::move(client), *std::move(url), info, heads_,
                 std::move(stream), start, end));
}

void S3FileSystem::WillOpen(const std::string& path, int64_t start, int64_t end) {
  absl::StatusOr<S3Url> url = ParseS3Url(path);
  if (!url.ok()) return;  // the open says why
  absl::StatusOr<std::shared_ptr<S3Client>> client = Client();
  if (!client.ok() || !(*client)->config().open_ahead) return;
  start = std::max<int64_t>(start, 0);
  const int64_t stream_end = StreamEnd(start, end);
  if (!ahead_->Wants(path, start, stream_end)) return;
  auto stream = std::make_shared<S3RangeStream>(*client, *url, start, stream_end,
                                                /*etag=*/"", StreamOptions((*client)->config()));
  ahead_->Add(path, start, stream_end, *std::move(client), std::move(stream));
}

S3FileSystem* S3FileSystem::Default() {
  static S3FileSystem* const file_system = new S3FileSystem();
  return file_system;
}

absl::StatusOr<S3ObjectInfo> S3Stat(const std::string& url) {
  absl::StatusOr<S3Url> parsed = ParseS3Url(url);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<std::shared_ptr<S3Client>> client = S3Client::Default();
  if (!client.ok()) return client.status();
  return (*client)->Head(*parsed);
}

absl::StatusOr<std::vector<std::pair<std::string, S3ObjectInfo>>> S3Glob(
    const std::string& pattern) {
  absl::StatusOr<S3Url> parsed = ParseS3Url(pattern, /*allow_empty_key=*/true);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<std::shared_ptr<S3Client>> client = S3Client::Default();
  if (!client.ok()) return client.status();
  absl::StatusOr<std::vector<S3ObjectInfo>> listed =
      (*client)->List(parsed->bucket, PatternListPrefix(parsed->key));
  if (!listed.ok()) return listed.status();
  std::vector<std::pair<std::string, S3ObjectInfo>> out;
  for (S3ObjectInfo& info : *listed) {
    if (!KeyMatches(parsed->key, info.key)) continue;
    std::string name = S3Url{parsed->bucket, info.key}.ToString();
    out.emplace_back(std::move(name), std::move(info));
  }
  if (out.empty()) {
    return absl::NotFoundError(
        absl::StrCat("pattern '", pattern, "' matches no object"));
  }
  return out;
}

}  // namespace shardq
