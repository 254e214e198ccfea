// Python binding of DownloadItem (src/io/download.h), behind
// WorkQueue(..., download_dir=DIR): take() copies each item to a local file.
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
      [](const std::string& item, const std::string& dest) {
        WorkItem work_item;
        work_item.item = item;
        ThrowIfError(ParseWorkItem(&work_item));
        absl::StatusOr<int64_t> bytes;
        {
          py::gil_scoped_release release;
          bytes = DownloadItem(work_item, dest);
        }
        return ValueOrThrow(std::move(bytes));
      },
      py::arg("item"), py::arg("dest"),
      "Copies a work item to the local file `dest` (whole works byte for byte, "
      "slices as their records); returns the bytes written.");
}

}  // namespace shardq::python
