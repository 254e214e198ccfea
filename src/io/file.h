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

// Refuses a byte range [start, end) of a file of `size` bytes that no
// longer fits in it: the range was planned on a longer file, so the file
// changed since the plan was made, and reading what is left would return
// a short item as if it were whole. end < 0 means "to the end of the file"
// (then only start is checked). FAILED_PRECONDITION:
//   "'PATH' changed since the plan was made: size S, item ends at E"
// A file that grew is not detected here (an item does not carry the size
// its plan saw): the records appended after planning are not read.
absl::Status CheckRangeInFile(const std::string& path, int64_t size,
                              int64_t start, int64_t end);

// Maps errno of a failed `op` on `path` to the most specific status.
absl::Status ErrnoToStatus(int error, const std::string& op,
                           const std::string& path);

}  // namespace shardq

#endif  // SHARDQ_IO_FILE_H_
