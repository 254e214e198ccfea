// OpenItemAhead (src/io/item_readers.h): the hint of an item's open to come.
#include <cstdint>

#include "src/io/file.h"
#include "src/io/item_readers.h"

namespace shardq {

void OpenItemAhead(const WorkItem& item, FileSystem* file_system) {
  absl::StatusOr<SliceSpec> spec = SpecOf(item);
  if (!spec.ok()) return;  // the open reports it
  // From the byte before the range: the text reader opens there (that byte
  // decides where the range's first line starts), and a remote file
  // system serves the TFRecord reader's open at the range's start from the
  // same stream (FileSystem::WillOpen allows that one byte).
  const int64_t start = spec->start.value_or(0);
  OrDefault(file_system)->WillOpen(spec->work, start > 0 ? start - 1 : 0,
                                   spec->end.value_or(-1));
}

}  // namespace shardq
