#include "src/io/s3/s3_stream.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "src/core/process.h"

namespace shardq {
namespace {

// A stream being destroyed reads the rest of its GET, rather than closing
// the connection, when no more than this is left of it.
constexpr int64_t kDrainBytes = 1 << 20;
// A read of at least this many bytes that finds the buffer empty has the
// bytes copied straight into it as they arrive (one copy fewer).
constexpr size_t kDirectReadBytes = 64 << 10;
// Buffers of ended streams kept for the next streams, at most.
constexpr size_t kIdleBuffers = 4;

// Stream buffers, mapped from the kernel (not malloc's heap) and kept for
// the next stream when one ends. A new buffer per slice costs a page fault
// per 4 KiB (a thousand for 4 MiB) on its first fill; and malloc serving
// them from its heap let a reader's own allocations (Python's record
// bytes, between two streams alive at once) cut the freed buffers up, so
// that each new one took fresh pages from the kernel again: 160,000 page
// faults per GiB read through Python, against 8,000. Thread-safe.
class BufferPool {
 public:
  static BufferPool& Get() {
    static BufferPool* const pool = new BufferPool();
    return *pool;
  }

  // Throws std::bad_alloc when the kernel refuses the mapping.
  char* Take(size_t bytes) {
    {
      absl::MutexLock lock(&mu_);
      for (auto it = idle_.begin(); it != idle_.end(); ++it) {
        if (it->second != bytes) continue;
        char* data = it->first;
        idle_.erase(it);
        return data;
      }
    }
    void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) throw std::bad_alloc();
    return static_cast<char*>(data);
  }

  void Give(char* data, size_t bytes) {
    {
      absl::MutexLock lock(&mu_);
      if (idle_.size() < kIdleBuffers) {
        idle_.emplace_back(data, bytes);
        return;
      }
    }
    ::munmap(data, bytes);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::pair<char*, size_t>> idle_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

void S3RangeStream::BufferReturn::operator()(char* data) const {
  BufferPool::Get().Give(data, bytes);
}

// Takes a GET's bytes into the buffer; blocks while it is full.
class S3RangeStream::Sink final : public S3RangeSink {
 public:
  explicit Sink(S3RangeStream* stream) : stream_(stream) {}

  bool parked() const { return parked_; }

  bool Abandoned() const override {
    absl::MutexLock lock(&stream_->mu_);
    return stream_->closing_ || stream_->cancel_.load();
  }

  void OnAnswer(const S3ObjectInfo& info) override {
    S3RangeStream& s = *stream_;
    absl::MutexLock lock(&s.mu_);
    if (s.answer_.has_value()) return;
    s.answer_ = info;
    if (s.etag_.empty()) s.etag_ = info.etag;
    if (info.size >= 0) s.object_end_ = std::min(s.object_end_, info.size);
  }

  size_t Write(const char* data, size_t n) override {
    S3RangeStream& s = *stream_;
    size_t taken = 0;
    s.mu_.Lock();
    while (taken < n) {
      if (s.cancel_.load()) break;
      if (s.closing_) {  // drained: nobody reads these
        s.arrived_ += static_cast<int64_t>(n - taken);
        s.held_start_ = s.arrived_;
        taken = n;
        break;
      }
      if (s.arrived_ < s.drop_until_) {  // the reader skipped them
        const size_t skip = static_cast<size_t>(
            std::min<int64_t>(s.drop_until_ - s.arrived_, n - taken));
        s.arrived_ += static_cast<int64_t>(skip);
        s.held_start_ = s.arrived_;
        taken += skip;
        continue;
      }
      const size_t held = static_cast<size_t>(s.arrived_ - s.held_start_);
      if (s.direct_dst_ != nullptr && held == 0 && s.direct_got_ < s.direct_room_) {
        // A reader waits with an empty buffer: fill its own.
        const size_t take = std::min(s.direct_room_ - s.direct_got_, n - taken);
        char* const to = s.direct_dst_ + s.direct_got_;
        s.direct_copying_ = true;
        s.mu_.Unlock();
        std::memcpy(to, data + taken, take);
        s.mu_.Lock();
        s.direct_copying_ = false;
        s.direct_got_ += take;
        s.arrived_ += static_cast<int64_t>(take);
        s.held_start_ = s.arrived_;
        taken += take;
        continue;
      }
      if (held == s.capacity_) {
        const absl::Time now = absl::Now();
        if (s.full_since_ == absl::InfiniteFuture()) s.full_since_ = now;
        const absl::Time park_at = s.full_since_ + s.options_.park_after;
        if (now >= park_at) {
          parked_ = true;
          break;
        }
        s.mu_.AwaitWithDeadline(
            absl::Condition(&s, &S3RangeStream::HasRoomOrStops), park_at);
        continue;
      }
      const size_t take = std::min(s.capacity_ - held, n - taken);
      const int64_t at = s.arrived_;
      s.mu_.Unlock();
      // [at, at + take) lies outside the reader's window: copy unlocked.
      const size_t index = static_cast<size_t>(at % static_cast<int64_t>(s.capacity_));
      const size_t first = std::min(take, s.capacity_ - index);
      std::memcpy(s.buffer_.get() + index, data + taken, first);
      std::memcpy(s.buffer_.get(), data + taken + first, take - first);
      if (s.options_.while_copying) s.options_.while_copying();
      s.mu_.Lock();
      s.arrived_ += static_cast<int64_t>(take);
      // A read past the bytes that had arrived, made while these were being
      // copied, dropped those before it (drop_until_) but could not skip
      // them: they had not arrived. Now they have: drop them, or that
      // reader would wait for held_start_ to reach its offset forever (and
      // the full buffer park the GET).
      if (s.drop_until_ > s.held_start_) {
        s.held_start_ = std::min(s.drop_until_, s.arrived_);
      }
      taken += take;
    }
    s.mu_.Unlock();
    return taken;
  }

 private:
  S3RangeStream* const stream_;
  bool parked_ = false;
};

S3RangeStream::S3RangeStream(std::shared_ptr<S3Client> client, S3Url url,
                             int64_t begin, int64_t end, std::string etag,
                             S3StreamOptions options)
    : client_(std::move(client)),
      url_(std::move(url)),
      begin_(begin),
      end_(std::max(begin, end)),
      options_(options),
      capacity_(std::max<size_t>(options.buffer_bytes, 1)),
      buffer_(BufferPool::Get().Take(capacity_), BufferReturn{capacity_}),
      held_start_(begin),
      arrived_(begin),
      drop_until_(begin),
      request_end_(begin),
      object_end_(end_),
      etag_(std::move(etag)) {
  thread_ = std::thread([this] {
    NameThisThread("s3-get");
    Run();
  });
}

S3RangeStream::~S3RangeStream() {
  {
    absl::MutexLock lock(&mu_);
    if (request_end_ - arrived_ <= kDrainBytes) {
      closing_ = true;
    } else {
      cancel_.store(true);  // under mu_: wakes a Write waiting for room
    }
  }
  thread_.join();
}

bool S3RangeStream::HasRoomOrStops() const {
  return arrived_ - held_start_ < static_cast<int64_t>(capacity_) ||
         closing_ || cancel_.load();
}

void S3RangeStream::Run() {
  bool parked = false;
  while (true) {
    int64_t next = 0;
    int64_t stop = 0;
    std::string etag;
    {
      absl::MutexLock lock(&mu_);
      if (parked) {
        auto drained = [this] {
          return arrived_ - held_start_ <= static_cast<int64_t>(capacity_ / 2) ||
                 closing_ || cancel_.load();
        };
        mu_.Await(absl::Condition(&drained));
        full_since_ = absl::InfiniteFuture();
      }
      if (drop_until_ > arrived_) {  // the reader skipped them: never fetched
        arrived_ = held_start_ = drop_until_;
      }
      next = arrived_;
      stop = std::min(object_end_, next + options_.request_bytes);
      if (closing_ || cancel_.load() || next >= stop) {
        done_ = true;
        return;
      }
      request_end_ = stop;
      etag = etag_;
    }
    Sink sink(this);
    absl::StatusOr<size_t> got =
        client_->GetRange(url_, next, static_cast<size_t>(stop - next), etag,
                          sink, &cancel_);
    absl::MutexLock lock(&mu_);
    if (!got.ok()) {
      status_ = got.status();
      done_ = true;
      return;
    }
    parked = sink.parked();
    if (!parked && !closing_ && !cancel_.load() &&
        static_cast<int64_t>(*got) < stop - next) {
      object_end_ = next + static_cast<int64_t>(*got);  // the object ended
    }
  }
}

absl::StatusOr<std::optional<S3ObjectInfo>> S3RangeStream::Answer() {
  absl::MutexLock lock(&mu_);
  auto known = [this] { return answer_.has_value() || done_; };
  mu_.Await(absl::Condition(&known));
  if (answer_.has_value()) return answer_;
  if (!status_.ok()) return status_;
  return std::optional<S3ObjectInfo>();
}

bool S3RangeStream::ServesLocked(int64_t offset) const {
  return offset >= held_start_ && offset < end_ &&
         offset <= arrived_ + static_cast<int64_t>(capacity_);
}

std::optional<int64_t> S3RangeStream::HoldFromLocked(int64_t offset,
                                                     size_t n) {
  if (!ServesLocked(offset)) return std::nullopt;
  const int64_t held_before = held_start_;
  if (offset > arrived_) {
    held_start_ = arrived_;
    drop_until_ = std::max(drop_until_, offset);
  } else {
    held_start_ = offset;
  }
  // A reader that takes bytes is not idle, even when the connection
  // refills the buffer at once: its GET is parked only park_after after
  // the last bytes it took.
  if (held_start_ > held_before) full_since_ = absl::InfiniteFuture();
  // Woken once a good part of the read has arrived, not for each piece
  // that the connection delivers.
  return static_cast<int64_t>(std::min(n, capacity_ / 2 + 1));
}

absl::StatusOr<size_t> S3RangeStream::AwaitHeldLocked(int64_t offset,
                                                      int64_t want, size_t n) {
  auto ready = [this, offset, want] {
    return (held_start_ == offset &&
            (arrived_ - offset >= want || arrived_ >= object_end_)) ||
           done_ || object_end_ <= offset;
  };
  mu_.Await(absl::Condition(&ready));
  if (held_start_ != offset || arrived_ <= offset) {
    if (!status_.ok() && offset < object_end_) return status_;
    return size_t{0};  // the object ends before offset
  }
  return static_cast<size_t>(
      std::min<int64_t>(static_cast<int64_t>(n), arrived_ - offset));
}

absl::StatusOr<std::optional<size_t>> S3RangeStream::Read(int64_t offset,
                                                          size_t n,
                                                          char* dst) {
  absl::MutexLock read_lock(&read_mu_);
  size_t take = 0;
  {
    absl::MutexLock lock(&mu_);
    const std::optional<int64_t> want = HoldFromLocked(offset, n);
    if (!want.has_value()) return std::optional<size_t>();
    if (n >= kDirectReadBytes && held_start_ == offset && arrived_ == offset &&
        offset < object_end_ && !done_) {
      direct_dst_ = dst;
      direct_room_ = n;
      direct_got_ = 0;
      // A piece the thread was copying into the buffer when dst was lent
      // lands there, and then dst gets nothing: read the buffer instead.
      auto filled = [this, want = *want] {
        return !direct_copying_ &&
               (static_cast<int64_t>(direct_got_) >= want || done_ ||
                arrived_ >= object_end_ ||
                (direct_got_ == 0 && arrived_ > held_start_));
      };
      mu_.Await(absl::Condition(&filled));
      const size_t got = direct_got_;
      direct_dst_ = nullptr;
      direct_room_ = direct_got_ = 0;
      // These bytes went to dst only: the buffer holds none before arrived_.
      if (got > 0) return std::optional<size_t>(got);
    }
    absl::StatusOr<size_t> held = AwaitHeldLocked(offset, *want, n);
    if (!held.ok()) return held.status();
    take = *held;
  }
  // [offset, offset + take) stays in the buffer until a later Read: copy
  // unlocked.
  const size_t index = static_cast<size_t>(offset % static_cast<int64_t>(capacity_));
  const size_t first = std::min(take, capacity_ - index);
  std::memcpy(dst, buffer_.get() + index, first);
  std::memcpy(dst + first, buffer_.get(), take - first);
  return std::optional<size_t>(take);
}

absl::StatusOr<std::optional<absl::string_view>> S3RangeStream::Lend(
    int64_t offset, size_t n) {
  absl::MutexLock read_lock(&read_mu_);
  absl::MutexLock lock(&mu_);
  const std::optional<int64_t> want = HoldFromLocked(offset, n);
  if (!want.has_value()) return std::optional<absl::string_view>();
  absl::StatusOr<size_t> held = AwaitHeldLocked(offset, *want, n);
  if (!held.ok()) return held.status();
  // [offset, offset + *held) stays in the buffer until a later Read or
  // Lend, and the thread writes only past it: lent as it lies, up to
  // where the buffer wraps around.
  const size_t index = static_cast<size_t>(offset % static_cast<int64_t>(capacity_));
  return std::optional<absl::string_view>(
      absl::string_view(buffer_.get() + index, std::min(*held, capacity_ - index)));
}

}  // namespace shardq
