#include "src/store/commit_mark.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "src/io/crc32c.h"

namespace shardq {
namespace {

// magic(8) | dir id(16) | seq(8, LE) | flags(4, LE) | masked crc32c of the rest(4, LE)
constexpr char kMagic[8] = {'S', 'H', 'Q', 'M', 'A', 'R', 'K', '1'};
constexpr size_t kIdBytes = 16;
constexpr size_t kRecordBytes = 8 + kIdBytes + 8 + 4 + 4;
constexpr uint32_t kCleanFlag = 1;

void Store(char* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t Load(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

std::string Encode(const CommitRecord& r) {
  std::string out(kRecordBytes, '\0');
  char* p = out.data();
  std::memcpy(p, kMagic, 8);
  std::memcpy(p + 8, r.dir_id.data(), std::min(r.dir_id.size(), kIdBytes));
  Store(p + 24, r.seq, 8);
  Store(p + 32, r.clean ? kCleanFlag : 0, 4);
  Store(p + 36, MaskCrc(Crc32c(absl::string_view(p, 36))), 4);
  return out;
}

std::string Errno(absl::string_view what, const std::string& path) {
  return absl::StrCat(what, " '", path, "': ", std::strerror(errno));
}

}  // namespace

absl::StatusOr<std::optional<CommitRecord>> CommitMark::Read(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<CommitRecord>();
    return absl::PermissionDeniedError(Errno("cannot open", path));
  }
  char buf[kRecordBytes + 1];
  const ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  const int read_errno = errno;
  ::close(fd);
  if (n < 0) {
    errno = read_errno;
    return absl::PermissionDeniedError(Errno("cannot read", path));
  }
  if (static_cast<size_t>(n) != kRecordBytes || std::memcmp(buf, kMagic, 8) != 0 ||
      UnmaskCrc(static_cast<uint32_t>(Load(buf + 36, 4))) !=
          Crc32c(absl::string_view(buf, 36))) {
    return absl::DataLossError(absl::StrCat(
        "state dir '", dir, "': ", kFileName, " is damaged (", n, " bytes, ",
        static_cast<size_t>(n) == kRecordBytes ? "bad magic or checksum" : "wrong size",
        "; expected a ", kRecordBytes, "-byte record)"));
  }
  CommitRecord r;
  r.dir_id.assign(buf + 8, kIdBytes);
  r.seq = Load(buf + 24, 8);
  r.clean = (Load(buf + 32, 4) & kCleanFlag) != 0;
  return std::optional<CommitRecord>(std::move(r));
}

absl::StatusOr<std::unique_ptr<CommitMark>> CommitMark::Create(const std::string& dir,
                                                               const CommitRecord& record) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::PermissionDeniedError(Errno("cannot create", path));
  std::unique_ptr<CommitMark> mark(new CommitMark(path, fd));
  if (absl::Status s = mark->Write(record); !s.ok()) return s;
  if (absl::Status s = mark->Sync(); !s.ok()) return s;
  // The new name must be durable before state.db exists.
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0 || ::fsync(dir_fd) != 0) {
    absl::Status s = absl::InternalError(Errno("cannot fsync the directory", dir));
    if (dir_fd >= 0) ::close(dir_fd);
    return s;
  }
  ::close(dir_fd);
  return mark;
}

absl::StatusOr<std::unique_ptr<CommitMark>> CommitMark::OpenExisting(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return absl::PermissionDeniedError(Errno("cannot open", path));
  return std::unique_ptr<CommitMark>(new CommitMark(path, fd));
}

CommitMark::~CommitMark() { ::close(fd_); }

absl::Status CommitMark::Write(const CommitRecord& record) {
  const std::string bytes = Encode(record);
  const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), 0);
  if (n != static_cast<ssize_t>(bytes.size())) {
    if (n >= 0) errno = EIO;
    return absl::InternalError(Errno("cannot write", path_));
  }
  return absl::OkStatus();
}

absl::Status CommitMark::Sync() {
  if (::fdatasync(fd_) != 0) return absl::InternalError(Errno("cannot fsync", path_));
  return absl::OkStatus();
}

std::string CommitMark::NewDirId() {
  std::random_device device;
  std::string id(kIdBytes, '\0');
  for (size_t i = 0; i < kIdBytes; i += 4) {
    const uint32_t v = device();
    std::memcpy(id.data() + i, &v, 4);
  }
  return id;
}

std::string CommitMark::IdToHex(const std::string& id) { return absl::BytesToHexString(id); }

}  // namespace shardq
