// Python binding of ThreadCoordinator and QueueRunner (include/shardq/
// pipeline/coordinator.h) as `_ThreadCoordinator` and `_QueueRunner`,
// behind shardq.Coordinator, shardq.QueueRunner and shardq.shuffle_batch
// (python/shardq/queues.py). The runner's threads are C++ threads. A
// producer is either
//  * a `_ReadOp`: a shardq reader (text or TFRecord) over a WorkQueue or its
//    input producer, read in C++ without the GIL, one reader per thread; or
//  * a Python callable, called with the GIL taken, returning None at the
//    end or (priority, components) (queues.py builds it from the user's
//    function or iterator).
// Whatever a thread keeps of Python is dropped with the GIL taken
// (KeepAlive), and every wait of the Python thread releases the GIL.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <unistd.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/errors.h"
#include "python/src/py_sources.h"
#include "python/src/py_tf_element.h"
#include "shardq/pipeline/coordinator.h"
#include "shardq/text_line_reader.h"
#include "shardq/tfrecord_reader.h"

namespace py = pybind11;

namespace shardq::python {
namespace {

constexpr absl::Duration kSignalCheck = absl::Milliseconds(100);
// Records a reader thread reads per call before enqueueing them one by one.
constexpr int64_t kReadChunk = 32;


bool PythonIsGoing() { return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0; }

// A Python exception as a status: a shardq.Error keeps its code.
absl::Status StatusOfPythonError(py::error_already_set& e) {
  absl::StatusCode code = absl::StatusCode::kUnknown;
  py::object value = e.value();
  if (py::hasattr(value, "code") && py::isinstance<py::int_>(value.attr("code"))) {
    code = static_cast<absl::StatusCode>(value.attr("code").cast<int>());
  }
  return absl::Status(code, e.what());
}

}  // namespace

// A reader over a queue, to be read by a runner's threads: components are
// picked from each record by index (0: key, 1: value).
struct PyReadOp {
  std::shared_ptr<py::object> source_alive;  // the WorkQueue or producer
  ItemSource* source = nullptr;
  std::string reader;  // "text" or "tfrecord"
  TFRecordReaderOptions::OnCorrupt on_corrupt = TFRecordReaderOptions::OnCorrupt::kFail;
  std::vector<int> picks;
};

namespace {

// One thread's reader and the records it has read but not enqueued yet.
struct ReaderThreadState {
  std::unique_ptr<TextLineReader> text;
  std::unique_ptr<TFRecordReader> tfrecord;
  std::deque<Record> buffer;
};

template <typename T>
typename pipeline::QueueRunner<T>::Producer ReadProducer(const PyReadOp& op,
                                                         std::shared_ptr<void> keep) {
  auto state = std::make_shared<ReaderThreadState>();
  if (op.reader == "text") {
    state->text = std::make_unique<TextLineReader>();
  } else {
    TFRecordReaderOptions options;
    options.on_corrupt = op.on_corrupt;
    state->tfrecord = std::make_unique<TFRecordReader>(options);
  }
  return [state, keep, source = op.source,
          picks = op.picks]() -> absl::StatusOr<std::optional<T>> {
    if (state->buffer.empty()) {
      absl::StatusOr<std::vector<Record>> records =
          state->text != nullptr ? state->text->ReadUpTo(*source, kReadChunk)
                                 : state->tfrecord->ReadUpTo(*source, kReadChunk);
      if (!records.ok()) return records.status();  // OUT_OF_RANGE: the end
      for (Record& r : *records) state->buffer.push_back(std::move(r));
      if (state->buffer.empty()) return std::nullopt;
    }
    Record record = std::move(state->buffer.front());
    state->buffer.pop_front();
    TFElement element;
    for (int pick : picks) element.push_back(BytesComponent(pick == 0 ? record.key : record.value));
    return std::optional<T>(MakeItem<T>(std::move(element), 0));
  };
}

template <typename T>
typename pipeline::QueueRunner<T>::Producer PythonProducer(std::shared_ptr<py::object> fn,
                                                           std::shared_ptr<void> keep) {
  return [fn, keep]() -> absl::StatusOr<std::optional<T>> {
    if (!PythonIsGoing()) return absl::CancelledError("the Python interpreter is exiting");
    py::gil_scoped_acquire gil;
    try {
      py::object result = (*fn)();
      if (result.is_none()) return std::nullopt;
      py::tuple pair = result.cast<py::tuple>();
      return std::optional<T>(
          MakeItem<T>(ElementFromPython(pair[1].cast<py::list>()), pair[0].cast<int64_t>()));
    } catch (py::error_already_set& e) {
      return StatusOfPythonError(e);
    } catch (const std::exception& e) {
      return absl::InternalError(e.what());
    }
  };
}

}  // namespace

// A ThreadCoordinator whose waits release the GIL. Destroying it stops and
// joins its threads, also without the GIL (they may need it to finish). In
// a child forked from the process that made it (a DataLoader worker whose
// garbage collector finds the parent's Coordinator), its threads do not
// exist: it is leaked, not joined.
class PyThreadCoordinator {
 public:
  PyThreadCoordinator()
      : coordinator_(std::make_unique<pipeline::ThreadCoordinator>()), pid_(getpid()) {}
  ~PyThreadCoordinator() {
    if (getpid() != pid_) {
      (void)coordinator_.release();
      return;
    }
    py::gil_scoped_release release;
    coordinator_.reset();
  }
  pipeline::ThreadCoordinator& get() { return *coordinator_; }

  void RequestStop(int code, const std::string& message) {
    py::gil_scoped_release release;
    coordinator_->RequestStop(absl::Status(static_cast<absl::StatusCode>(code), message));
  }

  // True if a stop was requested within `timeout` seconds (None: forever).
  bool WaitForStop(std::optional<double> timeout) {
    return Sliced(timeout, [&](absl::Duration t) { return coordinator_->WaitForStop(t); });
  }

  // True once every thread has finished; false after `timeout` seconds.
  bool Join(std::optional<double> timeout) {
    return Sliced(timeout, [&](absl::Duration t) {
      absl::Status s = coordinator_->Join(t);
      // DEADLINE_EXCEEDED is Join's own timeout, or a thread's error.
      return !absl::IsDeadlineExceeded(s) ||
             s.message().find("Join timed out") == std::string::npos;
    });
  }

  // (code, message) of the first error of a thread or of request_stop.
  py::tuple Error() const {
    absl::Status s = coordinator_->error();
    return py::make_tuple(static_cast<int>(s.code()), std::string(s.message()));
  }

 private:
  template <typename F>
  bool Sliced(std::optional<double> timeout, F wait) {
    const absl::Time deadline = timeout.has_value() ? absl::Now() + absl::Seconds(*timeout)
                                                    : absl::InfiniteFuture();
    while (true) {
      const bool main = OnPythonMainThread();
      const absl::Duration left = std::max(absl::ZeroDuration(), deadline - absl::Now());
      bool done;
      {
        py::gil_scoped_release release;
        done = wait(main ? std::min(kSignalCheck, left) : left);
      }
      if (done || absl::Now() >= deadline) return done;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  std::unique_ptr<pipeline::ThreadCoordinator> coordinator_;
  const pid_t pid_;
};

// A QueueRunner over a queue's TFElements (or prioritized ones).
class PyQueueRunner {
 public:
  PyQueueRunner(py::object queue, const py::list& producers) {
    TFQueueRef ref = QueueOf(queue);
    if (producers.empty()) {
      ThrowStatus(absl::InvalidArgumentError("QueueRunner needs at least one enqueue op"));
    }
    if (ref.plain != nullptr) {
      runner_ = Make<TFElement>(ref.plain, producers);
    } else {
      runner_ = Make<TFPrioritized>(ref.priority, producers);
    }
  }

  void Start(PyThreadCoordinator& coordinator) {
    std::visit([&](auto& r) { ThrowIfError(r->Start(&coordinator.get())); }, runner_);
  }

  int num_threads() const {
    return std::visit([](auto& r) { return r->num_threads(); }, runner_);
  }

 private:
  template <typename T>
  static std::unique_ptr<pipeline::QueueRunner<T>> Make(
      std::shared_ptr<pipeline::Queue<T>> queue, const py::list& producers) {
    // Every producer keeps the queue alive while a thread runs it (the
    // Python queue object may go first).
    std::shared_ptr<void> keep = queue;
    std::vector<typename pipeline::QueueRunner<T>::Producer> made;
    for (py::handle p : producers) {
      if (py::isinstance<PyReadOp>(p)) {
        // The thread keeps the queue and the read op (its source) alive.
        std::shared_ptr<void> alive =
            std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<py::object>>>(
                keep, KeepAlive(py::reinterpret_borrow<py::object>(p)));
        made.push_back(ReadProducer<T>(p.cast<PyReadOp&>(), std::move(alive)));
      } else if (PyCallable_Check(p.ptr()) != 0) {
        made.push_back(PythonProducer<T>(KeepAlive(py::reinterpret_borrow<py::object>(p)), keep));
      } else {
        throw py::type_error("an enqueue op must be callable (or a reader's read())");
      }
    }
    return ValueOrThrow(pipeline::QueueRunner<T>::Create(queue.get(), std::move(made)));
  }

  std::variant<std::unique_ptr<pipeline::QueueRunner<TFElement>>,
               std::unique_ptr<pipeline::QueueRunner<TFPrioritized>>>
      runner_;
};

void BindTFRunners(py::module_& m) {
  py::class_<PyReadOp>(m, "_ReadOp")
      .def(py::init([](py::object source, const std::string& reader,
                       const std::string& on_corrupt, std::vector<int> picks) {
             if (reader != "text" && reader != "tfrecord") {
               ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
                   "a queue runner reads 'text' or 'tfrecord' records, got '", reader, "'")));
             }
             for (int p : picks) {
               if (p != 0 && p != 1) {
                 throw py::value_error("a read component is 0 (key) or 1 (value)");
               }
             }
             auto op = std::make_unique<PyReadOp>();
             op->source = SourceOf(source);
             op->source_alive = KeepAlive(source);
             op->reader = reader;
             op->on_corrupt = ParseOnCorrupt(on_corrupt);
             op->picks = std::move(picks);
             return op;
           }),
           py::arg("source"), py::arg("reader"), py::arg("on_corrupt") = "fail",
           py::arg("picks") = std::vector<int>{0, 1})
      .def_readonly("reader", &PyReadOp::reader)
      .def_readonly("picks", &PyReadOp::picks);

  py::class_<PyThreadCoordinator>(m, "_ThreadCoordinator")
      .def(py::init<>())
      .def("request_stop", &PyThreadCoordinator::RequestStop, py::arg("code") = 0,
           py::arg("message") = "")
      .def("should_stop", [](PyThreadCoordinator& c) { return c.get().ShouldStop(); })
      .def("wait_for_stop", &PyThreadCoordinator::WaitForStop, py::arg("timeout") = py::none())
      .def("join", &PyThreadCoordinator::Join, py::arg("timeout") = py::none())
      .def("error", &PyThreadCoordinator::Error);

  py::class_<PyQueueRunner>(m, "_QueueRunner")
      .def(py::init<py::object, const py::list&>(), py::arg("queue"), py::arg("producers"))
      .def("start", &PyQueueRunner::Start, py::arg("coordinator"))
      .def_property_readonly("num_threads", &PyQueueRunner::num_threads);
}

}  // namespace shardq::python
