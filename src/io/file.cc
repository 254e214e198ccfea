#include "src/io/file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardq {

absl::Status ErrnoToStatus(int error, const std::string& op,
                           const std::string& path) {
  std::string message = absl::StrCat(op, " '", path, "': ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
    case EINVAL:
      return absl::InvalidArgumentError(message);
    default:
      return absl::UnknownError(message);
  }
}

absl::Status CheckRangeInFile(const std::string& path, int64_t size,
                              int64_t start, int64_t end) {
  if (end > size) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' changed since the plan was made: size ",
                     size, ", item ends at ", end));
  }
  if (end < 0 && start > size) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path, "' changed since the plan was made: size ",
                     size, ", item starts at ", start));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoToStatus(errno, "stat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("work '", path, "' is not a regular file"));
  }
  if (::access(path.c_str(), R_OK) != 0) return ErrnoToStatus(errno, "open", path);
  return static_cast<int64_t>(st.st_size);
}

}  // namespace shardq
