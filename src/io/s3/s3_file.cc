#include "src/io/s3/s3_file.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace shardq {
namespace {

// One ranged GET's bytes: [offset, offset + got) of the object once done.
struct Chunk {
  int64_t offset = 0;
  size_t size = 0;  // bytes asked for
  std::unique_ptr<char[]> data;
  size_t got = 0;
  absl::Status status;
  absl::Notification done;

  bool Holds(int64_t at) const {
    return at >= offset && at < offset + static_cast<int64_t>(got);
  }
  bool Covers(int64_t at) const {  // before it is done: by what was asked
    return at >= offset && at < offset + static_cast<int64_t>(size);
  }
  size_t CopyOut(int64_t at, size_t n, char* dst) const {
    const size_t from = static_cast<size_t>(at - offset);
    const size_t take = std::min(n, got - from);
    std::memcpy(dst, data.get() + from, take);
    return take;
  }
};

// Bytes an open fetches from the start of the object (they answer format
// sniffs), and bytes past the announced range that its last chunk also
// fetches (the readers' look-ahead for a record that ends past the range:
// both readers read 256 KiB buffers).
constexpr size_t kOpenBytes = 64 << 10;
constexpr int64_t kBoundaryBytes = 256 << 10;

class S3File final : public RandomAccessFile {
 public:
  S3File(std::shared_ptr<S3Client> client, S3Url url, const S3ObjectInfo& info,
         std::string head)
      : RandomAccessFile(url.ToString(), info.size),
        client_(std::move(client)),
        url_(std::move(url)),
        etag_(info.etag),
        chunk_bytes_(static_cast<size_t>(std::max<int64_t>(
            client_->config().chunk_bytes, 1))) {
    if (head.empty()) return;
    auto chunk = std::make_shared<Chunk>();
    chunk->size = chunk->got = head.size();
    chunk->data.reset(new char[head.size()]);
    std::memcpy(chunk->data.get(), head.data(), head.size());
    chunk->done.Notify();
    absl::MutexLock lock(&mu_);
    current_ = std::move(chunk);
  }

  ~S3File() override {
    cancel_.store(true);
    std::thread ahead;
    {
      absl::MutexLock lock(&mu_);
      ahead = std::move(ahead_thread_);
    }
    if (ahead.joinable()) ahead.join();
  }

  std::string version() const override { return etag_; }

  void WillRead(int64_t start, int64_t end) override {
    absl::MutexLock lock(&mu_);
    hint_start_ = std::max<int64_t>(start, 0);
    hint_end_ = end < 0 ? size() : std::min(end + kBoundaryBytes, size());
  }

  absl::StatusOr<size_t> ReadSome(int64_t offset, size_t n,
                                  char* dst) override {
    if (offset >= size() || n == 0) return size_t{0};
    n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(n), size() - offset));
    std::shared_ptr<Chunk> chunk;
    size_t want = 0;
    {
      absl::MutexLock lock(&mu_);
      if (current_ != nullptr && current_->Holds(offset)) {
        return current_->CopyOut(offset, n, dst);
      }
      if (ahead_ != nullptr && ahead_->Covers(offset)) {
        chunk = ahead_;
      } else {
        want = ChunkSizeAt(offset, n);
      }
    }
    if (chunk != nullptr) {
      chunk->done.WaitForNotification();  // fetched ahead: usually already done
    } else {
      chunk = std::make_shared<Chunk>();
      chunk->offset = offset;
      chunk->size = want;
      Fetch(*chunk);
    }
    if (!chunk->status.ok()) return chunk->status;
    absl::MutexLock lock(&mu_);
    if (ahead_ == chunk) ahead_ = nullptr;
    current_ = chunk;
    StartReadAhead(chunk->offset + static_cast<int64_t>(chunk->got));
    if (!chunk->Holds(offset)) return size_t{0};  // the object ended early
    return chunk->CopyOut(offset, n, dst);
  }

 private:
  void Fetch(Chunk& chunk) {
    chunk.data.reset(new char[chunk.size]);
    absl::StatusOr<size_t> got = client_->GetRange(
        url_, chunk.offset, chunk.size, etag_, chunk.data.get(), &cancel_);
    if (got.ok()) {
      chunk.got = *got;
    } else {
      chunk.status = got.status();
      chunk.data.reset();
    }
  }

  // Bytes to fetch for a read of n at `offset`: a chunk (or what is left
  // of the announced range) inside it, exactly n outside.
  size_t ChunkSizeAt(int64_t offset, size_t n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t end = offset + static_cast<int64_t>(n);
    if (offset >= hint_start_ && offset < hint_end_) {
      end = std::max(end, std::min(offset + static_cast<int64_t>(chunk_bytes_),
                                   hint_end_));
    }
    end = std::min(end, size());
    return static_cast<size_t>(end - offset);
  }

  // Fetches the chunk at `next` in the background, when it lies inside the
  // announced range and no fetch ahead is running.
  void StartReadAhead(int64_t next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (next < hint_start_ || next >= hint_end_ || next >= size()) return;
    if (ahead_ != nullptr && !ahead_->done.HasBeenNotified()) return;
    // The previous fetch ahead has finished: its thread is ending.
    if (ahead_thread_.joinable()) ahead_thread_.join();
    auto chunk = std::make_shared<Chunk>();
    chunk->offset = next;
    chunk->size = static_cast<size_t>(
        std::min(next + static_cast<int64_t>(chunk_bytes_), hint_end_) - next);
    ahead_ = chunk;
    ahead_thread_ = std::thread([this, chunk] {
      Fetch(*chunk);
      chunk->done.Notify();
    });
  }

  const std::shared_ptr<S3Client> client_;
  const S3Url url_;
  const std::string etag_;
  const size_t chunk_bytes_;
  std::atomic<bool> cancel_{false};

  absl::Mutex mu_;
  int64_t hint_start_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t hint_end_ ABSL_GUARDED_BY(mu_) = 0;  // no hint: exact reads
  std::shared_ptr<Chunk> current_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Chunk> ahead_ ABSL_GUARDED_BY(mu_);
  std::thread ahead_thread_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

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
  return std::unique_ptr<RandomAccessFile>(
      new S3File(*std::move(client), *std::move(url), *info, std::move(head)));
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
