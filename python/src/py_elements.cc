#include "python/src/py_elements.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "pybind11/numpy.h"
#include "python/src/py_example.h"

namespace shardq::python {
namespace {

py::dict FeaturesToDict(const ParsedBatch& batch) {
  py::dict out;
  for (const ParsedFeature& f : batch.features) out[py::str(f.name)] = FeatureToNumpy(f);
  return out;
}

// A numpy bool array, True for a real row.
py::array MaskArray(const ParsedBatch& batch, int64_t rows) {
  py::array_t<bool> mask(rows);
  bool* m = mask.mutable_data();
  for (int64_t i = 0; i < rows; ++i) {
    m[i] = batch.padded.empty() || batch.padded[static_cast<size_t>(i)] == 0;
  }
  return std::move(mask);
}

}  // namespace

absl::StatusOr<ParsedBatch> ParseRows(const ExampleParser& parser,
                                      const Batch<Record>& batch, const Record* filler,
                                      const std::shared_ptr<SlotPool>& slots) {
  std::vector<absl::string_view> views;
  views.reserve(batch.rows.size());
  bool any_padding = false;
  for (size_t i = 0; i < batch.rows.size(); ++i) {
    const bool pad = i < batch.padded.size() && batch.padded[i] != 0;
    any_padding |= pad;
    views.emplace_back(pad && filler != nullptr ? filler->value : batch.rows[i].value);
  }
  ParsedBatch out;
  const int64_t placed = slots != nullptr ? parser.PlacedBytes(static_cast<int64_t>(views.size())) : 0;
  if (placed > 0) out.claim = SlotClaim::Make(slots, placed);
  // A failed parse drops the claim: the slot is free again.
  absl::StatusOr<std::vector<ParsedFeature>> features =
      parser.Parse(views, out.claim != nullptr ? out.claim->data() : nullptr);
  if (!features.ok()) return features.status();
  out.features = *std::move(features);
  for (ParsedFeature& f : out.features) {
    if (f.placed != nullptr) f.keep = out.claim;
  }
  if (any_padding) out.padded = batch.padded;
  return out;
}

py::object RowObject(const Record& record) { return py::bytes(record.value); }
py::object RowObject(const Row& row) { return RowToPython(row); }

py::list MaskList(const std::vector<uint8_t>& padded) {
  py::list mask;
  for (uint8_t p : padded) mask.append(py::bool_(p == 0));
  return mask;
}

py::object ToPython(const Record& record, bool) { return RowObject(record); }
py::object ToPython(const Row& row, bool) { return RowObject(row); }

py::object ToPython(const ParsedBatch& batch, bool) {
  py::dict out = FeaturesToDict(batch);
  // In Python's hands now: the slot is freed by the process that reads it.
  if (batch.claim != nullptr) batch.claim->Handed();
  return std::move(out);
}

py::object ToPython(const ParsedReplicas& step, bool with_mask) {
  py::list out;
  for (const ParsedBatch& b : step.replicas) {
    py::dict features = FeaturesToDict(b);
    if (!with_mask) {
      out.append(features);
      continue;
    }
    const int64_t rows = b.features.empty() ? 0 : b.features[0].shape[0];
    out.append(py::make_tuple(features, MaskArray(b, rows)));
  }
  return out;
}

py::dict StatsToDict(const pipeline::PipelineStats& s) {
  py::dict d;
  d["items_taken"] = s.items_taken;
  d["items_completed"] = s.items_completed;
  d["items_held"] = s.items_held;
  d["records_read"] = s.records_read;
  d["records_consumed"] = s.records_consumed;
  d["records_dropped"] = s.records_dropped;
  d["stalls"] = s.stalls;
  d["shuffle_drains"] = s.shuffle_drains;
  d["corrupt_regions"] = s.corrupt_regions;
  d["skipped_bytes"] = s.skipped_bytes;
  d["short_batches"] = s.short_batches;
  d["records_consumed_early"] = s.records_consumed_early;
  return d;
}

}  // namespace shardq::python
