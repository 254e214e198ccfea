// A queue checkpoint on disk: the bytes "SHARDQ-CHECKPOINT-1\n" followed by
// a serialised journal::Checkpoint. Written to a temporary file, fsynced,
// renamed, and the directory fsynced, so a crash while saving never leaves
// half a checkpoint.
//
// Framing: the message's bytes begin with two fields that are not in
// journal::Checkpoint (numbers 14 and 15 are reserved for them), written
// first: field 14, a fixed64, the length of the rest, and field 15, a
// fixed32, its CRC32C. A truncated or damaged file is then DATA_LOSS on
// reading, where the message alone might still parse (a cut at a field
// boundary) and silently lose completions. The bytes after the header stay
// one valid Checkpoint message (a protobuf parser skips unknown fields), and
// a file without the framing (written before it, or by hand) is read as the
// message alone.
#ifndef SHARDQ_CLIENT_CHECKPOINT_FILE_H_
#define SHARDQ_CLIENT_CHECKPOINT_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/shardq/journal.pb.h"

namespace shardq {

absl::Status WriteCheckpointFile(const std::string& path, const journal::Checkpoint& checkpoint);

// NOT_FOUND for a missing file; DATA_LOSS naming the file when it is not a
// shardq checkpoint, is truncated (its framing says how far) or fails its
// checksum.
absl::StatusOr<journal::Checkpoint> ReadCheckpointFile(const std::string& path);

}  // namespace shardq

#endif  // SHARDQ_CLIENT_CHECKPOINT_FILE_H_
