#include "shardq/tfrecord_reader.h"

#include <cstdio>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shardq/slice.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/compression.h"
#include "src/io/file.h"
#include "src/io/tfrecord.h"

namespace shardq {
namespace tfrecord_internal {
namespace {

absl::StatusOr<FileCompression> ResolveCompression(
    const std::string& path, TFRecordReaderOptions::Compression compression) {
  switch (compression) {
    case TFRecordReaderOptions::Compression::kNone:
      return FileCompression::kNone;
    case TFRecordReaderOptions::Compression::kGzip:
      return FileCompression::kGzip;
    case TFRecordReaderOptions::Compression::kZlib:
      return FileCompression::kZlib;
    case TFRecordReaderOptions::Compression::kAuto:
      break;
  }
  return DetectCompression(path);
}

// A compressed file is read whole: with no range (what the planner gives
// it), a range covering exactly every byte of the file, or [0, 1) (what
// planners before issue 15 gave it; such items may sit in state dirs and
// checkpoints). A range ending past the file's end means the file changed
// since the plan was made.
absl::Status CheckWholeCompressedFile(const SliceSpec& spec,
                                      FileCompression compression) {
  if (spec.whole()) return absl::OkStatus();
  absl::StatusOr<int64_t> size = FileSize(spec.work);
  if (!size.ok()) return size.status();
  const int64_t start = spec.start.value_or(0);
  const int64_t end = spec.end.value_or(-1);
  if (absl::Status s = CheckRangeInFile(spec.work, *size, start, end);
      !s.ok()) {
    return s;
  }
  if (start == 0 && (end == 1 || end == *size || end < 0)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", spec.work, "' is ", CompressionName(compression),
      "-compressed and cannot be cut into byte ranges, but the item asks for [",
      start, ", ", end, ") of its ", *size,
      " bytes: give the whole file (no range, or start=0&end=", *size, ")"));
}

}  // namespace

// The records of one item: a byte range of a plain file, or a whole
// compressed file.
class ItemRecords {
 public:
  static absl::StatusOr<std::unique_ptr<ItemRecords>> Open(
      const WorkItem& item, const TFRecordReaderOptions& options) {
    absl::StatusOr<SliceSpec> spec = SpecOf(item);
    if (!spec.ok()) return spec.status();
    absl::StatusOr<FileCompression> compression =
        ResolveCompression(spec->work, options.compression);
    if (!compression.ok()) return compression.status();
    TFRecordReadOptions read_options;
    read_options.on_corrupt =
        options.on_corrupt == TFRecordReaderOptions::OnCorrupt::kSkip
            ? TFRecordReadOptions::kSkip
            : TFRecordReadOptions::kFail;
    read_options.buffer_bytes = options.buffer_bytes;
    auto records = std::unique_ptr<ItemRecords>(new ItemRecords());
    if (*compression == FileCompression::kNone) {
      absl::StatusOr<std::unique_ptr<TFRecordSliceReader>> plain =
          TFRecordSliceReader::Open(spec->work, spec->start.value_or(0),
                                    spec->end.value_or(-1), read_options);
      if (!plain.ok()) return plain.status();
      records->plain_ = *std::move(plain);
      return records;
    }
    if (absl::Status s = CheckWholeCompressedFile(*spec, *compression);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<std::unique_ptr<CompressedTFRecordReader>> compressed =
        CompressedTFRecordReader::Open(spec->work, *compression, read_options);
    if (!compressed.ok()) return compressed.status();
    records->compressed_ = *std::move(compressed);
    return records;
  }

  absl::StatusOr<bool> Next(std::string* record, int64_t* offset) {
    return plain_ != nullptr ? plain_->Next(record, offset)
                             : compressed_->Next(record, offset);
  }

  const TFRecordReadStats& stats() const {
    return plain_ != nullptr ? plain_->stats() : compressed_->stats();
  }

  // Offsets are file offsets within the item's range (not of a compressed
  // file read whole), so they can report progress.
  bool has_file_offsets() const { return plain_ != nullptr; }

 private:
  ItemRecords() = default;
  std::unique_ptr<TFRecordSliceReader> plain_;
  std::unique_ptr<CompressedTFRecordReader> compressed_;
};

}  // namespace tfrecord_internal

TFRecordReader::TFRecordReader(TFRecordReaderOptions options)
    : options_(options) {}
TFRecordReader::~TFRecordReader() = default;

absl::Status TFRecordReader::FinishItem(ItemSource& source) {
  const TFRecordReadStats& item_stats = records_->stats();
  if (item_stats.corrupt_regions > 0 && options_.log_skips) {
    std::fprintf(stderr,
                 "shardq: skipped %lld corrupt region(s), %lld bytes, in '%s'\n",
                 static_cast<long long>(item_stats.corrupt_regions),
                 static_cast<long long>(item_stats.skipped_bytes),
                 item_->item.c_str());
  }
  WorkItem finished = *std::move(item_);
  item_.reset();
  records_.reset();
  ++stats_.items_done;
  return source.ItemDone(finished);
}

absl::StatusOr<std::vector<Record>> TFRecordReader::ReadUpTo(ItemSource& source,
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
  // Records already in `out` are returned first, the error on the next call.
  auto fail = [&](absl::Status error) -> absl::StatusOr<std::vector<Record>> {
    if (out.empty()) return error;
    deferred_error_ = std::move(error);
    return out;
  };
  std::string data;
  int64_t offset = 0;
  int64_t consumed = -1;  // end of the last record returned from item_
  while (static_cast<int64_t>(out.size()) < n) {
    if (!item_.has_value()) {
      absl::StatusOr<WorkItem> next = source.NextItem();
      if (!next.ok()) {
        if (absl::IsOutOfRange(next.status()) && !out.empty()) return out;
        return fail(next.status());
      }
      absl::StatusOr<std::unique_ptr<tfrecord_internal::ItemRecords>> opened =
          tfrecord_internal::ItemRecords::Open(*next, options_);
      // The item stays held (not done): nothing is skipped silently.
      if (!opened.ok()) return fail(opened.status());
      item_ = *std::move(next);
      records_ = *std::move(opened);
    }
    const TFRecordReadStats before = records_->stats();
    absl::StatusOr<bool> more = records_->Next(&data, &offset);
    const TFRecordReadStats& after = records_->stats();
    stats_.skipped_bytes += after.skipped_bytes - before.skipped_bytes;
    stats_.corrupt_regions += after.corrupt_regions - before.corrupt_regions;
    if (!more.ok()) return fail(more.status());
    // A split (tail rebalancing) may have ended the item before this record.
    // A compressed file's offsets are in its decompressed stream, not the
    // item's byte range: its records are never claimed, so it is never
    // split and always read whole.
    if (*more && records_->has_file_offsets() && !ClaimRecord(*item_, offset)) {
      more = false;
    }
    if (*more) {
      stats_.records += 1;
      stats_.bytes += static_cast<int64_t>(data.size());
      // Length (8), its CRC (4), the data, its CRC (4).
      consumed = offset + 16 + static_cast<int64_t>(data.size());
      out.push_back(Record{absl::StrCat(item_->item, ":", offset), std::move(data)});
      continue;
    }
    // Every record of the item has been returned: it is done.
    consumed = -1;
    if (absl::Status s = FinishItem(source); !s.ok()) return fail(s);
  }
  // Everything before the next record has been returned to the caller.
  if (item_.has_value() && consumed >= 0 && records_->has_file_offsets()) {
    source.NoteProgress(*item_, consumed);
  }
  return out;
}

}  // namespace shardq
