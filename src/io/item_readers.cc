#include "src/io/item_readers.h"

#include <cstdio>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/compression.h"
#include "src/log/log.h"

namespace shardq {
namespace {

FileCompression ChosenCompression(TFRecordReaderOptions::Compression c) {
  switch (c) {
    case TFRecordReaderOptions::Compression::kGzip:
      return FileCompression::kGzip;
    case TFRecordReaderOptions::Compression::kZlib:
      return FileCompression::kZlib;
    default:
      return FileCompression::kNone;
  }
}

// A compressed file is read whole: with no range (what the planner gives
// it), a range covering exactly every byte of the file, or [0, 1) (what
// planners before issue 15 gave it; such items may sit in state dirs and
// checkpoints). A range ending past the file's end means the file changed
// since the plan was made.
absl::Status CheckWholeCompressedFile(const SliceSpec& spec, int64_t size,
                                      FileCompression compression) {
  if (spec.whole()) return absl::OkStatus();
  const int64_t start = spec.start.value_or(0);
  const int64_t end = spec.end.value_or(-1);
  if (absl::Status s = CheckRangeInFile(spec.work, size, start, end); !s.ok()) {
    return s;
  }
  if (start == 0 && (end == 1 || end == size || end < 0)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", spec.work, "' is ", CompressionName(compression),
      "-compressed and cannot be cut into byte ranges, but the item asks for [",
      start, ", ", end, ") of its ", size,
      " bytes: give the whole file (no range, or start=0&end=", size, ")"));
}

}  // namespace

// The records of a TFRecord item: a byte range of a plain file, or a whole
// compressed file.
class TFRecordItemReader::Records {
 public:
  std::unique_ptr<TFRecordSliceReader> plain;
  std::unique_ptr<CompressedTFRecordReader> compressed;

  absl::StatusOr<bool> Next(std::string* data, int64_t* offset) {
    return plain != nullptr ? plain->Next(data, offset)
                            : compressed->Next(data, offset);
  }
  const TFRecordReadStats& stats() const {
    return plain != nullptr ? plain->stats() : compressed->stats();
  }
};

absl::StatusOr<std::unique_ptr<TFRecordItemReader>> TFRecordItemReader::Open(
    const WorkItem& item, const TFRecordReaderOptions& options,
    FileSystem* file_system, RecordKeys keys) {
  absl::StatusOr<SliceSpec> spec = SpecOf(item);
  if (!spec.ok()) return spec.status();
  // One open, for the item's range (a remote file starts fetching it): the
  // compression is judged from the open file's first bytes.
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      OrDefault(file_system)->OpenForRange(spec->work, spec->start.value_or(0),
                                           spec->end.value_or(-1));
  if (!file.ok()) return file.status();
  if (absl::Status s = CheckPlannedVersion(**file, PlannedVersion(*spec)); !s.ok()) {
    return s;
  }
  FileCompression compression = ChosenCompression(options.compression);
  if (options.compression == TFRecordReaderOptions::Compression::kAuto) {
    absl::StatusOr<FileCompression> detected = DetectCompression(**file);
    if (!detected.ok()) return detected.status();
    compression = *detected;
  }
  TFRecordReadOptions read_options;
  read_options.on_corrupt =
      options.on_corrupt == TFRecordReaderOptions::OnCorrupt::kSkip
          ? TFRecordReadOptions::kSkip
          : TFRecordReadOptions::kFail;
  read_options.buffer_bytes = options.buffer_bytes;
  read_options.file_system = file_system;
  auto records = std::make_unique<Records>();
  if (compression == FileCompression::kNone) {
    // Not for a compressed file, read whole: planners before issue 15 gave
    // it the range [0, 1), whose "planned size" 1 means nothing.
    if (absl::Status s = CheckPlannedSize(**file, item.work_size); !s.ok()) return s;
    absl::StatusOr<std::unique_ptr<TFRecordSliceReader>> plain =
        TFRecordSliceReader::Open(*std::move(file), spec->start.value_or(0),
                                  spec->end.value_or(-1), read_options);
    if (!plain.ok()) return plain.status();
    records->plain = *std::move(plain);
  } else {
    if (absl::Status s =
            CheckWholeCompressedFile(*spec, (*file)->size(), compression);
        !s.ok()) {
      return s;
    }
    absl::StatusOr<std::unique_ptr<CompressedTFRecordReader>> compressed =
        CompressedTFRecordReader::Open(*std::move(file), compression,
                                       read_options);
    if (!compressed.ok()) return compressed.status();
    records->compressed = *std::move(compressed);
  }
  return std::unique_ptr<TFRecordItemReader>(
      new TFRecordItemReader(item, options.log_skips, keys, std::move(records)));
}

TFRecordItemReader::TFRecordItemReader(const WorkItem& item, bool log_skips,
                                       RecordKeys keys,
                                       std::unique_ptr<Records> records)
    : item_(item),
      key_prefix_(absl::StrCat(item.item, ":")),
      log_skips_(log_skips),
      keys_(keys),
      records_(std::move(records)) {}

TFRecordItemReader::~TFRecordItemReader() = default;

const TFRecordReadStats& TFRecordItemReader::stats() const {
  return records_->stats();
}

absl::StatusOr<bool> TFRecordItemReader::Next(Record* record) {
  if (ended_) return false;
  int64_t offset = 0;
  absl::StatusOr<bool> more = records_->Next(&record->value, &offset);
  if (!more.ok()) return more.status();
  // A split (tail rebalancing) may have ended the item before this record.
  // A compressed file's offsets are in its decompressed stream, not the
  // item's byte range: its records are never claimed, so it is never split
  // and always read whole.
  const bool plain = records_->plain != nullptr;
  if (*more && plain && !ClaimRecord(item_, offset)) more = false;
  if (!*more) {
    EndItem();
    return false;
  }
  if (keys_ == RecordKeys::kFill) {
    SetRecordKey(key_prefix_, offset, &record->key);
  } else {
    record->key.clear();
  }
  // Length (8), its CRC (4), the data, its CRC (4).
  if (plain) {
    consumed_ = offset + kTFRecordHeaderBytes + kTFRecordFooterBytes +
                static_cast<int64_t>(record->value.size());
  }
  return true;
}

void TFRecordItemReader::EndItem() {
  ended_ = true;
  const TFRecordReadStats& item_stats = records_->stats();
  if (item_stats.corrupt_regions > 0 && log_skips_) {
    SHARDQ_LOG_WARN("skipped {} corrupt region(s), {} bytes, in '{}'", item_stats.corrupt_regions,
                    item_stats.skipped_bytes, item_.item);
  }
}

}  // namespace shardq
