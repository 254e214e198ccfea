// Binding of FindClusterCoordinator (src/client/cluster_coordinator.h) for
// python/shardq/cluster.py.
#ifndef SHARDQ_PYTHON_PY_CLUSTER_H_
#define SHARDQ_PYTHON_PY_CLUSTER_H_

#include "pybind11/pybind11.h"

namespace shardq::python {

void BindCluster(pybind11::module_& m);

}  // namespace shardq::python

#endif  // SHARDQ_PYTHON_PY_CLUSTER_H_
