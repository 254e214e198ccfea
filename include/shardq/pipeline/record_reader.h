// How the reading stage of a pipeline (ReadItems in dataset.h) turns one
// work item into records: a factory opens an ItemReader for a WorkItem
// (its string parsed once, where it entered the client), and the reader
// returns the item's records one by one.
//
//   RecordReaderFactory factory = TextReaderFactory();
//   WorkItem item{"data/part-3.txt?start=0&end=4096"};
//   ParseWorkItem(&item).IgnoreError();  // a WorkQueue does this on Take
//   absl::StatusOr<std::unique_ptr<RecordReader>> reader = factory(item);
//   Record record;
//   while (*(*reader)->Next(&record)) ...   // (check the StatusOr first)
//
// A new record format is one more factory: anything that can open an item
// and return its records in order. The element type is a template
// parameter so that a format whose records are not (key, bytes) pairs (the
// typed rows of a table) gets its own ItemReader<Row> without squeezing its
// values into strings.
#ifndef SHARDQ_PIPELINE_RECORD_READER_H_
#define SHARDQ_PIPELINE_RECORD_READER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "shardq/item_reader.h"
#include "shardq/splittable_range.h"
#include "shardq/table_reader.h"      // Row, TableReaderOptions
#include "shardq/text_line_reader.h"  // Record
#include "shardq/tfrecord_reader.h"   // TFRecordReaderOptions
#include "shardq/work_item.h"

namespace shardq::pipeline {

// Reads the records of one work item (shardq/item_reader.h). The pipeline
// uses one reader from one thread at a time.
template <typename R>
using ItemReader = ::shardq::ItemReader<R>;

// Opens the reader of an item (a work name, optionally with a range, see
// shardq/slice.h; item.spec holds it parsed, see shardq/work_item.h). A
// reader that honours splits claims every record's start offset through
// the item's live range (item.range, null when the item cannot be split;
// ClaimRecord in shardq/work_item.h) and stops where a split ended the
// item; an item whose reader never claims a record is never split. Errors
// name the item or its file. May return
// a reader that opens its file lazily, reporting a missing file from the
// first Next(). Must be thread-safe: parallel reading threads call it
// concurrently.
template <typename R>
using ItemReaderFactory =
    std::function<absl::StatusOr<std::unique_ptr<ItemReader<R>>>(
        const WorkItem& item)>;

using RecordReader = ItemReader<Record>;
using RecordReaderFactory = ItemReaderFactory<Record>;

// Text lines: a line belongs to the item in which its first byte lies.
// key "<item>:<byte offset of the line>" (empty with RecordKeys::kSkip,
// see shardq/item_reader.h), value the line without "\n" or "\r\n".
// NOT_FOUND names a missing file. Resumable: resume_offset() is the byte
// offset of the next line.
RecordReaderFactory TextReaderFactory();
RecordReaderFactory TextReaderFactory(RecordKeys keys);

// TFRecord records (plain, GZIP or ZLIB; see shardq/tfrecord_reader.h for
// the slice rules and `options`). key "<item>:<byte offset of the record>"
// (empty with RecordKeys::kSkip), value the record's data. Errors name the file: NOT_FOUND, DATA_LOSS with
// the byte offset of a corrupt record, INVALID_ARGUMENT for a cut
// compressed file. The file is opened once (compression is judged from
// the open file). resume_offset() is the byte offset after the last record
// returned (as for TFRecordReader's progress), -1 for a compressed file,
// which is re-read whole after a failure.
RecordReaderFactory TFRecordReaderFactory(TFRecordReaderOptions options = {});
RecordReaderFactory TFRecordReaderFactory(TFRecordReaderOptions options, RecordKeys keys);

// Rows of SQLite table items ("sqlite:PATH?table=NAME[&start=S&end=E]",
// see shardq/table_reader.h), in rowid order: key "<item>:<rowid>". Errors
// as TableReader::ReadUpTo, naming the database and table. The factory
// keeps the open tables (with their rank indexes) of finished items and
// lends them to later items, so that each slice costs its own rows rather
// than a new rank index (sets kept: at most the items read at once).
// resume_offset() is the rank of the next row (as for TableReader).
ItemReaderFactory<Row> TableReaderFactory(TableReaderOptions options = {});

// InterleaveOptions::open_ahead for the text and the TFRecord factories:
// the next item's range as that reader opens it (FileSystem::WillOpen), so
// that an s3:// item's GET starts while the one before is read.
std::function<void(const WorkItem&)> TextOpenAhead();
std::function<void(const WorkItem&)> TFRecordOpenAhead();

// The formats whose records are Records, for choosing one by name (a
// command-line flag, a config file).
enum class RecordFormat { kText, kTFRecord };

// The factory of `format` with default options.
RecordReaderFactory ReaderFactoryFor(RecordFormat format);

}  // namespace shardq::pipeline

#endif  // SHARDQ_PIPELINE_RECORD_READER_H_
