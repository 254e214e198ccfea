// The record verbs of the `shardq` command line: `count`, `cat` and
// `tfrecord-write`. Like the verbs of verbs.h, each Add* registers a
// subcommand and its flags, each Run* executes it and returns the exit code
// (0 on success; on an error the message goes to stderr and the code is
// non-zero: 2 for bad arguments, 1 otherwise).
//
// An ITEM is anything a reader takes: a file, a byte range of one
// ("path?start=S&end=E"), or a table ("sqlite:PATH?table=NAME", with an
// optional row range). Its type is given by --type, or by default judged
// from the file's content, its name as a hint: "sqlite:..." is a table; a
// file that starts with a valid TFRecord header (length CRC matches) or a
// GZIP stream (or ZLIB, in a *.zz/*.zlib file) is TFRecord; so is a file
// named *.tfrecord, *.tfrecords, the TFDS shard names
// *.tfrecord-NNNNN-of-NNNNN, and those names followed by .gz, .zz or .zlib
// (whatever it starts with: a damaged first record is then reported, not
// read as text); anything else is text. The content is read once per item
// (12 bytes at offset 0).
#ifndef SHARDQ_TOOLS_RECORD_VERBS_H_
#define SHARDQ_TOOLS_RECORD_VERBS_H_

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace shardq {

// How items are read; shared by count and cat.
struct RecordReadFlags {
  std::string type = "auto";        // auto | text | tfrecord | table
  std::string on_corrupt = "fail";  // fail | skip (TFRecord)
  std::string compression = "auto";  // auto | none | gzip | zlib (TFRecord)
};

struct CountOptions {
  RecordReadFlags read;
  std::vector<std::string> items;
};
// Prints "<records>\t<item>" per item, then "<total>\ttotal".
CLI::App* AddCount(CLI::App& app, CountOptions* o);
int RunCount(const CountOptions& o);

struct CatOptions {
  RecordReadFlags read;
  std::string item;
  std::string format = "lines";  // lines | hex | len
  bool keys = false;             // prefix each record with its key and a tab
};
// Writes the item's records to stdout, one per line: the bytes (lines),
// their hex (hex) or their length (len). A table row is rendered as its
// values separated by tabs (NULL, numbers, text, blobs as x'hex').
CLI::App* AddCat(CLI::App& app, CatOptions* o);
int RunCat(const CatOptions& o);

struct TFRecordWriteOptions {
  std::string input;
  std::string output;
  std::string compression = "auto";  // auto (by suffix) | none | gzip | zlib
};
// Writes each line of the text file `input` as one record of `output`.
CLI::App* AddTFRecordWrite(CLI::App& app, TFRecordWriteOptions* o);
int RunTFRecordWrite(const TFRecordWriteOptions& o);

}  // namespace shardq

#endif  // SHARDQ_TOOLS_RECORD_VERBS_H_
