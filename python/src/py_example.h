// Shared by the bindings of parse_example and of the pipeline: a feature
// spec from Python, and a parsed feature as a numpy array that owns the
// parser's buffer (no copy).
#ifndef SHARDQ_PYTHON_PY_EXAMPLE_H_
#define SHARDQ_PYTHON_PY_EXAMPLE_H_

#include <vector>

#include "pybind11/pybind11.h"
#include "src/parse/example_parser.h"

namespace shardq::python {

// {name: (shape tuple, dtype str[, flat default or None])} -> features. Raises InvalidArgumentError
// naming the feature for an unknown dtype. Needs the GIL.
std::vector<FixedLenFeature> FeaturesFromSpec(const pybind11::dict& spec);

// A float32 / int64 / uint8 feature: an ndarray over its values (f.data,
// or the memory it was placed in), whose base is a capsule sharing
// ownership of the buffer (or of f.keep) (no copy). A bytes feature: an
// object array of bytes (copied: variable-length values are not one
// buffer). Needs the GIL.
pybind11::object FeatureToNumpy(const ParsedFeature& f);

}  // namespace shardq::python

#endif  // SHARDQ_PYTHON_PY_EXAMPLE_H_
