// `shardq count`, `shardq cat`, `shardq tfrecord-write`.
#include "tools/record_verbs.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <functional>
#include <memory>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "shardq/slice.h"
#include "shardq/table_reader.h"
#include "shardq/text_line_reader.h"
#include "shardq/tfrecord_reader.h"
#include "src/client/planner.h"
#include "src/io/compressed_tfrecord.h"
#include "src/io/file.h"
#include "src/io/format_sniff.h"
#include "src/io/sqlite_table.h"
#include "src/io/tfrecord.h"
#include "tools/client_flags.h"

namespace shardq {
namespace {

constexpr int64_t kBatch = 1024;

enum class ItemType { kText, kTFRecord, kTable };

// --type auto: the file's first bytes decide (one read per item), its name
// breaks the tie. A file that starts with a valid TFRecord header or a
// GZIP/ZLIB stream is TFRecord whatever its name; one whose name says
// TFRecord (TFDS shard names included) is TFRecord whatever it starts with,
// so a damaged first record is reported as such, not counted as lines.
absl::StatusOr<ItemType> ResolveType(const std::string& item,
                                     const std::string& type) {
  if (type == "text") return ItemType::kText;
  if (type == "tfrecord") return ItemType::kTFRecord;
  if (type == "table") return ItemType::kTable;
  if (IsTableItem(item)) return ItemType::kTable;
  absl::StatusOr<SliceSpec> spec = ParseItem(item);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<SniffedFormat> format = SniffFile(spec->work);
  if (!format.ok()) return format.status();
  switch (*format) {
    case SniffedFormat::kTFRecord:
    case SniffedFormat::kGzip:
    case SniffedFormat::kZlib:
      return ItemType::kTFRecord;
    case SniffedFormat::kEmpty:
    case SniffedFormat::kOther:
      break;
  }
  return HasTFRecordName(spec->work) ? ItemType::kTFRecord : ItemType::kText;
}

TFRecordReaderOptions ToReaderOptions(const RecordReadFlags& flags) {
  TFRecordReaderOptions options;
  options.on_corrupt = flags.on_corrupt == "skip"
                           ? TFRecordReaderOptions::OnCorrupt::kSkip
                           : TFRecordReaderOptions::OnCorrupt::kFail;
  using Compression = TFRecordReaderOptions::Compression;
  if (flags.compression == "none") options.compression = Compression::kNone;
  if (flags.compression == "gzip") options.compression = Compression::kGzip;
  if (flags.compression == "zlib") options.compression = Compression::kZlib;
  return options;
}

// "NULL", numbers, text as is, blobs as x'hex'.
std::string RenderValue(const Value& value) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "NULL"; }
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    std::string operator()(double v) const {
      // The shortest text that reads back as the same double.
      char text[32];
      const std::to_chars_result end = std::to_chars(text, text + sizeof(text), v);
      return std::string(text, end.ptr);
    }
    std::string operator()(const std::string& v) const { return v; }
    std::string operator()(const Blob& v) const {
      return absl::StrCat("x'", absl::BytesToHexString(v.bytes), "'");
    }
  };
  return std::visit(Visitor{}, value);
}

std::string RenderRow(const Row& row) {
  return absl::StrJoin(row.values, "\t", [](std::string* out, const Value& v) {
    out->append(RenderValue(v));
  });
}

using Emit = std::function<void(const std::string& key, const std::string& value)>;

// Reads every record of one item with any reader whose records have a key
// and a value-like payload, passing each to `emit`.
template <typename Reader, typename Render>
absl::Status ReadWith(Reader& reader, const std::string& item, Render render,
                      const Emit& emit) {
  ListItemSource source({item});
  while (true) {
    auto batch = reader.ReadUpTo(source, kBatch);
    if (absl::IsOutOfRange(batch.status())) return absl::OkStatus();
    if (!batch.ok()) return batch.status();
    for (const auto& record : *batch) emit(record.key, render(record));
  }
}

absl::Status ReadItem(const std::string& item, const RecordReadFlags& flags,
                      const Emit& emit) {
  absl::StatusOr<ItemType> type = ResolveType(item, flags.type);
  if (!type.ok()) return type.status();
  auto value = [](const Record& r) -> const std::string& { return r.value; };
  switch (*type) {
    case ItemType::kText: {
      TextLineReader reader;
      return ReadWith(reader, item, value, emit);
    }
    case ItemType::kTFRecord: {
      TFRecordReader reader(ToReaderOptions(flags));
      return ReadWith(reader, item, value, emit);
    }
    case ItemType::kTable: {
      TableReader reader;
      return ReadWith(reader, item, RenderRow, emit);
    }
  }
  return absl::InternalError("unknown item type");
}

void AddReadFlags(CLI::App* cmd, RecordReadFlags* flags) {
  cmd->add_option("--type", flags->type,
                  "item type; auto: sqlite:... is a table; a file that starts with "
                  "a TFRecord header or a gzip/zlib stream, or is named "
                  "*.tfrecord[s][-NNNNN-of-NNNNN][.gz|.zz], is TFRecord; anything "
                  "else text")
      ->check(CLI::IsMember({"auto", "text", "tfrecord", "table"}))
      ->capture_default_str();
  cmd->add_option("--on-corrupt", flags->on_corrupt,
                  "corrupt TFRecord records: fail (exit non-zero, naming file and "
                  "offset) or skip (resynchronise, report the skipped bytes)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  cmd->add_option("--compression", flags->compression,
                  "TFRecord compression; auto: gzip by magic bytes, zlib by a "
                  ".zz/.zlib name")
      ->check(CLI::IsMember({"auto", "none", "gzip", "zlib"}))
      ->capture_default_str();
}

bool WriteAll(const std::string& bytes) {
  return std::fwrite(bytes.data(), 1, bytes.size(), stdout) == bytes.size();
}

}  // namespace

CLI::App* AddCount(CLI::App& app, CountOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "count", "Count the records of items (files, byte ranges, sqlite: tables, globs, "
               "directories); "
               "prints one line per item and the total");
  AddReadFlags(cmd, &o->read);
  cmd->add_option("items", o->items,
                  "items to count: files, slices (PATH?start=S&end=E), globs, directories, "
                  "sqlite: tables, s3:// objects, patterns or prefixes/")
      ->required();
  return cmd;
}

int RunCount(const CountOptions& o) {
  // Globs and directories count as the files they name.
  absl::StatusOr<std::vector<std::string>> items = ExpandWorks(o.items, "");
  if (!items.ok()) return ReportError("count", items.status());
  int64_t total = 0;
  for (const std::string& item : *items) {
    int64_t records = 0;
    absl::Status status = ReadItem(
        item, o.read, [&](const std::string&, const std::string&) { ++records; });
    if (!status.ok()) return ReportError("count", status);
    std::printf("%lld\t%s\n", static_cast<long long>(records), item.c_str());
    total += records;
  }
  std::printf("%lld\ttotal\n", static_cast<long long>(total));
  return 0;
}

CLI::App* AddCat(CLI::App& app, CatOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "cat", "Write the records of an item to stdout, one per line");
  AddReadFlags(cmd, &o->read);
  cmd->add_option("--format", o->format,
                  "lines: the record's bytes; hex: their hex; len: their length")
      ->check(CLI::IsMember({"lines", "hex", "len"}))
      ->capture_default_str();
  cmd->add_flag("--keys", o->keys, "prefix each record with its key and a tab");
  cmd->add_option("item", o->item, "the item to read: a file, a slice of one, a table, an s3:// object")
      ->required();
  return cmd;
}

int RunCat(const CatOptions& o) {
  static char buffer[1 << 20];
  std::setvbuf(stdout, buffer, _IOFBF, sizeof(buffer));
  bool write_failed = false;
  std::string line;
  absl::Status status = ReadItem(
      o.item, o.read, [&](const std::string& key, const std::string& value) {
        line.clear();
        if (o.keys) absl::StrAppend(&line, key, "\t");
        if (o.format == "hex") {
          absl::StrAppend(&line, absl::BytesToHexString(value));
        } else if (o.format == "len") {
          absl::StrAppend(&line, value.size());
        } else {
          line.append(value);
        }
        line.push_back('\n');
        if (!write_failed && !WriteAll(line)) write_failed = true;
      });
  if (std::fflush(stdout) != 0) write_failed = true;
  if (!status.ok()) return ReportError("cat", status);
  if (write_failed) {
    return ReportError("cat", absl::UnavailableError("writing to stdout failed"));
  }
  return 0;
}

CLI::App* AddTFRecordWrite(CLI::App& app, TFRecordWriteOptions* o) {
  CLI::App* cmd = app.add_subcommand(
      "tfrecord-write", "Convert a text file to a TFRecord file, one record per line");
  cmd->add_option("--compression", o->compression,
                  "auto: gzip for *.gz, zlib for *.zz/*.zlib, none otherwise")
      ->check(CLI::IsMember({"auto", "none", "gzip", "zlib"}))
      ->capture_default_str();
  cmd->add_option("input", o->input, "text file (lines end at \\n; a \\r before it is dropped)")
      ->required();
  cmd->add_option("output", o->output,
                  "TFRecord file to create, or to replace once every record is written "
                  "(written as OUTPUT.part first; nothing is left of a failed run)")
      ->required();
  return cmd;
}

int RunTFRecordWrite(const TFRecordWriteOptions& o) {
  FileCompression compression = FileCompression::kNone;
  if (o.compression == "gzip" ||
      (o.compression == "auto" && absl::EndsWith(o.output, ".gz"))) {
    compression = FileCompression::kGzip;
  } else if (o.compression == "zlib" ||
             (o.compression == "auto" && (absl::EndsWith(o.output, ".zz") ||
                                          absl::EndsWith(o.output, ".zlib")))) {
    compression = FileCompression::kZlib;
  }
  // Check the input before creating anything.
  if (absl::StatusOr<int64_t> size = FileSize(o.input); !size.ok()) {
    return ReportError("tfrecord-write", size.status());
  }
  // A run that fails (a full disk, a bad input) must not leave a shorter
  // TFRecord file behind: cut at a record boundary it would read as valid.
  // So the records go to OUTPUT.part, renamed to OUTPUT once all are in.
  const std::string part = o.output + ".part";
  auto fail = [&](const absl::Status& s) {
    std::remove(part.c_str());
    return ReportError("tfrecord-write", s);
  };
  std::unique_ptr<TFRecordWriter> plain;
  std::unique_ptr<CompressedTFRecordWriter> compressed;
  if (compression == FileCompression::kNone) {
    absl::StatusOr<std::unique_ptr<TFRecordWriter>> w = TFRecordWriter::Create(part);
    if (!w.ok()) return fail(w.status());
    plain = *std::move(w);
  } else {
    absl::StatusOr<std::unique_ptr<CompressedTFRecordWriter>> w =
        CompressedTFRecordWriter::Create(part, compression);
    if (!w.ok()) return fail(w.status());
    compressed = *std::move(w);
  }
  int64_t records = 0;
  absl::Status write_status;
  RecordReadFlags text;
  text.type = "text";
  absl::Status status =
      ReadItem(o.input, text, [&](const std::string&, const std::string& line) {
        if (!write_status.ok()) return;
        write_status = plain != nullptr ? plain->Write(line) : compressed->Write(line);
        ++records;
      });
  if (status.ok()) status = write_status;
  absl::Status closed = plain != nullptr ? plain->Close() : compressed->Close();
  if (status.ok()) status = closed;
  if (!status.ok()) return fail(status);
  if (std::rename(part.c_str(), o.output.c_str()) != 0) {
    return fail(ErrnoToStatus(errno, "rename to", o.output));
  }
  std::printf("wrote %lld records to %s (%s)\n", static_cast<long long>(records),
              o.output.c_str(), std::string(CompressionName(compression)).c_str());
  return 0;
}

}  // namespace shardq
