// The hints of an item's open to come (src/io/item_readers.h): the range
// each reader's open asks for, so that the open takes the stream the hint
// started.
#include <cstdint>

#include "src/io/file.h"
#include "src/io/item_readers.h"

namespace shardq {
namespace {

// WillOpen of the item's range, from `before` bytes before its start.
void OpenAhead(const WorkItem& item, FileSystem* file_system, int64_t before) {
  absl::StatusOr<SliceSpec> spec = SpecOf(item);
  if (!spec.ok()) return;  // the open reports it
  const int64_t start = spec->start.value_or(0);
  OrDefault(file_system)->WillOpen(spec->work, start > before ? start - before : 0,
                                   spec->end.value_or(-1));
}

}  // namespace

void OpenTFRecordItemAhead(const WorkItem& item, FileSystem* file_system) {
  OpenAhead(item, file_system, 0);  // TFRecordItemReader::Open: the range
}

void OpenTextItemAhead(const WorkItem& item, FileSystem* file_system) {
  OpenAhead(item, file_system, 1);  // OpenTextItem: from the byte before it
}

}  // namespace shardq
