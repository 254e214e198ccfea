// parse_example: tf.Example records -> numpy arrays that own the parser's
// buffers (no copy), which torch.from_numpy shares in turn.
#include <memory>
#include <string>
#include <vector>

#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/errors.h"
#include "python/src/py_example.h"
#include "python/src/py_sources.h"
#include "src/parse/example_parser.h"

namespace py = pybind11;

namespace shardq::python {
namespace {

DType ParseDType(const std::string& name, const std::string& feature) {
  if (name == "float32") return DType::kFloat32;
  if (name == "int64") return DType::kInt64;
  if (name == "bytes" || name == "string") return DType::kBytes;
  if (name == "uint8") return DType::kUInt8;
  ThrowStatus(absl::InvalidArgumentError("feature '" + feature + "': dtype '" + name +
                                         "' is not float32, int64, uint8 or bytes"));
}

template <typename T>
py::array Wrap(const ParsedFeature& f) {
  // The capsule keeps the buffer (or what holds the memory the feature was
  // placed in) alive as long as any array viewing it.
  auto* keep = f.placed != nullptr ? new std::shared_ptr<void>(f.keep)
                                   : new std::shared_ptr<void>(f.data);
  py::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
  std::vector<py::ssize_t> shape(f.shape.begin(), f.shape.end());
  return py::array_t<T>(shape, reinterpret_cast<T*>(const_cast<char*>(f.values())), owner);
}

}  // namespace

std::vector<FixedLenFeature> FeaturesFromSpec(const py::dict& spec) {
  std::vector<FixedLenFeature> features;
  for (auto item : spec) {
    FixedLenFeature f;
    f.name = py::str(item.first);
    py::tuple t = item.second.cast<py::tuple>();
    // A shape of None: a variable-length feature (shardq.VarLen).
    f.var_len = t[0].is_none();
    if (!f.var_len) f.shape = t[0].cast<std::vector<int64_t>>();
    f.dtype = ParseDType(t[1].cast<std::string>(), f.name);
    // A third element, when not None: the default, flat (FixedLen checked
    // its length): numbers, or bytes values (one bytes object of the raw
    // pixels for uint8).
    if (t.size() > 2 && !t[2].is_none()) {
      f.has_default = true;
      if (f.dtype == DType::kBytes) {
        for (py::handle v : t[2]) f.default_strings.push_back(v.cast<std::string>());
      } else if (f.dtype == DType::kUInt8) {
        const std::string raw = t[2].cast<std::string>();
        f.default_data.assign(raw.begin(), raw.end());
      } else {
        for (py::handle v : t[2]) {
          if (f.dtype == DType::kFloat32) {
            const float x = v.cast<float>();
            const char* p = reinterpret_cast<const char*>(&x);
            f.default_data.insert(f.default_data.end(), p, p + sizeof(x));
          } else {
            const int64_t x = v.cast<int64_t>();
            const char* p = reinterpret_cast<const char*>(&x);
            f.default_data.insert(f.default_data.end(), p, p + sizeof(x));
          }
        }
      }
    }
    features.push_back(std::move(f));
  }
  return features;
}

py::object FeatureToNumpy(const ParsedFeature& f) {
  if (f.var_len) {
    // shardq.Ragged(values, row_lengths): the flat values (as a fixed
    // feature's, of shape [total]) and an int64 array of one length per row.
    ParsedFeature flat = f;
    flat.var_len = false;
    if (flat.dtype != DType::kBytes && flat.data->empty()) flat.data->resize(1);  // a valid pointer
    py::object values = FeatureToNumpy(flat);
    py::array_t<int64_t> lengths(static_cast<py::ssize_t>(f.row_lengths.size()));
    std::copy(f.row_lengths.begin(), f.row_lengths.end(), lengths.mutable_data());
    return py::module_::import("shardq.example").attr("Ragged")(values, lengths);
  }
  if (f.dtype == DType::kFloat32) return Wrap<float>(f);
  if (f.dtype == DType::kInt64) return Wrap<int64_t>(f);
  if (f.dtype == DType::kUInt8) return Wrap<uint8_t>(f);
  // Variable-length bytes cannot be one buffer: an object array.
  py::list values;
  for (const std::string& s : f.strings) values.append(py::bytes(s));
  py::object np = py::module_::import("numpy");
  py::tuple shape = py::cast(std::vector<py::ssize_t>(f.shape.begin(), f.shape.end()));
  return np.attr("array")(values, py::arg("dtype") = "object").attr("reshape")(shape);
}

// A reusable parser for one feature spec: {name: (shape tuple, dtype str)}.
class PyExampleParser {
 public:
  explicit PyExampleParser(const py::dict& spec) {
    parser_ = std::make_unique<ExampleParser>(
        ValueOrThrow(ExampleParser::Create(FeaturesFromSpec(spec))));
  }

  py::dict Parse(const std::vector<py::bytes>& records) {
    std::vector<absl::string_view> views;
    views.reserve(records.size());
    for (const py::bytes& r : records) {
      char* data;
      py::ssize_t size;
      PYBIND11_BYTES_AS_STRING_AND_SIZE(r.ptr(), &data, &size);
      views.emplace_back(data, static_cast<size_t>(size));
    }
    absl::StatusOr<std::vector<ParsedFeature>> parsed;
    {
      py::gil_scoped_release release;  // `records` keeps the bytes alive
      parsed = parser_->Parse(views);
    }
    std::vector<ParsedFeature> features = ValueOrThrow(std::move(parsed));
    py::dict out;
    for (const ParsedFeature& f : features) out[py::str(f.name)] = FeatureToNumpy(f);
    return out;
  }

 private:
  std::unique_ptr<ExampleParser> parser_;
};

void BindExample(py::module_& m) {
  py::class_<PyExampleParser>(m, "_ExampleParser")
      .def(py::init<const py::dict&>(), py::arg("spec"))
      .def("parse", &PyExampleParser::Parse, py::arg("records"));
}

}  // namespace shardq::python
