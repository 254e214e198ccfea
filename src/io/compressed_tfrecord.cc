#include "src/io/compressed_tfrecord.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/io/crc32c.h"
#include "src/io/little_endian.h"

namespace shardq {

absl::StatusOr<std::unique_ptr<CompressedTFRecordReader>>
CompressedTFRecordReader::Open(const std::string& path,
                               FileCompression compression,
                               TFRecordReadOptions options) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      OrDefault(options.file_system)->Open(path);
  if (!file.ok()) return file.status();
  return Open(*std::move(file), compression, options);
}

absl::StatusOr<std::unique_ptr<CompressedTFRecordReader>>
CompressedTFRecordReader::Open(std::unique_ptr<RandomAccessFile> file,
                               FileCompression compression,
                               TFRecordReadOptions options) {
  absl::StatusOr<std::unique_ptr<InflateStream>> stream = InflateStream::Open(
      std::move(file), compression, options.buffer_bytes);
  if (!stream.ok()) return stream.status();
  return std::unique_ptr<CompressedTFRecordReader>(
      new CompressedTFRecordReader(*std::move(stream), options));
}

CompressedTFRecordReader::CompressedTFRecordReader(
    std::unique_ptr<InflateStream> stream, TFRecordReadOptions options)
    : stream_(std::move(stream)), options_(options) {}

absl::StatusOr<bool> CompressedTFRecordReader::Next(std::string* record,
                                                    int64_t* offset) {
  return tfrecord_internal::StickyNext(
      &error_, [&] { return NextImpl(record, offset); });
}

absl::StatusOr<bool> CompressedTFRecordReader::NextImpl(std::string* record,
                                                        int64_t* offset) {
  while (!done_) {
    absl::StatusOr<Probe> probe = ProbeAt(position_, record);
    if (!probe.ok()) return probe.status();
    if (probe->check == Check::kEnd) {
      done_ = true;
      break;
    }
    if (probe->check == Check::kValid) {
      if (offset != nullptr) *offset = position_;
      position_ += kTFRecordHeaderBytes + kTFRecordFooterBytes +
                   static_cast<int64_t>(probe->length);
      ++stats_.records;
      stats_.bytes += static_cast<int64_t>(probe->length);
      return true;
    }
    if (absl::Status s = HandleCorrupt(*probe); !s.ok()) return s;
  }
  return false;
}

absl::StatusOr<CompressedTFRecordReader::Probe>
CompressedTFRecordReader::ProbeAt(int64_t offset, std::string* data) {
  Probe probe;
  probe.offset = offset;
  absl::StatusOr<absl::string_view> header =
      stream_->Peek(offset, kTFRecordHeaderBytes);
  if (!header.ok()) return header.status();
  if (header->empty()) {
    probe.check = Check::kEnd;
    return probe;
  }
  if (header->size() < static_cast<size_t>(kTFRecordHeaderBytes)) {
    probe.check = Check::kTruncatedHeader;
    probe.available = static_cast<int64_t>(header->size());
    return probe;
  }
  if (!tfrecord_internal::DecodeRecordHeader(*header, &probe)) return probe;
  // The length is not trusted: the data is appended as it arrives, so a
  // corrupt length runs into the end of the stream, not into malloc.
  if (data != nullptr) {
    data->clear();
    data->reserve(static_cast<size_t>(
        std::min<uint64_t>(probe.length, stream_->window_bytes())));
  }
  int64_t p = offset + kTFRecordHeaderBytes;
  uint64_t remaining = probe.length;
  uint32_t crc = 0;
  while (remaining > 0) {
    absl::StatusOr<absl::string_view> chunk = stream_->Peek(
        p, static_cast<size_t>(
               std::min<uint64_t>(remaining, stream_->window_bytes())));
    if (!chunk.ok()) return chunk.status();
    if (chunk->empty()) {
      probe.check = Check::kLengthPastEnd;
      probe.available = p - offset;
      return probe;
    }
    crc = Crc32cExtend(crc, chunk->data(), chunk->size());
    if (data != nullptr) data->append(chunk->data(), chunk->size());
    p += static_cast<int64_t>(chunk->size());
    remaining -= chunk->size();
  }
  absl::StatusOr<absl::string_view> footer =
      stream_->Peek(p, kTFRecordFooterBytes);
  if (!footer.ok()) return footer.status();
  if (footer->size() < static_cast<size_t>(kTFRecordFooterBytes)) {
    probe.check = Check::kLengthPastEnd;
    probe.available = p - offset + static_cast<int64_t>(footer->size());
    return probe;
  }
  probe.computed_crc = crc;
  probe.stored_crc = UnmaskCrc(DecodeLittleEndian32(footer->data()));
  probe.check = probe.stored_crc == probe.computed_crc ? Check::kValid
                                                       : Check::kBadDataCrc;
  return probe;
}

absl::StatusOr<int64_t> CompressedTFRecordReader::Scan(int64_t from) {
  const size_t window = stream_->window_bytes();
  int64_t p = from;
  while (true) {
    absl::StatusOr<absl::string_view> chunk = stream_->Peek(p, window);
    if (!chunk.ok()) return chunk.status();
    const int64_t size = static_cast<int64_t>(chunk->size());
    if (size < kTFRecordHeaderBytes) return p + size;  // the end
    // Offsets [p, p + positions) have a whole header inside chunk.
    const int64_t positions = size - kTFRecordHeaderBytes + 1;
    int64_t candidate = -1;
    for (int64_t i = 0; i < positions; ++i) {
      if (TFRecordLengthCrcMatches(chunk->data() + i)) {
        candidate = p + i;
        break;
      }
    }
    if (candidate < 0) {
      // A short chunk is the tail: fewer than a header's bytes remain.
      if (static_cast<size_t>(size) < window) return p + size;
      p += positions;
      continue;
    }
    // Checking the data moves the window, so chunk is stale after this.
    absl::StatusOr<Probe> probe = ProbeAt(candidate, nullptr);
    if (!probe.ok()) return probe.status();
    if (probe->check == Check::kValid) return candidate;
    p = candidate + 1;
  }
}

absl::Status CompressedTFRecordReader::HandleCorrupt(const Probe& probe) {
  if (options_.on_corrupt == TFRecordReadOptions::kFail) {
    return absl::DataLossError(tfrecord_internal::CorruptRecordMessage(
        probe,
        absl::StrCat("'", stream_->path(), "' (",
                     CompressionName(stream_->compression()), ")"),
        "decompressed byte offset", "stream",
        "the decompressed stream does not start with a TFRecord header: is "
        "it a compressed TFRecord file?"));
  }
  absl::StatusOr<int64_t> resume = Scan(probe.offset + 1);
  if (!resume.ok()) return resume.status();
  ++stats_.corrupt_regions;
  stats_.skipped_bytes += *resume - probe.offset;
  position_ = *resume;
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// CompressedTFRecordWriter

absl::StatusOr<std::unique_ptr<CompressedTFRecordWriter>>
CompressedTFRecordWriter::Create(const std::string& path,
                                 FileCompression compression) {
  absl::StatusOr<std::unique_ptr<CompressedFileWriter>> file =
      CompressedFileWriter::Create(path, compression);
  if (!file.ok()) return file.status();
  return std::unique_ptr<CompressedTFRecordWriter>(
      new CompressedTFRecordWriter(*std::move(file)));
}

absl::Status CompressedTFRecordWriter::Write(absl::string_view record) {
  return file_->Append(EncodeTFRecord(record));
}

absl::Status CompressedTFRecordWriter::Close() { return file_->Close(); }

}  // namespace shardq
