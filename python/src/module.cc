// The native module behind the `shardq` Python package.
#include "pybind11/pybind11.h"
#include "python/src/py_sources.h"
#include "python/src/py_cluster.h"
#include "python/src/py_slots.h"
#include "python/src/py_tf_element.h"
#include "src/log/mutex_mode.h"
#include "src/rpc/grpc_fork.h"

PYBIND11_MODULE(_shardq, m) {
  m.doc() = "shardq native core (use the `shardq` package, not this module)";
  // Before any channel: DataLoader workers fork from processes that used
  // gRPC (src/rpc/grpc_fork.h).
  shardq::PreferForkSafePolling();
  // The pipeline's and the client's threads lock often: no deadlock
  // detector on every lock (src/log/mutex_mode.h).
  shardq::UseProductionMutexMode();
  shardq::python::BindWorkQueue(m);
  shardq::python::BindReaders(m);
  shardq::python::BindExample(m);
  shardq::python::BindSummary(m);
  shardq::python::BindPipeline(m);
  shardq::python::BindTorchSupport(m);
  shardq::python::BindTFQueues(m);
  shardq::python::BindCluster(m);
  shardq::python::BindDownload(m);
  shardq::python::BindSlots(m);
}
