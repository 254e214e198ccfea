// The elements of a bound pipeline (python/src/py_pipeline.cc) as Python
// objects (the GIL held): records as bytes, table rows as dicts, batches as
// lists, split steps as per-replica lists (with masks), and parsed batches
// as dicts of numpy arrays over the parser's buffers; and the pipeline's
// stats as a dict.
#ifndef SHARDQ_PYTHON_SRC_PY_ELEMENTS_H_
#define SHARDQ_PYTHON_SRC_PY_ELEMENTS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "pybind11/pybind11.h"
#include "python/src/py_slots.h"
#include "python/src/py_sources.h"
#include "shardq/pipeline/dataset.h"
#include "shardq/pipeline/element.h"
#include "src/parse/example_parser.h"

namespace shardq::python {

namespace py = pybind11;
using pipeline::Batch;
using pipeline::PerReplicaBatches;

// A batch of tf.Examples parsed into one buffer per feature. `padded` has
// one flag per row (1: a padding row of a split) or is empty (no padding).
struct ParsedBatch {
  std::vector<ParsedFeature> features;
  // Set when the batch was parsed into a worker's shared-memory slot.
  std::shared_ptr<SlotClaim> claim;
  std::vector<uint8_t> padded;
};

// One step of a split, parsed: one ParsedBatch per replica.
struct ParsedReplicas {
  std::vector<ParsedBatch> replicas;
};

// Parses the rows of `batch`. A padding row (empty) is parsed as a copy of
// `filler` (a real row of the same step), so every row of the buffers is a
// valid example and the mask says which to ignore. With `slots`, the
// fixed-width features go straight into a free slot when one is large
// enough (else into buffers of their own, as without).
absl::StatusOr<ParsedBatch> ParseRows(const ExampleParser& parser,
                                      const Batch<Record>& batch, const Record* filler,
                                      const std::shared_ptr<SlotPool>& slots = nullptr);

py::object RowObject(const Record& record);
py::object RowObject(const Row& row);
// True for a real row, as data.py's masks.
py::list MaskList(const std::vector<uint8_t>& padded);

// An element as Python sees it; `with_mask`: split steps come with masks.
py::object ToPython(const Record& record, bool with_mask);
py::object ToPython(const Row& row, bool with_mask);
py::object ToPython(const ParsedBatch& batch, bool with_mask);
py::object ToPython(const ParsedReplicas& step, bool with_mask);

template <typename R>
py::list RowsToList(const std::vector<R>& rows) {
  py::list out;
  for (const R& r : rows) out.append(RowObject(r));
  return out;
}

template <typename R>
py::object ToPython(const Batch<R>& batch, bool) {
  return RowsToList(batch.rows);
}

template <typename R>
py::object ToPython(const PerReplicaBatches<R>& step, bool with_mask) {
  py::list out;
  for (const Batch<R>& b : step.replicas) {
    py::list rows = RowsToList(b.rows);
    out.append(with_mask ? py::object(py::make_tuple(rows, MaskList(b.padded)))
                         : py::object(rows));
  }
  return out;
}

py::dict StatsToDict(const pipeline::PipelineStats& s);

}  // namespace shardq::python

#endif  // SHARDQ_PYTHON_SRC_PY_ELEMENTS_H_
