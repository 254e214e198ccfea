#include "shardq/text_line_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "src/io/item_readers.h"
#include "src/io/read_loop.h"
#include "src/io/text_slice_reader.h"

namespace shardq {
namespace {

class TextItemReader final : public ItemReader<Record> {
 public:
  TextItemReader(const WorkItem& item, RecordKeys keys,
                 std::unique_ptr<TextSliceReader> slice)
      : key_prefix_(absl::StrCat(item.item, ":")),
        keys_(keys),
        range_(item.range),
        slice_(std::move(slice)) {}

  absl::StatusOr<bool> Next(Record* record) override {
    int64_t offset = 0;
    absl::StatusOr<bool> more = slice_->Next(&record->value, &offset);
    if (!more.ok() || !*more) return more;
    // A split (tail rebalancing) may have ended the item before this line.
    if (range_ != nullptr && !range_->Claim(offset)) return false;
    if (keys_ == RecordKeys::kFill) {
      SetRecordKey(key_prefix_, offset, &record->key);
    } else {
      record->key.clear();
    }
    return true;
  }

  int64_t resume_offset() const override { return slice_->position(); }

 private:
  const std::string key_prefix_;
  const RecordKeys keys_;
  const std::shared_ptr<SplittableRange> range_;
  const std::unique_ptr<TextSliceReader> slice_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ItemReader<Record>>> OpenTextItem(
    const WorkItem& item, FileSystem* file_system, RecordKeys keys) {
  absl::StatusOr<SliceSpec> spec = SpecOf(item);
  if (!spec.ok()) return spec.status();
  // The byte before the range decides where its first line starts.
  const int64_t start = spec->start.value_or(0);
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      OrDefault(file_system)->OpenForRange(spec->work, start > 0 ? start - 1 : 0,
                                           spec->end.value_or(-1));
  if (!file.ok()) return file.status();
  if (absl::Status s = CheckPlannedVersion(**file, PlannedVersion(*spec)); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckPlannedSize(**file, item.work_size); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<TextSliceReader>> slice = TextSliceReader::Open(
      *std::move(file), spec->start.value_or(0), spec->end.value_or(-1));
  if (!slice.ok()) return slice.status();
  return std::make_unique<TextItemReader>(item, keys, *std::move(slice));
}

TextLineReader::TextLineReader()
    : loop_(std::make_unique<ReadLoop<Record>>(
          [](const WorkItem& item) { return OpenTextItem(item); },
          /*on_item_end=*/nullptr,
          [](const WorkItem& item) { OpenTextItemAhead(item); })) {}
TextLineReader::~TextLineReader() = default;

absl::StatusOr<std::vector<Record>> TextLineReader::ReadUpTo(ItemSource& source,
                                                             int64_t n) {
  return loop_->ReadUpTo(source, n);
}

absl::Status TextLineReader::ReadUpTo(ItemSource& source, int64_t n,
                                      std::vector<Record>* records) {
  return loop_->ReadUpTo(source, n, records);
}

int64_t TextLineReader::records_read() const { return loop_->records(); }
int64_t TextLineReader::items_done() const { return loop_->items_done(); }

}  // namespace shardq
