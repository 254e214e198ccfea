// Python bindings of the record readers: read_up_to(queue_or_producer, n)
// returns (keys, values) like TF's readers, and raises OutOfRangeError once
// the source is exhausted.
#include <algorithm>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>
#include <string>
#include <vector>

#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/errors.h"
#include "python/src/py_sources.h"
#include "shardq/table_reader.h"
#include "shardq/text_line_reader.h"
#include "shardq/tfrecord_reader.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "src/io/compression.h"
#include "src/io/tfrecord.h"

namespace py = pybind11;

namespace shardq::python {

namespace {

// Python's TFRecordWriter: plain (src/io/tfrecord.h), or GZIP / ZLIB
// compressed (each record framed, then compressed as one stream).
class PyTFRecordWriter {
 public:
  // compression: "" or "NONE" (any case), "GZIP" or "ZLIB"; INVALID_ARGUMENT
  // naming anything else.
  static absl::StatusOr<std::unique_ptr<PyTFRecordWriter>> Create(const std::string& path,
                                                                  const std::string& compression) {
    const std::string kind = absl::AsciiStrToUpper(compression);
    auto writer = std::unique_ptr<PyTFRecordWriter>(new PyTFRecordWriter());
    if (kind.empty() || kind == "NONE") {
      absl::StatusOr<std::unique_ptr<TFRecordWriter>> plain = TFRecordWriter::Create(path);
      if (!plain.ok()) return plain.status();
      writer->plain_ = *std::move(plain);
      return writer;
    }
    if (kind != "GZIP" && kind != "ZLIB") {
      return absl::InvalidArgumentError(absl::StrCat(
          "TFRecordWriter '", path, "': compression must be None, \"GZIP\" or \"ZLIB\", got \"",
          compression, "\""));
    }
    absl::StatusOr<std::unique_ptr<CompressedFileWriter>> compressed = CompressedFileWriter::Create(
        path, kind == "GZIP" ? FileCompression::kGzip : FileCompression::kZlib);
    if (!compressed.ok()) return compressed.status();
    writer->compressed_ = *std::move(compressed);
    return writer;
  }
  absl::Status Write(absl::string_view record) {
    return plain_ != nullptr ? plain_->Write(record)
                             : compressed_->Append(EncodeTFRecord(record));
  }
  // Compressed: the stream reaches the file as zlib's buffer fills and at
  // Close (a partial deflate stream is not readable anyway).
  absl::Status Flush() { return plain_ != nullptr ? plain_->Flush() : absl::OkStatus(); }
  absl::Status Close() { return plain_ != nullptr ? plain_->Close() : compressed_->Close(); }

 private:
  PyTFRecordWriter() = default;
  std::unique_ptr<TFRecordWriter> plain_;
  std::unique_ptr<CompressedFileWriter> compressed_;
};

}  // namespace

ItemSource* SourceOf(py::handle source) {
  py::handle native = source;
  if (py::hasattr(source, "_native")) native = source.attr("_native");
  if (py::isinstance<PyWorkQueue>(native)) return native.cast<PyWorkQueue&>().queue();
  if (py::isinstance<PyProducer>(native)) return native.cast<PyProducer&>().producer();
  if (py::isinstance<PassSource>(native)) return &native.cast<PassSource&>();
  throw py::type_error("read_up_to needs a shardq.WorkQueue or an input_producer()");
}

namespace {

py::object ToPython(const Value& v) {
  if (std::holds_alternative<std::monostate>(v)) return py::none();
  if (const int64_t* i = std::get_if<int64_t>(&v)) return py::int_(*i);
  if (const double* d = std::get_if<double>(&v)) return py::float_(*d);
  if (const std::string* s = std::get_if<std::string>(&v)) return py::str(*s);
  return py::bytes(std::get<Blob>(v).bytes);
}

}  // namespace

py::object RowToPython(const Row& r) {
  if (r.column_names == nullptr) return py::none();  // a padding row
  py::dict row;
  for (size_t c = 0; c < r.values.size(); ++c) {
    row[py::str((*r.column_names)[c])] = ToPython(r.values[c]);
  }
  return std::move(row);
}

namespace {

py::tuple RowsToKeysValues(std::vector<Row> rows) {
  py::list keys;
  py::list values;
  for (const Row& r : rows) {
    keys.append(py::str(r.key));
    values.append(RowToPython(r));
  }
  return py::make_tuple(keys, values);
}

// A record reader (TFRecordReader, TextLineReader) as Python holds it.
// read_up_to reads the records a few at a time, into a vector kept between
// calls, and makes each chunk into Python objects before reading the next:
// each record's bytes are then copied into its bytes object while they are
// still in cache (a whole call's worth is not: 64 records of 64 KiB are 4
// MiB), and its string is not a new allocation each time. The reader's
// contract is kept: up to n records, fewer only at the end of the input,
// OutOfRangeError when nothing was read; an error (or the end) met after
// records of the same call is raised by the next call, as the reader
// itself does within one of its calls.
template <typename Reader>
struct PyRecordReader {
  // A chunk holds about this many bytes of records (the first, 8 records).
  static constexpr size_t kChunkBytes = 256 << 10;
  // The largest string the kept vector holds on to between calls.
  static constexpr size_t kKeptStringBytes = 1 << 20;

  template <typename... Args>
  explicit PyRecordReader(Args&&... args) : reader(std::forward<Args>(args)...) {}

  py::tuple ReadUpTo(py::object source, int64_t n) {
    ItemSource* items = SourceOf(source);
    if (n < 1) {  // the reader's own message
      absl::Status bad;
      {
        py::gil_scoped_release release;
        bad = reader.ReadUpTo(*items, n, &chunk);
      }
      ThrowIfError(bad);
    }
    if (!deferred.ok()) ThrowStatus(std::exchange(deferred, absl::OkStatus()));
    py::list keys;
    py::list values;
    int64_t got = 0;
    int64_t want = std::min<int64_t>(n, 8);
    while (got < n) {
      absl::Status status;
      {
        py::gil_scoped_release release;
        status = reader.ReadUpTo(*items, want, &chunk);
      }
      if (!status.ok()) {
        if (got == 0) ThrowStatus(status);
        deferred = status;
        break;
      }
      size_t bytes = 0;
      for (const Record& r : chunk) {
        keys.append(py::str(r.key));
        values.append(py::bytes(r.value));
        bytes += r.value.size();
      }
      got += static_cast<int64_t>(chunk.size());
      if (static_cast<int64_t>(chunk.size()) < want) break;  // the input ended
      const size_t each = std::max<size_t>(bytes / chunk.size(), 1);
      want = std::clamp<int64_t>(static_cast<int64_t>(kChunkBytes / each), 1, n - got);
    }
    // A string that grew for a huge record is not kept at that size.
    for (Record& r : chunk) {
      if (r.value.capacity() > kKeptStringBytes) std::string().swap(r.value);
    }
    return py::make_tuple(keys, values);
  }

  Reader reader;
  std::vector<Record> chunk;  // reused: its strings keep their capacity
  absl::Status deferred;      // raised by the next read_up_to
};

// TableReader's read_up_to: GIL released while reading, rows converted to
// (keys, values).
py::tuple ReadRowsUpTo(TableReader& reader, py::object source, int64_t num_records) {
  ItemSource* items = SourceOf(source);
  auto rows = [&] {
    py::gil_scoped_release release;
    return reader.ReadUpTo(*items, num_records);
  }();
  return RowsToKeysValues(ValueOrThrow(std::move(rows)));
}

}  // namespace

TFRecordReaderOptions::OnCorrupt ParseOnCorrupt(const std::string& mode) {
  if (mode == "fail") return TFRecordReaderOptions::OnCorrupt::kFail;
  if (mode == "skip") return TFRecordReaderOptions::OnCorrupt::kSkip;
  ThrowStatus(absl::InvalidArgumentError("on_corrupt must be 'fail' or 'skip', got '" + mode + "'"));
}

void BindReaders(py::module_& m) {
  using PyTFRecordReader = PyRecordReader<TFRecordReader>;
  py::class_<PyTFRecordReader>(m, "TFRecordReader",
                               "Reads TFRecord records (CRC-checked) of the items of a queue.")
      .def(py::init([](const std::string& on_corrupt) {
             TFRecordReaderOptions options;
             options.on_corrupt = ParseOnCorrupt(on_corrupt);
             return std::make_unique<PyTFRecordReader>(options);
           }),
           py::arg("on_corrupt") = "fail")
      .def(
          "read_up_to",
          &PyTFRecordReader::ReadUpTo,
          py::arg("source"), py::arg("num_records"),
          "Up to num_records (keys, values): key '<item>:<offset>', value the record "
          "bytes. OutOfRangeError at the end; DataLossError names file and offset.")
      .def_property_readonly("stats", [](PyTFRecordReader& p) {
        const TFRecordReader& r = p.reader;
        py::dict d;
        d["records"] = r.stats().records;
        d["bytes"] = r.stats().bytes;
        d["skipped_bytes"] = r.stats().skipped_bytes;
        d["corrupt_regions"] = r.stats().corrupt_regions;
        d["items_done"] = r.stats().items_done;
        return d;
      });

  py::class_<PyTFRecordWriter>(
      m, "TFRecordWriter",
      "Writes a TFRecord file (CRC32C framed); compression \"GZIP\" or \"ZLIB\" writes it "
      "compressed as TensorFlow's TFRecordOptions(compression_type=...) does.")
      .def(py::init([](const std::string& path, const std::optional<std::string>& compression) {
             return ValueOrThrow(PyTFRecordWriter::Create(path, compression.value_or("")));
           }),
           py::arg("path"), py::arg("compression") = py::none())
      .def("write", [](PyTFRecordWriter& w, py::bytes record) {
             ThrowIfError(w.Write(std::string(record)));
           }, py::arg("record"))
      .def("flush", [](PyTFRecordWriter& w) { ThrowIfError(w.Flush()); })
      .def("close", [](PyTFRecordWriter& w) { ThrowIfError(w.Close()); })
      .def("__enter__", [](PyTFRecordWriter& w) -> PyTFRecordWriter& { return w; },
           py::return_value_policy::reference)
      .def("__exit__", [](PyTFRecordWriter& w, py::args) { ThrowIfError(w.Close()); });

  py::class_<TableReader>(m, "TableReader", "Reads typed rows of sqlite: table items.")
      .def(py::init<>())
      .def(
          "read_up_to",
          &ReadRowsUpTo,
          py::arg("source"), py::arg("num_records"),
          "Up to num_records (keys, rows), each row a dict column -> None, int, "
          "float, str or bytes. OutOfRangeError at the end.");

  using PyTextLineReader = PyRecordReader<TextLineReader>;
  py::class_<PyTextLineReader>(m, "TextLineReader",
                               "Reads text lines of the items of a queue or producer.")
      .def(py::init<>())
      .def(
          "read_up_to",
          &PyTextLineReader::ReadUpTo,
          py::arg("source"), py::arg("num_records"),
          "Up to num_records (keys, values): key '<item>:<offset>', value the line "
          "as bytes. Completes items once read out. OutOfRangeError at the end.")
      .def_property_readonly("records_read",
                             [](PyTextLineReader& p) { return p.reader.records_read(); });
}

}  // namespace shardq::python
