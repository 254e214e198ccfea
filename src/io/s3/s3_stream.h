// A byte range of an object fetched by ranged GETs on a thread of its own
// into a bounded buffer, which one reader drains in order: the bytes move
// off the connection while the reader works through the bytes before them,
// and each GET is one streaming request for up to request_bytes of the
// range (not one request per buffer). Thread-safe; Read calls are
// serialised.
#ifndef SHARDQ_IO_S3_S3_STREAM_H_
#define SHARDQ_IO_S3_S3_STREAM_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/io/s3/s3_client.h"

namespace shardq {

struct S3StreamOptions {
  // Bytes held between the connection and the reader, at most: the
  // stream's memory (a few buffers of ended streams are kept for the next
  // ones). A GET waits while the buffer is full.
  size_t buffer_bytes = 4 << 20;
  // Bytes one GET asks for; a longer range is fetched by several GETs, one
  // after the other (each pinned to the same ETag).
  int64_t request_bytes = 64 << 20;
  // A GET whose reader takes none of the buffered bytes for this long
  // while the buffer is full is ended and its connection closed, rather
  // than held open by an idle reader (a reader that keeps reading, however
  // slowly, keeps it); a new GET from the next byte starts once the reader
  // has drained half the buffer. Shorter: an idle reader holds a server
  // connection for less time; longer: a reader that pauses (a training
  // step) costs fewer reconnections. InfiniteDuration(): never.
  // S3Config::park_after (SHARDQ_S3_PARK_AFTER_MS) sets it for s3:// files.
  absl::Duration park_after = absl::Seconds(5);
  // Tests only: called on the stream's thread, with no lock held, each
  // time it has copied bytes into the buffer and before they count as
  // arrived, so that a test can land a reader's call in that moment.
  std::function<void()> while_copying;
};

class S3RangeStream {
 public:
  // Starts fetching [begin, end) of `url` (`end` may lie past the end of
  // the object). A non-empty `etag` pins every GET to it (If-Match); an
  // empty one is replaced by the first answer's ETag, which then pins the
  // rest.
  S3RangeStream(std::shared_ptr<S3Client> client, S3Url url, int64_t begin,
                int64_t end, std::string etag, S3StreamOptions options);
  // Ends the transfer and waits for the thread. The current GET is read to
  // its end (and its bytes dropped) when few of them are left, so that its
  // connection stays open for the next request; otherwise it is cancelled.
  ~S3RangeStream();
  S3RangeStream(const S3RangeStream&) = delete;
  S3RangeStream& operator=(const S3RangeStream&) = delete;

  // Waits for the first answer and returns the object's size and ETag;
  // nullopt when the range starts at or after the end of the object (the
  // server sends no bytes). Errors: the first GET's (NOT_FOUND,
  // PERMISSION_DENIED, ...; see S3Client).
  absl::StatusOr<std::optional<S3ObjectInfo>> Answer();

  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }

  // Copies up to n bytes at `offset` into dst, waiting for the first of
  // them to arrive (a long read that finds nothing buffered has them
  // written to dst as they come off the connection); 0 when the object
  // ends before `offset`. nullopt (and
  // nothing read) when this stream does not serve `offset`: outside its
  // range, before the bytes it still holds, or more than a buffer past the
  // bytes that have arrived. Drops the bytes before `offset` (later reads
  // cannot go back to them) and keeps those it copied from the buffer (not
  // those written to dst directly) until a read past them. Errors: the
  // failed GET's, once the reader has been given every byte before it.
  absl::StatusOr<std::optional<size_t>> Read(int64_t offset, size_t n,
                                             char* dst);

  // As Read, but the bytes are lent straight out of the buffer instead of
  // copied: a view of up to n bytes at `offset` (fewer where the buffer
  // wraps around; empty when the object ends before `offset`), which stays
  // valid until the next Read or Lend, since the bytes it shows stay held
  // until a read past them. nullopt as for Read. For one reader: a Read or
  // Lend from another thread may drop the bytes of a view in use.
  absl::StatusOr<std::optional<absl::string_view>> Lend(int64_t offset,
                                                        size_t n);

 private:
  class Sink;
  void Run();
  bool HasRoomOrStops() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ServesLocked(int64_t offset) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Read's and Lend's start: drops the bytes before `offset` (nullopt when
  // the stream does not serve it) and returns how many bytes to wait for.
  std::optional<int64_t> HoldFromLocked(int64_t offset, size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until `want` bytes at `offset` have arrived, the object ends or
  // the stream ends; then returns how many of them are held (0: none, at
  // the end of the object), or the stream's error.
  absl::StatusOr<size_t> AwaitHeldLocked(int64_t offset, int64_t want, size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<S3Client> client_;
  const S3Url url_;
  const int64_t begin_;
  const int64_t end_;
  const S3StreamOptions options_;
  const size_t capacity_;
  // Gives a buffer of `bytes` back to the pool it came from (s3_stream.cc).
  struct BufferReturn {
    size_t bytes;
    void operator()(char* data) const;
  };
  // buffer_[offset % capacity_] holds the byte at `offset`, for offsets in
  // [held_start_, arrived_). The thread writes only outside that window and
  // the reader reads only inside it, so neither copies under mu_.
  const std::unique_ptr<char[], BufferReturn> buffer_;
  std::atomic<bool> cancel_{false};

  absl::Mutex read_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // serialises Read
  mutable absl::Mutex mu_;
  int64_t held_start_ ABSL_GUARDED_BY(mu_);
  int64_t arrived_ ABSL_GUARDED_BY(mu_);     // the next byte to arrive
  int64_t drop_until_ ABSL_GUARDED_BY(mu_);  // bytes before it are dropped
  int64_t request_end_ ABSL_GUARDED_BY(mu_);  // of the GET running now
  int64_t object_end_ ABSL_GUARDED_BY(mu_);   // end_ until the size is known
  std::string etag_ ABSL_GUARDED_BY(mu_);
  std::optional<S3ObjectInfo> answer_ ABSL_GUARDED_BY(mu_);
  // Since when the buffer has been full while the thread waited for room
  // (InfiniteFuture while it has room or the reader took bytes since).
  absl::Time full_since_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // A reader waiting with an empty buffer lends its own: the thread copies
  // the next bytes to direct_dst_[direct_got_, direct_room_) (unlocked,
  // while direct_copying_), and the reader takes it back once it is not.
  char* direct_dst_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t direct_room_ ABSL_GUARDED_BY(mu_) = 0;
  size_t direct_got_ ABSL_GUARDED_BY(mu_) = 0;
  bool direct_copying_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;  // drain the GET, start none
  bool done_ ABSL_GUARDED_BY(mu_) = false;     // the thread has ended
  absl::Status status_ ABSL_GUARDED_BY(mu_);   // why, when it failed
  std::thread thread_;
};

}  // namespace shardq

#endif  // SHARDQ_IO_S3_S3_STREAM_H_
