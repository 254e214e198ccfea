// A queue checkpoint on disk: the bytes "SHARDQ-CHECKPOINT-1\n" followed by
// a serialised journal::Checkpoint. Written to a temporary file and renamed,
// so a crash while saving never leaves half a checkpoint.
#ifndef SHARDQ_CLIENT_CHECKPOINT_FILE_H_
#define SHARDQ_CLIENT_CHECKPOINT_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/shardq/journal.pb.h"

namespace shardq {

absl::Status WriteCheckpointFile(const std::string& path, const journal::Checkpoint& checkpoint);

// NOT_FOUND for a missing file; DATA_LOSS naming the file when it is not a
// shardq checkpoint or is truncated.
absl::StatusOr<journal::Checkpoint> ReadCheckpointFile(const std::string& path);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_CHECKPOINT_FILE_H_
