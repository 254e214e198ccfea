#include "shardq/pipeline/record_reader.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "shardq/item_source.h"
#include "shardq/table_reader.h"
#include "shardq/text_line_reader.h"
#include "shardq/tfrecord_reader.h"
#include "shardq/work_item.h"
#include "src/io/text_slice_reader.h"

namespace shardq::pipeline {
namespace {

class TextItemReader final : public RecordReader {
 public:
  TextItemReader(const WorkItem& item, std::unique_ptr<TextSliceReader> slice)
      : item_(item.item), range_(item.range), slice_(std::move(slice)) {}

  absl::StatusOr<bool> Next(Record* record) override {
    int64_t offset = 0;
    absl::StatusOr<bool> more = slice_->Next(&record->value, &offset);
    if (!more.ok() || !*more) return more;
    // A split (tail rebalancing) may have ended the item before this line.
    if (range_ != nullptr && !range_->Claim(offset)) return false;
    record->key = absl::StrCat(item_, ":", offset);
    return true;
  }

  int64_t resume_offset() const override { return slice_->position(); }

 private:
  const std::string item_;
  const std::shared_ptr<SplittableRange> range_;
  const std::unique_ptr<TextSliceReader> slice_;
};

// Hands out one item, once: lets the public TFRecordReader, which reads
// from an ItemSource, read exactly one item (and so keep its handling of
// compression, corruption policies and slice boundaries in one place).
class OneItemSource final : public ItemSource {
 public:
  explicit OneItemSource(const WorkItem& item) : item_(item) {}

  absl::StatusOr<WorkItem> NextItem() override {
    if (handed_out_) {
      return absl::OutOfRangeError(
          absl::StrCat("item '", item_.item, "' already handed out"));
    }
    handed_out_ = true;
    return item_;
  }
  absl::Status ItemDone(const WorkItem&) override { return absl::OkStatus(); }

 private:
  WorkItem item_;
  bool handed_out_ = false;
};

// Hands out one item's records from a public reader's ReadUpTo, a chunk at
// a time.
template <typename R>
class Chunks {
 public:
  // `read` returns the next chunk; OUT_OF_RANGE or an empty chunk is the
  // end of the item.
  template <typename Read>
  absl::StatusOr<bool> Next(R* out, Read read) {
    if (next_ == chunk_.size()) {
      if (exhausted_) return false;
      absl::StatusOr<std::vector<R>> chunk = read();
      if (absl::IsOutOfRange(chunk.status())) chunk = std::vector<R>();
      if (!chunk.ok()) return chunk.status();
      chunk_ = *std::move(chunk);
      next_ = 0;
      if (chunk_.empty()) {
        exhausted_ = true;
        return false;
      }
    }
    *out = std::move(chunk_[next_++]);
    return true;
  }

  // True once the end of the item was reached.
  bool exhausted() const { return exhausted_; }

 private:
  std::vector<R> chunk_;
  size_t next_ = 0;
  bool exhausted_ = false;
};

class TFRecordItemReader final : public RecordReader {
 public:
  // Records read per call of the underlying reader: enough to amortise
  // its per-call work, few enough that large records stay cheap to hold.
  static constexpr int64_t kChunk = 32;

  TFRecordItemReader(const WorkItem& item, const TFRecordReaderOptions& options)
      : reader_(options), source_(item) {}

  absl::StatusOr<bool> Next(Record* record) override {
    return chunks_.Next(record, [this] { return reader_.ReadUpTo(source_, kChunk); });
  }

  int64_t resume_offset() const override { return -1; }

 private:
  TFRecordReader reader_;
  OneItemSource source_;
  Chunks<Record> chunks_;
};

// TableReaders between items. Thread-safe.
class TableReaderPool {
 public:
  explicit TableReaderPool(const TableReaderOptions& options) : options_(options) {}

  std::unique_ptr<TableReader> Borrow() {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        std::unique_ptr<TableReader> reader = std::move(idle_.back());
        idle_.pop_back();
        return reader;
      }
    }
    return std::make_unique<TableReader>(options_);
  }

  // `reader` must have finished its item (no item in progress).
  void Return(std::unique_ptr<TableReader> reader) {
    absl::MutexLock lock(&mu_);
    idle_.push_back(std::move(reader));
  }

 private:
  const TableReaderOptions options_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<TableReader>> idle_ ABSL_GUARDED_BY(mu_);
};

class TableItemReader final : public ItemReader<Row> {
 public:
  // Rows read per call of the TableReader: one query's worth is fetched
  // anyway (TableReaderOptions::batch_rows); this bounds what is held here.
  static constexpr int64_t kChunk = 256;

  TableItemReader(const WorkItem& item, std::shared_ptr<TableReaderPool> pool)
      : pool_(std::move(pool)), reader_(pool_->Borrow()), source_(item) {}

  // A reader that stopped mid-item still holds that item: dropped, not
  // lent again.
  ~TableItemReader() override {
    if (chunks_.exhausted()) pool_->Return(std::move(reader_));
  }

  absl::StatusOr<bool> Next(Row* row) override {
    return chunks_.Next(row, [this] { return reader_->ReadUpTo(source_, kChunk); });
  }

  int64_t resume_offset() const override { return -1; }

 private:
  const std::shared_ptr<TableReaderPool> pool_;
  std::unique_ptr<TableReader> reader_;
  OneItemSource source_;
  Chunks<Row> chunks_;
};

}  // namespace

ItemReaderFactory<Row> TableReaderFactory(TableReaderOptions options) {
  auto pool = std::make_shared<TableReaderPool>(options);
  return [pool](const WorkItem& item)
             -> absl::StatusOr<std::unique_ptr<ItemReader<Row>>> {
    return std::make_unique<TableItemReader>(item, pool);
  };
}

RecordReaderFactory TextReaderFactory() {
  return [](const WorkItem& item)
             -> absl::StatusOr<std::unique_ptr<RecordReader>> {
    absl::StatusOr<std::unique_ptr<TextSliceReader>> slice =
        OpenTextItem(item);
    if (!slice.ok()) return slice.status();
    return std::make_unique<TextItemReader>(item, *std::move(slice));
  };
}

RecordReaderFactory TFRecordReaderFactory(TFRecordReaderOptions options) {
  return [options](const WorkItem& item)
             -> absl::StatusOr<std::unique_ptr<RecordReader>> {
    return std::make_unique<TFRecordItemReader>(item, options);
  };
}

RecordReaderFactory ReaderFactoryFor(RecordFormat format) {
  switch (format) {
    case RecordFormat::kText:
      return TextReaderFactory();
    case RecordFormat::kTFRecord:
      return TFRecordReaderFactory();
  }
  return TextReaderFactory();
}

}  // namespace shardq::pipeline
