// Copies a work item to a local file, for tools that need a path (PAI's
// "take() downloads the item to the local machine"): the bytes of a whole
// work as they are (a compressed file stays compressed), or the records of
// a slice, framed as its work frames them (text lines, TFRecord records),
// so that reading the local file whole yields exactly the item's records.
#ifndef SHARDQ_IO_DOWNLOAD_H_
#define SHARDQ_IO_DOWNLOAD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "shardq/work_item.h"
#include "src/io/file.h"

namespace shardq {

// Writes `item` to `dest` (created or truncated; written under a temporary
// name in the same directory and renamed, so `dest` is never partial).
// A slice of a work whose first bytes or name say TFRecord is written as
// TFRecord records, any other slice as text lines ending in '\n'. Table
// items are INVALID_ARGUMENT. Errors of the readers (naming the work) and
// of writing (naming `dest`). Returns the bytes written.
absl::StatusOr<int64_t> DownloadItem(const WorkItem& item, const std::string& dest,
                                     FileSystem* file_system = nullptr);

}  // namespace shardq

#endif  // SHARDQ_IO_DOWNLOAD_H_
