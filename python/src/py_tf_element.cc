#include "python/src/py_tf_element.h"

#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "python/src/errors.h"

namespace py = pybind11;

namespace shardq::python {

// Set by BindWorkQueue (py_work_queue.cc) on the importing thread.
extern std::thread::id g_python_main_thread;

namespace {

[[noreturn]] void Invalid(const std::string& message) {
  ThrowStatus(absl::InvalidArgumentError(message));
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("(", absl::StrJoin(shape, ", "), shape.size() == 1 ? ",)" : ")");
}

// A C-contiguous numpy array for component `index`; object arrays refused.
py::array ArrayOf(py::handle value, size_t index) {
  py::array array = py::array::ensure(value, py::array::c_style);
  if (!array) {
    throw py::type_error(absl::StrCat("queue element component ", index,
                                      ": needs bytes or a numpy array, got ",
                                      std::string(py::str(py::type::of(value)))));
  }
  if (std::string(py::str(array.dtype().attr("kind"))) == "O") {
    Invalid(absl::StrCat("queue element component ", index,
                         ": numpy object arrays cannot be queued; use bytes for a string, "
                         "or an array of numbers"));
  }
  return array;
}

TFComponent ArrayComponent(const py::array& array, const char* data, int64_t skip_dims,
                           size_t nbytes) {
  TFComponent c;
  c.dtype = py::str(array.dtype().attr("str"));
  for (py::ssize_t d = skip_dims; d < array.ndim(); ++d) c.shape.push_back(array.shape(d));
  c.data = std::make_shared<const std::string>(data, nbytes);
  return c;
}

// Sizes and new arrays go through numpy's Python API, not pybind11's
// descriptor layout (which differs between numpy 1 and 2 for pybind11
// 2.10, and a TensorFlow venv brings numpy 2).
size_t NumBytes(const py::array& array) { return array.attr("nbytes").cast<size_t>(); }

py::array NewArray(const std::string& dtype, const std::vector<int64_t>& shape) {
  py::tuple dims(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) dims[i] = py::int_(shape[i]);
  return py::module_::import("numpy").attr("empty")(dims, py::str(dtype)).cast<py::array>();
}

}  // namespace

TFComponent BytesComponent(std::string bytes) {
  TFComponent c;
  c.is_bytes = true;
  c.data = std::make_shared<const std::string>(std::move(bytes));
  return c;
}

TFElement ElementFromPython(const py::list& components) {
  TFElement element;
  element.reserve(components.size());
  for (size_t i = 0; i < components.size(); ++i) {
    py::handle value = components[i];
    if (py::isinstance<py::bytes>(value)) {
      element.push_back(BytesComponent(value.cast<std::string>()));
      continue;
    }
    py::array array = ArrayOf(value, i);
    element.push_back(
        ArrayComponent(array, static_cast<const char*>(array.data()), 0, NumBytes(array)));
  }
  return element;
}

std::vector<TFElement> ElementsFromPython(const py::list& components) {
  if (components.empty()) Invalid("enqueue_many needs at least one component");
  // Each component as a list of bytes or an array [n, ...]; n must agree.
  std::vector<py::array> arrays(components.size());
  std::vector<bool> is_bytes(components.size(), false);
  int64_t n = -1;
  for (size_t i = 0; i < components.size(); ++i) {
    py::handle value = components[i];
    int64_t rows;
    if (py::isinstance<py::list>(value)) {
      is_bytes[i] = true;
      rows = static_cast<int64_t>(py::len(value));
    } else {
      arrays[i] = ArrayOf(value, i);
      if (arrays[i].ndim() < 1) {
        Invalid(absl::StrCat("enqueue_many: component ", i,
                             " is a scalar; it needs a first dimension (the elements)"));
      }
      rows = arrays[i].shape(0);
    }
    if (n >= 0 && rows != n) {
      Invalid(absl::StrCat("enqueue_many: component ", i, " has ", rows,
                           " elements, component 0 has ", n));
    }
    n = rows;
  }
  std::vector<TFElement> elements(static_cast<size_t>(n));
  for (size_t i = 0; i < components.size(); ++i) {
    if (is_bytes[i]) {
      py::list values = components[i].cast<py::list>();
      for (int64_t r = 0; r < n; ++r) {
        py::handle v = values[static_cast<size_t>(r)];
        if (!py::isinstance<py::bytes>(v)) {
          throw py::type_error(absl::StrCat("enqueue_many: component ", i, ", element ", r,
                                            ": needs bytes"));
        }
        elements[static_cast<size_t>(r)].push_back(BytesComponent(v.cast<std::string>()));
      }
      continue;
    }
    const py::array& array = arrays[i];
    const size_t row_bytes = n == 0 ? 0 : NumBytes(array) / static_cast<size_t>(n);
    const char* base = static_cast<const char*>(array.data());
    for (int64_t r = 0; r < n; ++r) {
      elements[static_cast<size_t>(r)].push_back(
          ArrayComponent(array, base + static_cast<size_t>(r) * row_bytes, 1, row_bytes));
    }
  }
  return elements;
}

py::list ElementToPython(const TFElement& element) {
  py::list out;
  for (const TFComponent& c : element) {
    if (c.is_bytes) {
      out.append(py::bytes(*c.data));
      continue;
    }
    py::array array = NewArray(c.dtype, c.shape);
    std::memcpy(array.mutable_data(), c.data->data(), c.data->size());
    out.append(std::move(array));
  }
  return out;
}

py::list ElementsToPython(const std::vector<TFElement>& elements, const std::string& queue) {
  py::list out;
  if (elements.empty()) return out;
  const TFElement& first = elements.front();
  for (size_t i = 0; i < first.size(); ++i) {
    if (first[i].is_bytes) {
      py::list values;
      for (const TFElement& e : elements) values.append(py::bytes(*e[i].data));
      out.append(std::move(values));
      continue;
    }
    for (size_t r = 1; r < elements.size(); ++r) {
      const TFComponent& c = elements[r][i];
      if (c.is_bytes || c.dtype != first[i].dtype || c.shape != first[i].shape) {
        Invalid(absl::StrCat(
            "queue '", queue, "': cannot stack component ", i, " into a batch: element 0 is ",
            first[i].dtype, " ", ShapeString(first[i].shape), ", element ", r, " is ",
            c.is_bytes ? std::string("bytes") : absl::StrCat(c.dtype, " ", ShapeString(c.shape)),
            " (declare shapes= to refuse such elements at enqueue; this batch is lost)"));
      }
    }
    std::vector<int64_t> shape = first[i].shape;
    shape.insert(shape.begin(), static_cast<int64_t>(elements.size()));
    py::array array = NewArray(first[i].dtype, shape);
    char* dst = static_cast<char*>(array.mutable_data());
    for (const TFElement& e : elements) {
      std::memcpy(dst, e[i].data->data(), e[i].data->size());
      dst += e[i].data->size();
    }
    out.append(std::move(array));
  }
  return out;
}

std::shared_ptr<py::object> KeepAlive(py::object object) {
  return std::shared_ptr<py::object>(new py::object(std::move(object)), [](py::object* p) {
    if (!Py_IsInitialized() || _Py_IsFinalizing() != 0) {
      p->release();  // too late to run Python: leak the reference
      delete p;
      return;
    }
    py::gil_scoped_acquire gil;
    delete p;
  });
}

bool OnPythonMainThread() { return std::this_thread::get_id() == g_python_main_thread; }

}  // namespace shardq::python
