// Python binding of DownloadItem (src/io/download.h), behind
// WorkQueue(..., download_dir=DIR): take() copies each item to a local file.
#include <cstdint>
#include <string>

#include "pybind11/pybind11.h"
#include "python/src/errors.h"
#include "python/src/py_sources.h"
#include "shardq/work_item.h"
#include "src/io/download.h"

namespace py = pybind11;

namespace shardq::python {

void BindDownload(py::module_& m) {
  m.def(
      "_download_item",
      [](const std::string& item, const std::string& dest, int64_t work_size) {
        WorkItem work_item;
        work_item.item = item;
        work_item.work_size = work_size;
        ThrowIfError(ParseWorkItem(&work_item));
        absl::StatusOr<int64_t> bytes;
        {
          py::gil_scoped_release release;
          bytes = DownloadItem(work_item, dest);
        }
        return ValueOrThrow(std::move(bytes));
      },
      py::arg("item"), py::arg("dest"), py::arg("work_size") = -1,
      "Copies a work item to the local file `dest` (whole works byte for byte, "
      "slices as their records); returns the bytes written. work_size: the "
      "size of the item's work when it was planned (-1: not known); a file of "
      "another size is refused (FailedPreconditionError).");
}

}  // namespace shardq::python
