#include "shardq/pipeline/record_reader.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "shardq/work_item.h"
#include "src/io/item_readers.h"

namespace shardq::pipeline {
namespace {

// Open tables (with their rank indexes) between items. Thread-safe.
class TableCachePool {
 public:
  explicit TableCachePool(const TableReaderOptions& options) : options_(options) {}

  std::unique_ptr<TableCache> Borrow() {
    {
      absl::MutexLock lock(&mu_);
      if (!idle_.empty()) {
        std::unique_ptr<TableCache> cache = std::move(idle_.back());
        idle_.pop_back();
        return cache;
      }
    }
    return std::make_unique<TableCache>(options_.max_open_tables);
  }

  // No reader of `cache` may be open.
  void Return(std::unique_ptr<TableCache> cache) {
    absl::MutexLock lock(&mu_);
    idle_.push_back(std::move(cache));
  }

  int64_t batch_rows() const { return options_.batch_rows; }

 private:
  const TableReaderOptions options_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<TableCache>> idle_ ABSL_GUARDED_BY(mu_);
};

// The rows of one table item, read through tables borrowed from the pool
// and given back once the item has ended.
class PooledTableReader final : public ItemReader<Row> {
 public:
  PooledTableReader(const WorkItem& item, std::shared_ptr<TableCachePool> pool)
      : item_(item), pool_(std::move(pool)), tables_(pool_->Borrow()) {}

  // A reader that stopped mid-item drops its tables rather than lend them
  // again in an unknown state.
  ~PooledTableReader() override {
    reader_.reset();  // before the tables it reads
    if (ended_) pool_->Return(std::move(tables_));
  }

  absl::StatusOr<bool> Next(Row* row) override {
    if (reader_ == nullptr) {  // opened lazily: errors come from Next
      absl::StatusOr<std::unique_ptr<ItemReader<Row>>> reader =
          OpenTableItem(item_, tables_.get(), pool_->batch_rows());
      if (!reader.ok()) return reader.status();
      reader_ = *std::move(reader);
    }
    absl::StatusOr<bool> more = reader_->Next(row);
    if (more.ok() && !*more) ended_ = true;
    return more;
  }

  int64_t resume_offset() const override {
    return reader_ != nullptr ? reader_->resume_offset() : -1;
  }

 private:
  const WorkItem item_;
  const std::shared_ptr<TableCachePool> pool_;
  std::unique_ptr<TableCache> tables_;
  std::unique_ptr<ItemReader<Row>> reader_;
  bool ended_ = false;
};

}  // namespace

ItemReaderFactory<Row> TableReaderFactory(TableReaderOptions options) {
  auto pool = std::make_shared<TableCachePool>(options);
  return [pool](const WorkItem& item)
             -> absl::StatusOr<std::unique_ptr<ItemReader<Row>>> {
    return std::make_unique<PooledTableReader>(item, pool);
  };
}

RecordReaderFactory TextReaderFactory() { return TextReaderFactory(RecordKeys::kFill); }

RecordReaderFactory TFRecordReaderFactory(TFRecordReaderOptions options) {
  return TFRecordReaderFactory(options, RecordKeys::kFill);
}

RecordReaderFactory TextReaderFactory(RecordKeys keys) {
  return [keys](const WorkItem& item) { return OpenTextItem(item, nullptr, keys); };
}

RecordReaderFactory TFRecordReaderFactory(TFRecordReaderOptions options, RecordKeys keys) {
  return [options, keys](const WorkItem& item)
             -> absl::StatusOr<std::unique_ptr<RecordReader>> {
    absl::StatusOr<std::unique_ptr<TFRecordItemReader>> reader =
        TFRecordItemReader::Open(item, options, nullptr, keys);
    if (!reader.ok()) return reader.status();
    return std::unique_ptr<RecordReader>(*std::move(reader));
  };
}

std::function<void(const WorkItem&)> TextOpenAhead() {
  return [](const WorkItem& item) { OpenTextItemAhead(item); };
}

std::function<void(const WorkItem&)> TFRecordOpenAhead() {
  return [](const WorkItem& item) { OpenTFRecordItemAhead(item); };
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
