// The ranges item readers open, and the hints of an open to come
// (src/io/item_readers.h): one place for the range a reader opens, so that
// a hint names exactly the range its open asks for.
#include "src/io/item_readers.h"

#include "src/io/file.h"

namespace shardq {

OpenedRange TFRecordOpenedRange(const SliceSpec& spec) {
  return {spec.start.value_or(0), spec.end.value_or(-1)};
}

OpenedRange TextOpenedRange(const SliceSpec& spec) {
  const int64_t start = spec.start.value_or(0);
  return {start > 0 ? start - 1 : 0, spec.end.value_or(-1)};
}

namespace {

void OpenAhead(const WorkItem& item, FileSystem* file_system,
               OpenedRange (*range_of)(const SliceSpec&)) {
  absl::StatusOr<SliceSpec> spec = SpecOf(item);
  if (!spec.ok()) return;  // the open reports it
  const OpenedRange range = range_of(*spec);
  OrDefault(file_system)->WillOpen(spec->work, range.start, range.end);
}

}  // namespace

void OpenTFRecordItemAhead(const WorkItem& item, FileSystem* file_system) {
  OpenAhead(item, file_system, TFRecordOpenedRange);
}

void OpenTextItemAhead(const WorkItem& item, FileSystem* file_system) {
  OpenAhead(item, file_system, TextOpenedRange);
}

}  // namespace shardq
