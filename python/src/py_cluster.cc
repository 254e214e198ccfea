#include "python/src/py_cluster.h"

#include <optional>
#include <string>

#include "pybind11/pybind11.h"
#include "python/src/errors.h"
#include "src/client/cluster_coordinator.h"

namespace py = pybind11;

namespace shardq::python {

void BindCluster(py::module_& m) {
  m.def(
      "_cluster_coordinator",
      [](const std::string& address) -> py::object {
        std::optional<ClusterCoordinator> found =
            ValueOrThrow(FindClusterCoordinator(address, ProcessEnv()));
        if (!found.has_value()) return py::none();
        return py::make_tuple(found->address, found->serve_here, found->source);
      },
      py::arg("address"),
      "(address, serve_here, source) of the job's in-process coordinator, or None.");
}

}  // namespace shardq::python
