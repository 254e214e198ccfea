// Python-side holders of the C++ item sources, shared by the bindings of
// the queue and of the readers.
#ifndef SHARDQ_PYTHON_PY_SOURCES_H_
#define SHARDQ_PYTHON_PY_SOURCES_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "pybind11/pybind11.h"
#include "shardq/input_producer.h"
#include "shardq/table_reader.h"
#include "shardq/tfrecord_reader.h"
#include "shardq/work_queue.h"

namespace shardq::python {

// A WorkQueue as Python sees it: take() returns the item string and
// remembers the lease, so complete(item) / release(item) can name it.
// Used from one Python thread at a time (the GIL serialises callers).
class PyWorkQueue {
 public:
  explicit PyWorkQueue(std::unique_ptr<WorkQueue> queue);
  ~PyWorkQueue();

  // Blocks (GIL released, Ctrl-C honoured); raises OutOfRangeError at end.
  WorkItem TakeItem(std::optional<double> timeout_seconds);
  std::string Take(std::optional<double> timeout_seconds);
  void Complete(const std::string& item);
  void Release(const std::string& item);
  pybind11::dict Stats();
  void Close();
  void SaveCheckpoint(const std::string& path);
  WorkQueue* queue() { return queue_.get(); }

 private:
  std::unique_ptr<WorkQueue> queue_;
  // Removes `item` from taken_ and returns it; NotFoundError otherwise.
  WorkItem Untrack(const std::string& item);
  std::deque<WorkItem> taken_;  // leased through take(), oldest first
};

// An InputProducer kept alive together with its queue.
class PyProducer {
 public:
  PyProducer(std::shared_ptr<PyWorkQueue> queue, int64_t capacity)
      : queue_(std::move(queue)), producer_(queue_->queue()->MakeInputProducer(capacity)) {}
  ~PyProducer() {
    pybind11::gil_scoped_release release;
    producer_.reset();
  }
  InputProducer* producer() { return producer_.get(); }

 private:
  std::shared_ptr<PyWorkQueue> queue_;
  std::unique_ptr<InputProducer> producer_;
};

// The ItemSource behind a Python object that is a queue or a producer;
// raises TypeError otherwise.
ItemSource* SourceOf(pybind11::handle source);

// A table row as a dict column -> None, int, float, str or bytes; None for
// a default-constructed (padding) row. Needs the GIL.
pybind11::object RowToPython(const Row& row);

// "fail" or "skip"; InvalidArgumentError otherwise.
TFRecordReaderOptions::OnCorrupt ParseOnCorrupt(const std::string& mode);

void BindWorkQueue(pybind11::module_& m);
void BindReaders(pybind11::module_& m);
void BindExample(pybind11::module_& m);
void BindSummary(pybind11::module_& m);
void BindPipeline(pybind11::module_& m);

}  // namespace shardq::python

#endif  // SHARDQ_PYTHON_PY_SOURCES_H_
