// Objects of S3-compatible storage as RandomAccessFiles (src/io/file.h):
// the second implementation of the file interface, so every reader reads
// s3://bucket/key works as it reads local files.
//
// An open object is one ranged GET of its first 64 KiB (size and ETag come
// with it, and format sniffs read those bytes); later reads are ranged GETs
// pinned to that ETag (If-Match), so an object replaced while it is read is
// refused, never mixed. Sequential reads inside the range the reader
// announced (WillRead), plus 256 KiB past its end for the last record, are
// fetched in chunks of S3Config::chunk_bytes, and the next
// chunk is fetched in the background while the reader works through the
// current one; reads outside it (a format sniff at offset 0, the look-ahead
// past a slice's end), and every read before WillRead, fetch exactly what
// is asked. Memory: at most two
// chunks per open object.
#ifndef SHARDQ_IO_S3_S3_FILE_H_
#define SHARDQ_IO_S3_S3_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/io/file.h"
#include "src/io/s3/s3_client.h"

namespace shardq {

// Opens s3:// objects through `client` (S3Client::Default() when null, as
// the environment says at each Open). Thread-safe.
class S3FileSystem final : public FileSystem {
 public:
  explicit S3FileSystem(std::shared_ptr<S3Client> client = nullptr)
      : client_(std::move(client)) {}

  // INVALID_ARGUMENT for a name that is not s3://bucket/key; the first
  // GET's errors (NOT_FOUND, PERMISSION_DENIED, ...; see S3Client).
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> Open(
      const std::string& path) override;

  // The process-wide instance FileSystem::Default() sends s3:// names to.
  static S3FileSystem* Default();

 private:
  absl::StatusOr<std::shared_ptr<S3Client>> Client() const;
  const std::shared_ptr<S3Client> client_;
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
