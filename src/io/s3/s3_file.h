// Objects of S3-compatible storage as RandomAccessFiles (src/io/file.h):
// the second implementation of the file interface, so every reader reads
// s3://bucket/key works as it reads local files.
//
// A reader that says which range it reads (OpenForRange, or WillRead) gets
// it as one streaming ranged GET (S3RangeStream) of the range plus 256 KiB
// past its end (the readers' look-ahead for the last record), split only
// where it is longer than S3Config::chunk_bytes; for OpenForRange that GET
// is also the request that opens the object (its answer gives the size and
// ETag). A plain Open is one ranged GET of the object's first 64 KiB.
// Every later request is pinned to the ETag the object had when it was
// opened (If-Match), so an object replaced while it is read is refused,
// never mixed. Reads outside the announced range fetch exactly what they
// ask, except that the first bytes of an object (what a format sniff
// reads) are remembered by name and ETag for the next slice of the same
// object. Memory: at most min(chunk_bytes, 4 MiB) buffered per open object.
#ifndef SHARDQ_IO_S3_S3_FILE_H_
#define SHARDQ_IO_S3_S3_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "src/io/file.h"
#include "src/io/s3/s3_client.h"

namespace shardq {

// Opens s3:// objects through `client` (S3Client::Default() when null, as
// the environment says at each Open). Thread-safe.
class S3HeadCache;     // s3_file.cc
class S3OpenedAhead;   // s3_file.cc

class S3FileSystem final : public FileSystem {
 public:
  // Streams WillOpen keeps waiting at most, and for how long (by default).
  static constexpr size_t kMaxOpenedAhead = 8;
  static constexpr absl::Duration kOpenedAheadLife = absl::Seconds(10);

  // `opened_ahead_life`: how long a stream WillOpen started waits for its
  // open (tests lengthen it; see WillOpen).
  explicit S3FileSystem(std::shared_ptr<S3Client> client = nullptr,
                        absl::Duration opened_ahead_life = kOpenedAheadLife);
  ~S3FileSystem() override;

  // INVALID_ARGUMENT for a name that is not s3://bucket/key; the first
  // GET's errors (NOT_FOUND, PERMISSION_DENIED, ...; see S3Client).
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path) override;

  // The object, opened by the first GET of [start, end) plus the
  // look-ahead, which goes on streaming in the background. Errors as Open.
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRange(
      const std::string& path, int64_t start, int64_t end) override;

  // Starts the first GET of OpenForRange(path, start, end) now, for such
  // an OpenForRange that comes soon (the next item of a reader): it then
  // takes this stream, already answered and filling, instead of starting
  // its own (also for an `end` that moved closer since, as a split does).
  // At most kMaxOpenedAhead wait at once (more hints start nothing),
  // each for at most the opened-ahead life, each buffering at most what an open
  // object does. A stream whose first answer failed is dropped by the
  // open, which asks again, so errors are the open's own. Nothing when
  // the client's config turns it off (S3Config::open_ahead).
  void WillOpen(const std::string& path, int64_t start, int64_t end) override;
  // The object as `info` (from a listing or a HEAD: its size and ETag)
  // says it is, opened without a request of its own: every read is pinned
  // to that ETag, so an object replaced since is refused at the first read
  // (FAILED_PRECONDITION), and a read of its first bytes may be answered
  // by the head cache. INVALID_ARGUMENT for a name that is not
  // s3://bucket/key.
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenListed(
      const std::string& path, const S3ObjectInfo& info);

  // The process-wide instance FileSystem::Default() sends s3:// names to.
  static S3FileSystem* Default();

 private:
  absl::StatusOr<std::shared_ptr<S3Client>> Client() const;
  const std::shared_ptr<S3Client> client_;
  const std::shared_ptr<S3HeadCache> heads_;
  const std::unique_ptr<S3OpenedAhead> ahead_;
};

// Size and ETag of an object (a HEAD), for planning. Errors as Open.
absl::StatusOr<S3ObjectInfo> S3Stat(const std::string& url);

// The objects a pattern "s3://bucket/prefix/*.tfrecord" names (listed,
// matched with KeyMatches, sorted by key), as s3:// names with their sizes
// and ETags. NOT_FOUND naming the pattern when none match.
absl::StatusOr<std::vector<std::pair<std::string, S3ObjectInfo>>> S3Glob(
    const std::string& pattern);

}  // namespace shardq

#endif  // SHARDQ_IO_S3_S3_FILE_H_
