#include "shardq/tfrecord_reader.h"

#include <utility>

#include "src/io/item_readers.h"
#include "src/io/read_loop.h"

namespace shardq {

TFRecordReader::TFRecordReader(TFRecordReaderOptions options)
    : options_(options),
      loop_(std::make_unique<ReadLoop<Record>>(
          [this](const WorkItem& item)
              -> absl::StatusOr<std::unique_ptr<ItemReader<Record>>> {
            absl::StatusOr<std::unique_ptr<TFRecordItemReader>> reader =
                TFRecordItemReader::Open(item, options_);
            if (!reader.ok()) return reader.status();
            return std::unique_ptr<ItemReader<Record>>(*std::move(reader));
          },
          [this](ItemReader<Record>& ended) {
            const TFRecordReadStats& item =
                static_cast<TFRecordItemReader&>(ended).stats();
            finished_.skipped_bytes += item.skipped_bytes;
            finished_.corrupt_regions += item.corrupt_regions;
          },
          [](const WorkItem& item) { OpenTFRecordItemAhead(item); })) {}

TFRecordReader::~TFRecordReader() = default;

absl::StatusOr<std::vector<Record>> TFRecordReader::ReadUpTo(ItemSource& source,
                                                             int64_t n) {
  absl::StatusOr<std::vector<Record>> out = loop_->ReadUpTo(source, n);
  UpdateStats(out.ok() ? &*out : nullptr);
  return out;
}

absl::Status TFRecordReader::ReadUpTo(ItemSource& source, int64_t n,
                                      std::vector<Record>* records) {
  absl::Status status = loop_->ReadUpTo(source, n, records);
  UpdateStats(status.ok() ? records : nullptr);
  return status;
}

void TFRecordReader::UpdateStats(const std::vector<Record>* records) {
  if (records != nullptr) {
    stats_.records += static_cast<int64_t>(records->size());
    for (const Record& record : *records) {
      stats_.bytes += static_cast<int64_t>(record.value.size());
    }
  }
  // Skips so far: the items done, and the one being read (even when it
  // failed: it stays held).
  stats_.skipped_bytes = finished_.skipped_bytes;
  stats_.corrupt_regions = finished_.corrupt_regions;
  if (ItemReader<Record>* current = loop_->current(); current != nullptr) {
    const TFRecordReadStats& item =
        static_cast<TFRecordItemReader*>(current)->stats();
    stats_.skipped_bytes += item.skipped_bytes;
    stats_.corrupt_regions += item.corrupt_regions;
  }
  stats_.items_done = loop_->items_done();
}

}  // namespace shardq
