// Small filesystem helpers. All errors name the path. Thread-safe.
#ifndef SHARDQ_IO_FILE_H_
#define SHARDQ_IO_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace shardq {

// Size in bytes of a regular file. NOT_FOUND when it does not exist,
// INVALID_ARGUMENT when it is not a regular file, PERMISSION_DENIED when it
// cannot be read.
absl::StatusOr<int64_t> FileSize(const std::string& path);

// Maps errno of a failed `op` on `path` to the most specific status.
absl::Status ErrnoToStatus(int error, const std::string& op,
                           const std::string& path);

}  // namespace shardq

#endif  // SHARDQ_IO_FILE_H_
