// The one ReadUpTo loop of the public readers (TextLineReader,
// TFRecordReader, TableReader): take items from an ItemSource, read each
// through its per-item reader (src/io/item_readers.h), complete it once
// every record has been returned, report progress. Not thread-safe.
#ifndef SHARDQ_IO_READ_LOOP_H_
#define SHARDQ_IO_READ_LOOP_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "shardq/item_reader.h"
#include "shardq/item_source.h"
#include "shardq/work_item.h"

namespace shardq {

template <typename R>
class ReadLoop {
 public:
  using Opener =
      std::function<absl::StatusOr<std::unique_ptr<ItemReader<R>>>(
          const WorkItem&)>;
  // Called with an item's reader when its last record has been returned,
  // before the reader is dropped.
  using OnItemEnd = std::function<void(ItemReader<R>&)>;

  // Called with the item the source will most likely hand out next
  // (ItemSource::PeekNextItem), once per item being read, so that the
  // item's bytes start on their way (a remote file's first GET) while the
  // one before is read.
  using OpenAhead = std::function<void(const WorkItem&)>;

  explicit ReadLoop(Opener open, OnItemEnd on_item_end = nullptr,
                    OpenAhead open_ahead = nullptr)
      : open_(std::move(open)),
        on_item_end_(std::move(on_item_end)),
        open_ahead_(std::move(open_ahead)) {}

  // The contract of the public readers' ReadUpTo: up to n (>= 1) records,
  // fewer only at end of input, OUT_OF_RANGE when the source is exhausted
  // and nothing was read. An error comes after the records read before it
  // (by the next call) and then again on every later call while its item
  // is held: the failing item stays held, not done.
  absl::StatusOr<std::vector<R>> ReadUpTo(ItemSource& source, int64_t n) {
    std::vector<R> out;
    absl::Status s = ReadUpTo(source, n, &out);
    if (!s.ok()) return s;
    return out;
  }

  // As above, into *out (whose size becomes the number of records; empty
  // with a non-OK status). The records already in *out are overwritten in
  // place, so that a reader that reuses its strings' capacity (Next fills
  // a record by assignment) allocates nothing per record when the caller
  // passes the same vector back.
  absl::Status ReadUpTo(ItemSource& source, int64_t n, std::vector<R>* out) {
    size_t got = 0;
    // Keeps the records returned, dropping the others; OK.
    auto finish = [&] {
      out->resize(got);
      return absl::OkStatus();
    };
    auto fail = [&](absl::Status error) {
      if (got == 0) {
        out->clear();
        return error;
      }
      deferred_error_ = std::move(error);
      return finish();
    };
    if (n < 1) {
      out->clear();
      return absl::InvalidArgumentError(
          absl::StrCat("ReadUpTo: num_records must be >= 1, got ", n));
    }
    if (!deferred_error_.ok()) {
      out->clear();
      return std::exchange(deferred_error_, absl::OkStatus());
    }
    if (absl::Status open = source.CheckOpen(); !open.ok()) {
      // Closed: the item being read went back (someone else reads the
      // rest), so not one more record of it.
      reader_.reset();
      item_.reset();
      out->clear();
      return open;
    }
    if (!item_error_.ok()) {
      out->clear();
      return item_error_;
    }
    const size_t want = static_cast<size_t>(std::min<int64_t>(n, 1024));
    if (out->capacity() < want) out->reserve(want);
    while (static_cast<int64_t>(got) < n) {
      if (reader_ == nullptr) {
        absl::StatusOr<WorkItem> next = source.NextItem();
        if (!next.ok()) {
          if (absl::IsOutOfRange(next.status()) && got > 0) return finish();
          return fail(next.status());
        }
        absl::StatusOr<std::unique_ptr<ItemReader<R>>> opened = open_(*next);
        // The item stays held (not done): nothing is skipped silently.
        if (!opened.ok()) return fail(opened.status());
        item_ = *std::move(next);
        reader_ = *std::move(opened);
        item_records_ = 0;
        opened_ahead_ = false;
        OpenNextAhead(source);
      }
      if (got == out->size()) out->emplace_back();
      absl::StatusOr<bool> more = reader_->Next(&(*out)[got]);
      if (!more.ok()) {
        item_error_ = more.status();
        return fail(more.status());
      }
      if (*more) {
        ++got;
        ++records_;
        ++item_records_;
        continue;
      }
      // Every record of the item has been returned: it is done.
      if (on_item_end_) on_item_end_(*reader_);
      reader_.reset();
      WorkItem finished = *std::move(item_);
      finished.records = item_records_;  // reported with the completion
      item_.reset();
      ++items_done_;
      if (absl::Status s = source.ItemDone(finished); !s.ok()) return fail(s);
    }
    // Everything before the next record has been returned to the caller.
    if (reader_ != nullptr && reader_->resume_offset() >= 0) {
      // (NoteReturned notes the progress too.)
      source.NoteReturned(*item_, reader_->resume_offset(), item_records_, item_records_);
    }
    // The next item may have arrived since this one was opened.
    OpenNextAhead(source);
    return finish();
  }

  // The reader of the item being read; null between items.
  ItemReader<R>* current() const { return reader_.get(); }
  int64_t records() const { return records_; }
  int64_t items_done() const { return items_done_; }

 private:
  // Once per item being read: hints the item after it, when the source
  // has it at hand.
  void OpenNextAhead(ItemSource& source) {
    if (!open_ahead_ || reader_ == nullptr || opened_ahead_) return;
    std::optional<WorkItem> next = source.PeekNextItem();
    if (!next.has_value()) return;
    opened_ahead_ = true;
    open_ahead_(*next);
  }

  const Opener open_;
  const OnItemEnd on_item_end_;
  const OpenAhead open_ahead_;
  bool opened_ahead_ = false;  // for the item being read
  std::optional<WorkItem> item_;
  std::unique_ptr<ItemReader<R>> reader_;
  absl::Status deferred_error_;
  absl::Status item_error_;  // the held item's failure; sticky
  int64_t records_ = 0;
  int64_t item_records_ = 0;  // returned from the item being read
  int64_t items_done_ = 0;
};

}  // namespace shardq

#endif  // SHARDQ_IO_READ_LOOP_H_
