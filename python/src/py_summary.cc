// add_summary: a queue's water level sampled into TensorBoard event files.
#include <memory>
#include <optional>
#include <string>

#include "absl/time/clock.h"
#include "pybind11/pybind11.h"
#include "python/src/errors.h"
#include "python/src/py_sources.h"
#include "src/observe/summary_writer.h"

namespace py = pybind11;

namespace shardq::python {

// Not thread-safe; shardq.summary drives it from one thread.
class PyQueueSummary {
 public:
  PyQueueSummary(std::shared_ptr<PyWorkQueue> queue, const std::string& logdir)
      : queue_(std::move(queue)), writer_(ValueOrThrow(EventFileWriter::Create(logdir))) {}

  // Samples the queue once and appends its scalars (step increments).
  void Sample() {
    absl::Status status;
    {
      py::gil_scoped_release release;
      absl::StatusOr<QueueStats> stats = queue_->queue()->Stats();
      if (!stats.ok()) {
        status = stats.status();
      } else {
        const absl::Time now = absl::Now();
        QueueMetrics m = DeriveMetrics(*stats, now, last_ ? &*last_ : nullptr, last_at_);
        status = writer_->WriteScalars(step_++, now, Scalars(m));
        if (status.ok()) status = writer_->Flush();
        last_ = *std::move(stats);
        last_at_ = now;
      }
    }
    ThrowIfError(status);
  }
  const std::string& path() const { return writer_->path(); }

 private:
  std::shared_ptr<PyWorkQueue> queue_;
  std::unique_ptr<EventFileWriter> writer_;
  std::optional<QueueStats> last_;
  absl::Time last_at_;
  int64_t step_ = 0;
};

void BindSummary(py::module_& m) {
  py::class_<PyQueueSummary>(m, "_QueueSummary")
      .def(py::init([](py::object queue, const std::string& logdir) {
             py::object native = py::hasattr(queue, "_native") ? queue.attr("_native") : queue;
             return std::make_unique<PyQueueSummary>(
                 native.cast<std::shared_ptr<PyWorkQueue>>(), logdir);
           }),
           py::arg("queue"), py::arg("logdir"))
      .def("sample", &PyQueueSummary::Sample)
      .def_property_readonly("path", &PyQueueSummary::path);
}

}  // namespace shardq::python
