#include "src/io/tfrecord.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "src/io/crc32c.h"
#include "src/io/file.h"
#include "src/io/little_endian.h"
#include "src/io/mapped_read.h"

namespace shardq {
namespace {

constexpr size_t kMinReadBufferBytes = 64;

}  // namespace

// ---------------------------------------------------------------------------
// ReadBuffer: a window of the file, refilled with pread. Peeked views stay
// valid until the next call on the buffer. The records of a mapped file
// (see RandomAccessFile::Mapping) are read by ProbeMapped instead, copied
// and checksummed straight out of the mapping, every touch of it guarded
// (src/io/mapped_read.h); scans for a record boundary use the window.

namespace tfrecord_internal {

class ReadBuffer {
 public:
  ReadBuffer(RandomAccessFile* file, size_t capacity)
      : file_(file),
        file_size_(file->size()),
        capacity_(capacity),
        map_(file->Mapping()),
        storage_(capacity),
        data_(storage_.Window(0)) {}

  size_t capacity() const { return capacity_; }

  // Returns 1 to n bytes at `offset` (n >= 1, offset inside the file), in
  // one piece but not necessarily all n: what the window holds, else a
  // view a lending file gives, else Peek's. For bytes that are consumed
  // piece by piece (a record's data), so a lent view is used as it comes.
  absl::StatusOr<absl::string_view> PeekSome(int64_t offset, size_t n) {
    if (Holds(offset)) {
      return absl::string_view(data_ + (offset - offset_),
                               std::min(n, size_ - static_cast<size_t>(offset - offset_)));
    }
    if (lends_) {
      absl::StatusOr<bool> lent = LendAt(offset);
      if (!lent.ok()) return lent.status();
      if (*lent) return absl::string_view(data_, std::min(n, size_));
    }
    return Peek(offset, std::min(n, capacity_));
  }

  // Returns the min(n, file size - offset) bytes at `offset`; n <= capacity.
  absl::StatusOr<absl::string_view> Peek(int64_t offset, size_t n) {
    const size_t want =
        static_cast<size_t>(std::min<int64_t>(n, file_size_ - offset));
    if (Holds(offset) &&
        offset + static_cast<int64_t>(want) <= offset_ + static_cast<int64_t>(size_)) {
      return absl::string_view(data_ + (offset - offset_), want);
    }
    // A file that lends its own buffer's bytes (a remote file's stream)
    // is read straight out of it when the bytes asked for lie in one piece
    // there (not across the end of its buffer): no copy into the window.
    // A shorter view's bytes are kept below as the window's start.
    if (lends_ && !Holds(offset)) {
      absl::StatusOr<bool> lent = LendAt(offset);
      if (!lent.ok()) return lent.status();
      if (*lent && size_ >= want) return absl::string_view(data_, want);
    }
    // The window moves so that `offset` keeps its address modulo 4 KiB
    // (see AlignedReadBuffer); what it already holds moves along.
    char* const window = storage_.Window(offset);
    size_t keep = 0;
    if (Holds(offset)) {
      keep = size_ - static_cast<size_t>(offset - offset_);
      std::memmove(window, data_ + (offset - offset_), keep);
    }
    // Reading a lending file, only the bytes that lie across the end of a
    // view are copied, so that the next Peek past them lends again.
    const size_t fill = lends_ ? want
                               : static_cast<size_t>(std::min<int64_t>(
                                     capacity_, file_size_ - offset));
    data_ = window;
    size_ = 0;
    if (absl::Status s = ReadFromFile(offset + static_cast<int64_t>(keep),
                                      fill - keep, window + keep);
        !s.ok()) {
      return s;
    }
    offset_ = offset;
    size_ = fill;
    return absl::string_view(data_, want);
  }

  // Replaces *dst with the n bytes at `offset`, all inside the file, and
  // returns their CRC32C, in one pass over the data. A string that already
  // holds n bytes or more (a reused one) is cut to n and overwritten,
  // copying and checksumming at once (Crc32cExtendCopy); a shorter one is
  // appended to, and each piece checksummed right after it is copied,
  // while it is in cache: never a zero-fill of new bytes first.
  absl::StatusOr<uint32_t> ReadWithCrc(int64_t offset, size_t n,
                                       std::string* dst) {
    if (n >= capacity_) return ReadLargeWithCrc(offset, n, dst);
    uint32_t crc = 0;
    const bool overwrite = dst->size() >= n;
    if (overwrite) {
      dst->resize(n);
    } else {
      dst->clear();
      dst->reserve(n);
    }
    char* out = dst->data();
    while (n > 0) {
      absl::StatusOr<absl::string_view> piece = PeekSome(offset, n);
      if (!piece.ok()) return piece.status();
      const char* src = piece->data();
      const size_t take = piece->size();
      if (overwrite) {
        crc = Crc32cExtendCopy(crc, src, take, out);
        out += take;
      } else {
        dst->append(src, take);
        crc = Crc32cExtend(crc, src, take);
      }
      offset += static_cast<int64_t>(take);
      n -= take;
    }
    return crc;
  }

  bool mapped() const { return map_ != nullptr; }

  // Validates the record at `offset` of a mapped file (mapped() true), as
  // TFRecordSliceReader::ProbeAt does, with one guarded touch of the header
  // and one of the data and footer: *data (when not null) gets the data.
  // Errors are I/O errors only.
  absl::StatusOr<RecordProbe> ProbeMapped(int64_t offset, std::string* data) {
    RecordProbe probe;
    probe.offset = offset;
    const int64_t left = file_size_ - offset;
    if (left < kTFRecordHeaderBytes) {
      probe.check = RecordCheck::kTruncatedHeader;
      return probe;
    }
    const char* const header_at = map_ + offset;
    const char* const body = header_at + kTFRecordHeaderBytes;
    // Trust the length only once it fits in the file: never allocate first.
    const int64_t room = left - kTFRecordFramingBytes;
    const auto length_fits = [&] {
      if (room >= 0 && probe.length <= static_cast<uint64_t>(room)) return true;
      probe.check = RecordCheck::kLengthPastEnd;
      return false;
    };
    uint32_t crc = 0;
    char footer[kTFRecordFooterBytes];
    // The common case in one guarded touch: a record whose data fits in the
    // string's room (a reused one) is decoded, sized (zero-filling only
    // what the string grows by), copied and checksummed in one pass.
    enum class Got { kNothing, kHeader, kRecord };
    Got got = Got::kNothing;
    bool read = RunMappedGuarded(header_at, static_cast<size_t>(left), [&] {
      if (!DecodeRecordHeader(absl::string_view(header_at, kTFRecordHeaderBytes),
                              &probe) ||
          !length_fits()) {
        return;
      }
      got = Got::kHeader;
      const size_t length = static_cast<size_t>(probe.length);
      if (data == nullptr || data->capacity() < length) return;
      data->resize(length);  // within its capacity: no allocation
      crc = Crc32cExtendCopy(0, body, length, data->data());
      std::memcpy(footer, body + length, sizeof footer);
      got = Got::kRecord;
    });
    if (!read && got == Got::kNothing) {
      return MappedReadFailure(*file_, offset, kTFRecordHeaderBytes);
    }
    if (!read) {  // the header was read: the data or footer could not be
      return MappedReadFailure(*file_, offset + kTFRecordHeaderBytes,
                              static_cast<size_t>(probe.length) + sizeof footer);
    }
    if (got == Got::kNothing) return probe;  // a bad header or length
    const size_t length = static_cast<size_t>(probe.length);
    if (got == Got::kHeader) {
      if (data != nullptr) {
        // A string without room (a new one) grows by an append into room
        // reserved first (no allocation inside the guard), not a zero-fill
        // of fresh memory and a copy; the copy is checksummed while in
        // cache.
        data->clear();
        data->reserve(length);
        read = RunMappedGuarded(body, length + sizeof footer, [&] {
          data->append(body, length);
          std::memcpy(footer, body + length, sizeof footer);
        });
        if (read) crc = Crc32cExtend(0, data->data(), length);
      } else {
        read = RunMappedGuarded(body, length + sizeof footer, [&] {
          crc = Crc32cExtend(0, body, length);
          std::memcpy(footer, body + length, sizeof footer);
        });
      }
      if (!read) {
        return MappedReadFailure(*file_, offset + kTFRecordHeaderBytes,
                                length + sizeof footer);
      }
    }
    probe.computed_crc = crc;
    probe.stored_crc = UnmaskCrc(DecodeLittleEndian32(footer));
    probe.check = probe.stored_crc == probe.computed_crc
                      ? RecordCheck::kValid
                      : RecordCheck::kBadDataCrc;
    return probe;
  }

  // CRC32C of the n bytes at `offset`, all inside the file, read through
  // the buffer (so a corrupt length costs no allocation).
  absl::StatusOr<uint32_t> Crc(int64_t offset, uint64_t n) {
    uint32_t crc = 0;
    while (n > 0) {
      absl::StatusOr<absl::string_view> chunk =
          PeekSome(offset, static_cast<size_t>(std::min<uint64_t>(n, capacity_)));
      if (!chunk.ok()) return chunk.status();
      crc = Crc32cExtend(crc, chunk->data(), chunk->size());
      offset += static_cast<int64_t>(chunk->size());
      n -= chunk->size();
    }
    return crc;
  }

 private:
  // ReadWithCrc for records of at least a buffer: the bytes the buffer
  // holds are copied, the rest is read straight into the string, one
  // buffer-sized pread at a time, each checksummed while it is in cache.
  absl::StatusOr<uint32_t> ReadLargeWithCrc(int64_t offset, size_t n,
                                            std::string* dst) {
    dst->resize(n);
    char* out = dst->data();
    uint32_t crc = 0;
    if (Holds(offset)) {
      const char* src = data_ + (offset - offset_);
      const size_t take =
          std::min(n, size_ - static_cast<size_t>(offset - offset_));
      crc = Crc32cExtendCopy(crc, src, take, out);
      out += take;
      offset += static_cast<int64_t>(take);
      n -= take;
    }
    // Straight into the string unless its bytes would lie just past their
    // file offsets modulo 4 KiB (the kernel's slow copy, see
    // AlignedReadBuffer): then through the buffer, one more copy.
    const size_t skew = static_cast<size_t>(
        (reinterpret_cast<uintptr_t>(out) - static_cast<uint64_t>(offset)) %
        AlignedReadBuffer::kPageBytes);
    const bool through_buffer = lends_ || (skew > 0 && skew < 64);
    while (n > 0) {
      size_t take = std::min(n, capacity_);
      if (through_buffer) {
        absl::StatusOr<absl::string_view> chunk = PeekSome(offset, take);
        if (!chunk.ok()) return chunk.status();
        take = chunk->size();
        crc = Crc32cExtendCopy(crc, chunk->data(), take, out);
      } else if (absl::Status s = ReadFromFile(offset, take, out); !s.ok()) {
        return s;
      } else {
        crc = Crc32cExtend(crc, out, take);
      }
      out += take;
      offset += static_cast<int64_t>(take);
      n -= take;
    }
    return crc;
  }

  // Makes the view a lending file gives at `offset` the window; false when
  // it lends nothing there (outside what it streams: then never again).
  absl::StatusOr<bool> LendAt(int64_t offset) {
    absl::StatusOr<std::optional<absl::string_view>> lent =
        file_->Lend(offset, capacity_);
    if (!lent.ok()) return lent.status();
    if (!lent->has_value()) {
      lends_ = false;
      return false;
    }
    if ((*lent)->empty()) return false;  // cut shorter: Peek says so
    data_ = (*lent)->data();
    offset_ = offset;
    size_ = (*lent)->size();
    return true;
  }

  bool Holds(int64_t offset) const {
    return offset >= offset_ && offset < offset_ + static_cast<int64_t>(size_);
  }

  absl::Status ReadFromFile(int64_t offset, size_t n, char* dst) {
    return ReadFully(*file_, offset, n, dst);
  }

  RandomAccessFile* const file_;
  const int64_t file_size_;
  const size_t capacity_;
  const char* const map_;  // the file's mapping, or null: read with pread
  // Read through the file's Lend (until it lends nothing): data_ may then
  // point into the file's buffer, valid until the next read of the file.
  bool lends_ = true;
  AlignedReadBuffer storage_;
  const char* data_;    // the current window of storage_, or a lent view
  int64_t offset_ = 0;  // file offset of data_[0]
  size_t size_ = 0;     // valid bytes in data_
};


std::string CorruptRecordMessage(const RecordProbe& probe,
                                 absl::string_view source,
                                 absl::string_view offset_label,
                                 absl::string_view container,
                                 absl::string_view hint_at_start) {
  std::string what;
  switch (probe.check) {
    case RecordCheck::kTruncatedHeader:
      what = absl::StrCat("truncated record: the ", container, " ends ",
                          probe.available, " bytes after its start, inside its ",
                          kTFRecordHeaderBytes, "-byte header");
      break;
    case RecordCheck::kBadLengthCrc:
      what = absl::StrCat("bad length checksum (stored 0x",
                          absl::Hex(probe.stored_crc), ", computed 0x",
                          absl::Hex(probe.computed_crc), ")");
      break;
    case RecordCheck::kLengthPastEnd:
      what = absl::StrCat("record length ", probe.length,
                          " runs past the end of the ", container, " (",
                          probe.available - kTFRecordHeaderBytes,
                          " bytes left after the header; truncated ",
                          container, " or corrupt length)");
      break;
    case RecordCheck::kBadDataCrc:
      what = absl::StrCat("bad data checksum for a record of ", probe.length,
                          " bytes (stored 0x", absl::Hex(probe.stored_crc),
                          ", computed 0x", absl::Hex(probe.computed_crc), ")");
      break;
    case RecordCheck::kValid:
    case RecordCheck::kEnd:
      break;
  }
  if (probe.offset == 0 && (probe.check == RecordCheck::kTruncatedHeader ||
                            probe.check == RecordCheck::kBadLengthCrc)) {
    absl::StrAppend(&what, "; ", hint_at_start);
  }
  return absl::StrCat(source, ": corrupt TFRecord at ", offset_label, " ",
                      probe.offset, ": ", what);
}

}  // namespace tfrecord_internal

// ---------------------------------------------------------------------------
// TFRecordSliceReader

absl::StatusOr<std::unique_ptr<TFRecordSliceReader>> TFRecordSliceReader::Open(
    const std::string& path, int64_t start, int64_t end,
    TFRecordReadOptions options) {
  if (start < 0 || end < -1 || (end >= 0 && start > end)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "': bad byte range [", start, ", ", end, ")"));
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      OrDefault(options.file_system)->Open(path);
  if (!file.ok()) return file.status();
  return Open(*std::move(file), start, end, options);
}

absl::StatusOr<std::unique_ptr<TFRecordSliceReader>> TFRecordSliceReader::Open(
    std::unique_ptr<RandomAccessFile> file, int64_t start, int64_t end,
    TFRecordReadOptions options) {
  if (start < 0 || end < -1 || (end >= 0 && start > end)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", file->path(), "': bad byte range [", start, ", ", end, ")"));
  }
  const int64_t size = file->size();
  if (absl::Status s = CheckRangeInFile(file->path(), size, start, end);
      !s.ok()) {
    return s;
  }
  if (end < 0) end = size;
  start = std::min(start, size);
  file->WillRead(start, end);
  options.buffer_bytes = std::max(options.buffer_bytes, kMinReadBufferBytes);
  return std::unique_ptr<TFRecordSliceReader>(
      new TFRecordSliceReader(std::move(file), start, end, options));
}

TFRecordSliceReader::TFRecordSliceReader(
    std::unique_ptr<RandomAccessFile> file, int64_t start, int64_t end,
    TFRecordReadOptions options)
    : file_(std::move(file)),
      path_(file_->path()),
      file_size_(file_->size()),
      start_(start),
      end_(end),
      options_(options),
      buffer_(std::make_unique<tfrecord_internal::ReadBuffer>(
          file_.get(), options.buffer_bytes)) {}

TFRecordSliceReader::~TFRecordSliceReader() = default;

absl::StatusOr<bool> TFRecordSliceReader::Next(std::string* record,
                                               int64_t* offset) {
  return tfrecord_internal::StickyNext(
      &error_, [&] { return NextImpl(record, offset); });
}

absl::StatusOr<bool> TFRecordSliceReader::NextImpl(std::string* record,
                                                   int64_t* offset) {
  if (state_ == State::kDone) return false;
  if (state_ == State::kUnpositioned) {
    if (start_ >= end_) {
      state_ = State::kDone;
      return false;
    }
    state_ = State::kWalking;
    position_ = start_;
    if (start_ > 0) {
      absl::StatusOr<int64_t> first = Scan(start_, end_);
      if (!first.ok()) return first.status();
      if (*first < 0) {
        // The whole range lies inside a record that starts before it.
        state_ = State::kDone;
        return false;
      }
      position_ = *first;
      position_validated_ = true;
    }
  }
  while (position_ < end_) {
    absl::StatusOr<Probe> probe = ProbeAt(position_, record);
    if (!probe.ok()) return probe.status();
    if (probe->check == Check::kValid) {
      if (offset != nullptr) *offset = position_;
      position_ += kTFRecordFramingBytes + static_cast<int64_t>(probe->length);
      position_validated_ = false;
      ++stats_.records;
      stats_.bytes += static_cast<int64_t>(probe->length);
      return true;
    }
    if (absl::Status s = HandleCorrupt(*probe, /*after_slice=*/false);
        !s.ok()) {
      return s;
    }
  }
  state_ = State::kDone;
  if (absl::Status s = CheckRecordAfterSlice(); !s.ok()) return s;
  return false;
}

absl::Status TFRecordSliceReader::CheckRecordAfterSlice() {
  // The next slice's scan would pass over a damaged record here without
  // noticing it, so this reader, whose walk proves a record starts here,
  // checks it.
  if (position_ >= file_size_ || position_validated_) return absl::OkStatus();
  absl::StatusOr<Probe> probe = ProbeAt(position_, nullptr);
  if (!probe.ok()) return probe.status();
  if (probe->check == Check::kValid) return absl::OkStatus();
  return HandleCorrupt(*probe, /*after_slice=*/true);
}

absl::Status TFRecordSliceReader::HandleCorrupt(const Probe& probe,
                                                bool after_slice) {
  if (options_.on_corrupt == TFRecordReadOptions::kFail) {
    Probe described = probe;
    described.available = file_size_ - probe.offset;
    std::string message = tfrecord_internal::CorruptRecordMessage(
        described, absl::StrCat("'", path_, "'"), "byte offset", "file",
        "the file does not start with a TFRecord header: if it is not a "
        "TFRecord file (text, say), read it with the reader of its format "
        "(TextLineReader)");
    if (after_slice) {
      absl::StrAppend(&message, " (the record after the slice [", start_,
                      ", ", end_, ")");
    }
    return absl::DataLossError(message);
  }
  absl::StatusOr<int64_t> next = Scan(probe.offset + 1, file_size_);
  if (!next.ok()) return next.status();
  const int64_t resume = *next < 0 ? file_size_ : *next;
  ++stats_.corrupt_regions;
  stats_.skipped_bytes += resume - probe.offset;
  position_ = resume;
  position_validated_ = true;
  return absl::OkStatus();
}

absl::StatusOr<TFRecordSliceReader::Probe> TFRecordSliceReader::ProbeAt(
    int64_t offset, std::string* data) {
  if (buffer_->mapped()) {
    absl::StatusOr<Probe> probe = buffer_->ProbeMapped(offset, data);
    if (!probe.ok() || probe->check == Check::kValid) return probe;
    // A record that fails its checks in the mapping may lie where the file
    // was cut shorter since it was opened (a mapping reads zeros from the
    // new end to the end of its page): reading the same bytes with pread
    // below tells a truncated file (DATA_LOSS from ReadFully) from a
    // corrupt record (the same probe again).
  }
  Probe probe;
  probe.offset = offset;
  absl::StatusOr<absl::string_view> header =
      buffer_->Peek(offset, kTFRecordHeaderBytes);
  if (!header.ok()) return header.status();
  if (header->size() < static_cast<size_t>(kTFRecordHeaderBytes)) {
    probe.check = Check::kTruncatedHeader;
    return probe;
  }
  if (!tfrecord_internal::DecodeRecordHeader(*header, &probe)) return probe;
  // Trust the length only once it fits in the file: never allocate first.
  const int64_t room = file_size_ - offset - kTFRecordFramingBytes;
  if (room < 0 || probe.length > static_cast<uint64_t>(room)) {
    probe.check = Check::kLengthPastEnd;
    return probe;
  }
  const int64_t data_offset = offset + kTFRecordHeaderBytes;
  const size_t length = static_cast<size_t>(probe.length);
  if (data != nullptr) {
    absl::StatusOr<uint32_t> crc =
        buffer_->ReadWithCrc(data_offset, length, data);
    if (!crc.ok()) return crc.status();
    probe.computed_crc = *crc;
  } else {
    absl::StatusOr<uint32_t> crc = buffer_->Crc(data_offset, length);
    if (!crc.ok()) return crc.status();
    probe.computed_crc = *crc;
  }
  absl::StatusOr<absl::string_view> footer = buffer_->Peek(
      data_offset + static_cast<int64_t>(length), kTFRecordFooterBytes);
  if (!footer.ok()) return footer.status();
  probe.stored_crc = UnmaskCrc(DecodeLittleEndian32(footer->data()));
  probe.check = probe.stored_crc == probe.computed_crc ? Check::kValid
                                                       : Check::kBadDataCrc;
  return probe;
}

absl::StatusOr<int64_t> TFRecordSliceReader::Scan(int64_t from,
                                                  int64_t limit) {
  // An offset can start a record only if an empty record fits after it.
  const int64_t last = std::min(limit, file_size_ - kTFRecordFramingBytes + 1);
  int64_t p = from;
  while (p < last) {
    absl::StatusOr<absl::string_view> chunk = buffer_->Peek(
        p, static_cast<size_t>(std::min<int64_t>(
               buffer_->capacity(), last - p + kTFRecordHeaderBytes - 1)));
    if (!chunk.ok()) return chunk.status();
    // At least kTFRecordFramingBytes remain after p, so every offset in
    // [p, p + positions) has a whole header inside chunk.
    const int64_t positions =
        std::min<int64_t>(static_cast<int64_t>(chunk->size()) -
                              kTFRecordHeaderBytes + 1,
                          last - p);
    int64_t candidate = -1;
    for (int64_t i = 0; i < positions; ++i) {
      const char* header = chunk->data() + i;
      // The cheap test first: random and text bytes make huge lengths.
      const uint64_t length = DecodeLittleEndian64(header);
      if (length > static_cast<uint64_t>(file_size_ - (p + i) - kTFRecordFramingBytes)) {
        continue;
      }
      if (!TFRecordLengthCrcMatches(header)) continue;
      candidate = p + i;
      break;
    }
    if (candidate < 0) {
      p += positions;
      continue;
    }
    // Checking the data moves the buffer, so chunk is stale after this.
    absl::StatusOr<Probe> probe = ProbeAt(candidate, nullptr);
    if (!probe.ok()) return probe.status();
    if (probe->check == Check::kValid) return candidate;
    p = candidate + 1;
  }
  return -1;
}

}  // namespace shardq
