#include "src/io/download.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/io/format_sniff.h"
#include "src/io/item_readers.h"
#include "src/io/sqlite_table.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace {

constexpr size_t kCopyBytes = 8 << 20;

// The whole work, byte for byte.
absl::StatusOr<int64_t> CopyWhole(const SliceSpec& spec, FileSystem* file_system,
                                  const std::string& tmp) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      OrDefault(file_system)->OpenForRange(spec.work, 0, -1);
  if (!file.ok()) return file.status();
  if (absl::Status s = CheckPlannedVersion(**file, PlannedVersion(spec)); !s.ok()) return s;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoToStatus(errno, "create", tmp);
  AlignedReadBuffer buffer(kCopyBytes);
  int64_t offset = 0;
  absl::Status status;
  while (offset < (*file)->size()) {
    const size_t want = static_cast<size_t>(
        std::min<int64_t>(static_cast<int64_t>(buffer.capacity()), (*file)->size() - offset));
    char* const window = buffer.Window(offset);
    status = ReadFully(**file, offset, want, window);
    if (status.ok()) status = WriteFully(fd, absl::string_view(window, want), tmp);
    if (!status.ok()) break;
    offset += static_cast<int64_t>(want);
  }
  if (::close(fd) != 0 && status.ok()) status = ErrnoToStatus(errno, "close", tmp);
  if (!status.ok()) return status;
  return offset;
}

// The records of a slice, framed again.
absl::StatusOr<int64_t> CopyRecords(const WorkItem& item, const SliceSpec& spec,
                                    FileSystem* file_system, const std::string& tmp) {
  absl::StatusOr<SniffedFormat> format = [&]() -> absl::StatusOr<SniffedFormat> {
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
        OrDefault(file_system)->Open(spec.work);
    if (!file.ok()) return file.status();
    return SniffOpenFile(**file);
  }();
  if (!format.ok()) return format.status();
  // As `shardq cat --type auto` decides: the first bytes, then the name.
  const bool tfrecord = (*format != SniffedFormat::kOther && *format != SniffedFormat::kEmpty) ||
                        HasTFRecordName(spec.work);
  std::unique_ptr<ItemReader<Record>> reader;
  if (tfrecord) {
    absl::StatusOr<std::unique_ptr<TFRecordItemReader>> r =
        TFRecordItemReader::Open(item, TFRecordReaderOptions(), file_system);
    if (!r.ok()) return r.status();
    reader = *std::move(r);
  } else {
    absl::StatusOr<std::unique_ptr<ItemReader<Record>>> r = OpenTextItem(item, file_system);
    if (!r.ok()) return r.status();
    reader = *std::move(r);
  }
  std::unique_ptr<TFRecordWriter> writer;
  std::FILE* text = nullptr;
  if (tfrecord) {
    absl::StatusOr<std::unique_ptr<TFRecordWriter>> w = TFRecordWriter::Create(tmp);
    if (!w.ok()) return w.status();
    writer = *std::move(w);
  } else {
    text = std::fopen(tmp.c_str(), "wb");
    if (text == nullptr) return ErrnoToStatus(errno, "create", tmp);
  }
  Record record;
  int64_t bytes = 0;
  absl::Status status;
  while (true) {
    absl::StatusOr<bool> more = reader->Next(&record);
    if (!more.ok()) {
      status = more.status();
      break;
    }
    if (!*more) break;
    if (tfrecord) {
      status = writer->Write(record.value);
    } else {
      record.value.push_back('\n');
      if (std::fwrite(record.value.data(), 1, record.value.size(), text) !=
          record.value.size()) {
        status = ErrnoToStatus(errno, "write", tmp);
      }
    }
    if (!status.ok()) break;
    bytes += static_cast<int64_t>(record.value.size());
  }
  if (tfrecord) {
    absl::Status closed = writer->Close();
    if (status.ok()) status = closed;
    bytes = writer->size();
  } else if (std::fclose(text) != 0 && status.ok()) {
    status = ErrnoToStatus(errno, "close", tmp);
  }
  if (!status.ok()) return status;
  return bytes;
}

}  // namespace

absl::StatusOr<int64_t> DownloadItem(const WorkItem& item, const std::string& dest,
                                     FileSystem* file_system) {
  absl::StatusOr<SliceSpec> spec = SpecOf(item);
  if (!spec.ok()) return spec.status();
  if (IsTableItem(item.item)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "item '", item.item, "' is a table item: only file items can be downloaded"));
  }
  const std::string tmp = absl::StrCat(dest, ".part");
  absl::StatusOr<int64_t> bytes = spec->whole()
                                      ? CopyWhole(*spec, file_system, tmp)
                                      : CopyRecords(item, *spec, file_system, tmp);
  if (!bytes.ok()) {
    ::unlink(tmp.c_str());
    return bytes.status();
  }
  if (std::rename(tmp.c_str(), dest.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return ErrnoToStatus(error, "rename to", dest);
  }
  return bytes;
}

}  // namespace shardq
