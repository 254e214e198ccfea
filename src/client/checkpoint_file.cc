#include "src/client/checkpoint_file.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/io/file.h"

namespace shardq {
namespace {

constexpr absl::string_view kMagic = "SHARDQ-CHECKPOINT-1\n";

}  // namespace

absl::Status WriteCheckpointFile(const std::string& path, const journal::Checkpoint& checkpoint) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write '", tmp, "'"));
    out << kMagic;
    if (!checkpoint.SerializeToOstream(&out) || !out.flush()) {
      return absl::InternalError(absl::StrCat("writing checkpoint '", tmp, "' failed"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoToStatus(errno, "rename checkpoint to", path);
  }
  return absl::OkStatus();
}

absl::StatusOr<journal::Checkpoint> ReadCheckpointFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoToStatus(errno, "open checkpoint", path);
  std::stringstream contents;
  contents << in.rdbuf();
  std::string bytes = contents.str();
  if (!absl::StartsWith(bytes, kMagic)) {
    return absl::DataLossError(absl::StrCat("'", path, "' is not a shardq checkpoint"));
  }
  journal::Checkpoint checkpoint;
  if (!checkpoint.ParseFromArray(bytes.data() + kMagic.size(),
                                 static_cast<int>(bytes.size() - kMagic.size()))) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "' is corrupt or truncated"));
  }
  return checkpoint;
}

}  // namespace shardq
