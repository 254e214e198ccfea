// Python bindings of the record readers: read_up_to(queue_or_producer, n)
// returns (keys, values) like TF's readers, and raises OutOfRangeError once
// the source is exhausted.
#include <memory>
#include <string>
#include <vector>

#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/errors.h"
#include "python/src/py_sources.h"
#include "shardq/text_line_reader.h"

namespace py = pybind11;

namespace shardq::python {

ItemSource* SourceOf(py::handle source) {
  py::handle native = source;
  if (py::hasattr(source, "_native")) native = source.attr("_native");
  if (py::isinstance<PyWorkQueue>(native)) return native.cast<PyWorkQueue&>().queue();
  if (py::isinstance<PyProducer>(native)) return native.cast<PyProducer&>().producer();
  throw py::type_error("read_up_to needs a shardq.WorkQueue or an input_producer()");
}

namespace {

py::tuple ToKeysValues(std::vector<Record> records) {
  py::list keys;
  py::list values;
  for (Record& r : records) {
    keys.append(py::str(r.key));
    values.append(py::bytes(r.value));
  }
  return py::make_tuple(keys, values);
}

}  // namespace

void BindReaders(py::module_& m) {
  py::class_<TextLineReader>(m, "TextLineReader",
                             "Reads text lines of the items of a queue or producer.")
      .def(py::init<>())
      .def(
          "read_up_to",
          [](TextLineReader& reader, py::object source, int64_t num_records) {
            ItemSource* items = SourceOf(source);
            absl::StatusOr<std::vector<Record>> records;
            {
              py::gil_scoped_release release;
              records = reader.ReadUpTo(*items, num_records);
            }
            return ToKeysValues(ValueOrThrow(std::move(records)));
          },
          py::arg("source"), py::arg("num_records"),
          "Up to num_records (keys, values): key '<item>:<offset>', value the line "
          "as bytes. Completes items once read out. OutOfRangeError at the end.")
      .def_property_readonly("records_read", &TextLineReader::records_read);
}

}  // namespace shardq::python
