#include "python/src/errors.h"

#include <string>

#include "pybind11/pybind11.h"

namespace py = pybind11;

namespace shardq::python {

void ThrowStatus(const absl::Status& status) {
  // A Python signal handler ran while the call waited (src/client/retry.h)
  // and raised, e.g. KeyboardInterrupt: that exception, not the status.
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  py::object make = py::module_::import("shardq.errors").attr("_from_code");
  py::object exception = make(static_cast<int>(status.code()), std::string(status.message()));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exception.ptr())), exception.ptr());
  throw py::error_already_set();
}

}  // namespace shardq::python
