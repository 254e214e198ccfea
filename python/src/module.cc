// The native module behind the `shardq` Python package.
#include <cstdlib>

#include "pybind11/pybind11.h"
#include "python/src/py_sources.h"
#include "python/src/py_cluster.h"
#include "python/src/py_slots.h"
#include "python/src/py_tf_element.h"
#include "src/log/mutex_mode.h"
#include "src/rpc/grpc_fork.h"

namespace {

// Readers hand Python each record as a bytes object of its own, and a
// batch of them is dropped at once: 64 records of 64 KiB free 4 MiB at the
// top of malloc's heap, which glibc gives back to the kernel (its trim
// threshold starts at 128 KiB), only to fault the same pages in again for
// the next batch: 130,000 page faults per GiB read (bench/results/
// object_store.md). glibc raises its thresholds by itself the first time a
// block it had mapped is freed (mallopt(3), M_MMAP_THRESHOLD: to that
// block's size, and the trim threshold to twice it); one such block of 8
// MiB, freed here, raises them now rather than whenever (and if ever) the
// process frees one, without turning that adjustment off as a mallopt
// call would.
void RaiseMallocTrimThreshold() {
  void* volatile block = std::malloc(8 << 20);
  std::free(block);
}

}  // namespace

PYBIND11_MODULE(_shardq, m) {
  m.doc() = "shardq native core (use the `shardq` package, not this module)";
  // Before any channel: DataLoader workers fork from processes that used
  // gRPC (src/rpc/grpc_fork.h).
  shardq::PreferForkSafePolling();
  // The pipeline's and the client's threads lock often: no deadlock
  // detector on every lock (src/log/mutex_mode.h).
  shardq::UseProductionMutexMode();
  RaiseMallocTrimThreshold();
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
