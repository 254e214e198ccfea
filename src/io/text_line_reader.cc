#include "shardq/text_line_reader.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/io/text_slice_reader.h"

namespace shardq {

absl::StatusOr<std::unique_ptr<TextSliceReader>> OpenTextItem(
    const WorkItem& item) {
  absl::StatusOr<SliceSpec> spec = SpecOf(item);
  if (!spec.ok()) return spec.status();
  return TextSliceReader::Open(spec->work, spec->start.value_or(0),
                               spec->end.value_or(-1));
}

TextLineReader::TextLineReader() = default;
TextLineReader::~TextLineReader() = default;

absl::StatusOr<std::vector<Record>> TextLineReader::ReadUpTo(ItemSource& source,
                                                             int64_t n) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReadUpTo: num_records must be >= 1, got ", n));
  }
  if (!deferred_error_.ok()) {
    absl::Status error = std::move(deferred_error_);
    deferred_error_ = absl::OkStatus();
    return error;
  }
  std::vector<Record> out;
  // Records already in `out` may belong to an item just completed: on an
  // error they are returned first and the error on the next call.
  auto fail = [&](absl::Status error) -> absl::StatusOr<std::vector<Record>> {
    if (out.empty()) return error;
    deferred_error_ = std::move(error);
    return out;
  };
  std::string line;
  int64_t offset = 0;
  while (static_cast<int64_t>(out.size()) < n) {
    if (!item_.has_value()) {
      absl::StatusOr<WorkItem> next = source.NextItem();
      if (!next.ok()) {
        if (absl::IsOutOfRange(next.status()) && !out.empty()) return out;
        return fail(next.status());
      }
      absl::StatusOr<std::unique_ptr<TextSliceReader>> slice = OpenTextItem(*next);
      // The item stays held (not done): nothing is skipped silently.
      if (!slice.ok()) return fail(slice.status());
      item_ = *std::move(next);
      slice_ = *std::move(slice);
    }
    absl::StatusOr<bool> more = slice_->Next(&line, &offset);
    if (!more.ok()) return fail(more.status());
    // A split (tail rebalancing) may have ended the item before this line.
    if (*more && !ClaimRecord(*item_, offset)) more = false;
    if (*more) {
      out.push_back(Record{absl::StrCat(item_->item, ":", offset), line});
      ++records_read_;
      continue;
    }
    // Every line of the item has been returned: it is done.
    WorkItem finished = *std::move(item_);
    item_.reset();
    slice_.reset();
    ++items_done_;
    if (absl::Status s = source.ItemDone(finished); !s.ok()) return fail(s);
  }
  // Everything before the next line has been returned to the caller.
  if (item_.has_value()) source.NoteProgress(*item_, slice_->position());
  return out;
}

}  // namespace shardq
