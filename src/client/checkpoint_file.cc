#include "src/client/checkpoint_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "src/io/crc32c.h"
#include "src/io/file.h"
#include "src/io/little_endian.h"

namespace shardq {
namespace {

constexpr absl::string_view kMagic = "SHARDQ-CHECKPOINT-1\n";

// The framing fields (see checkpoint_file.h): the tags of field 14 as a
// fixed64 and of field 15 as a fixed32, and the bytes they take.
constexpr char kLengthTag = (14 << 3) | 1;
constexpr char kCrcTag = (15 << 3) | 5;
constexpr size_t kFramingBytes = 1 + 8 + 1 + 4;
// A bare message (no framing) starts with its config: field 1, a message.
constexpr char kConfigTag = (1 << 3) | 2;

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

absl::Status WriteCheckpointFile(const std::string& path, const journal::Checkpoint& checkpoint) {
  std::string payload;
  if (!checkpoint.SerializeToString(&payload)) {
    return absl::InternalError(absl::StrCat("cannot serialise the checkpoint for '", path, "'"));
  }
  std::string bytes(kMagic);
  bytes.push_back(kLengthTag);
  char length[8];
  EncodeLittleEndian64(payload.size(), length);
  bytes.append(length, sizeof(length));
  bytes.push_back(kCrcTag);
  AppendLittleEndian32(Crc32c(payload), &bytes);
  bytes += payload;

  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create checkpoint", tmp);
  absl::Status written = WriteFully(fd, bytes, tmp);
  if (written.ok() && ::fsync(fd) != 0) written = ErrnoToStatus(errno, "fsync checkpoint", tmp);
  if (::close(fd) != 0 && written.ok()) written = ErrnoToStatus(errno, "close checkpoint", tmp);
  if (!written.ok()) {
    std::remove(tmp.c_str());
    return written;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    return ErrnoToStatus(error, "rename checkpoint to", path);
  }
  // The rename itself survives a crash only once the directory is synced.
  const std::string dir = DirectoryOf(path);
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return ErrnoToStatus(errno, "open the checkpoint's directory", dir);
  const bool synced = ::fsync(dir_fd) == 0;
  const int error = errno;
  ::close(dir_fd);
  // (A file system that cannot sync a directory says EINVAL: nothing to do.)
  if (!synced && error != EINVAL) {
    return ErrnoToStatus(error, "fsync the checkpoint's directory", dir);
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
  absl::string_view payload(bytes);
  payload.remove_prefix(kMagic.size());
  if (payload.empty()) {
    return absl::DataLossError(
        absl::StrCat("checkpoint '", path, "' is truncated: nothing follows its header"));
  }
  if (payload.front() == kLengthTag) {
    if (payload.size() < kFramingBytes) {
      return absl::DataLossError(
          absl::StrCat("checkpoint '", path, "' is truncated inside its framing"));
    }
    if (payload[9] != kCrcTag) {
      return absl::DataLossError(
          absl::StrCat("checkpoint '", path, "' is corrupt: its framing is damaged"));
    }
    const uint64_t length = DecodeLittleEndian64(payload.data() + 1);
    const uint32_t crc = DecodeLittleEndian32(payload.data() + 10);
    payload.remove_prefix(kFramingBytes);
    if (payload.size() != length) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint '", path, "' is ", payload.size() < length ? "truncated" : "too long",
          ": its header says ", length, " bytes of checkpoint, the file holds ", payload.size()));
    }
    if (Crc32c(payload) != crc) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint '", path, "' is corrupt: checksum mismatch (stored 0x", absl::Hex(crc),
          ", computed 0x", absl::Hex(Crc32c(payload)), ")"));
    }
  } else if (payload.front() != kConfigTag) {
    // Neither framed nor a bare message (which starts with its config).
    return absl::DataLossError(absl::StrCat(
        "checkpoint '", path, "' is corrupt: it starts with byte 0x",
        absl::Hex(static_cast<unsigned char>(payload.front())), " after its header"));
  }
  // Else written before the framing (or by hand): the message alone.
  journal::Checkpoint checkpoint;
  if (!checkpoint.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "' is corrupt or truncated"));
  }
  return checkpoint;
}

}  // namespace shardq
