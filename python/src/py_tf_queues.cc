// Python binding of the pipeline's bounded queues (include/shardq/pipeline/
// queues.h) as `_TFQueue`, behind shardq.FIFOQueue, RandomShuffleQueue and
// PriorityQueue (python/shardq/queues.py). Elements are TFElements
// (py_tf_element.h). Every blocking call releases the GIL; on Python's main
// thread it waits in 100 ms slices and runs the signal handlers between
// them, so Ctrl-C raises KeyboardInterrupt (another thread waits in one
// call, keeping its turn among blocked callers exactly as the C++ queue
// defines it).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/errors.h"
#include "python/src/py_tf_element.h"
#include "shardq/pipeline/queues.h"

namespace py = pybind11;

namespace shardq::python {
namespace {

constexpr absl::Duration kSignalCheck = absl::Milliseconds(100);

const absl::Status& StatusOf(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

absl::Duration TimeoutOf(std::optional<double> seconds) {
  if (!seconds.has_value()) return absl::InfiniteDuration();
  if (!(*seconds >= 0)) {
    ThrowStatus(absl::InvalidArgumentError(
        absl::StrCat("timeout must be None or >= 0 seconds, got ", *seconds)));
  }
  return absl::Seconds(*seconds);
}

// Runs `call(timeout)` without the GIL (see the top of this file).
// `what` names the queue and the call in the timeout error of a sliced wait.
template <typename F>
auto WaitReleased(absl::Duration timeout, const std::string& what, F call)
    -> decltype(call(timeout)) {
  if (!OnPythonMainThread()) {
    py::gil_scoped_release release;
    return call(timeout);
  }
  const absl::Time deadline = timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + timeout;
  while (true) {
    const absl::Duration slice =
        std::min(kSignalCheck, std::max(absl::ZeroDuration(), deadline - absl::Now()));
    decltype(call(timeout)) result = [&] {
      py::gil_scoped_release release;
      return call(slice);
    }();
    if (!absl::IsDeadlineExceeded(StatusOf(result))) return result;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " timed out after ", absl::FormatDuration(timeout)));
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

// TF raises CancelledError for an enqueue to a closed queue; the C++ queue
// says FAILED_PRECONDITION (same message).
absl::Status AsEnqueueError(absl::Status s) {
  if (absl::IsFailedPrecondition(s)) return absl::CancelledError(s.message());
  return s;
}

TFElement& ElementOf(TFElement& e) { return e; }
TFElement& ElementOf(TFPrioritized& p) { return p.value; }


py::object PriorityOf(const TFElement&) { return py::none(); }
py::object PriorityOf(const TFPrioritized& p) { return py::int_(p.priority); }

}  // namespace

// One queue of any kind. Thread-safe (the C++ queue is; the GIL guards the
// conversions).
class PyTFQueue {
 public:
  PyTFQueue(const std::string& kind, const std::string& name, int64_t capacity,
            int64_t min_after_dequeue, uint64_t seed) {
    if (kind == "fifo") {
      pipeline::QueueOptions o;
      o.name = name;
      o.capacity = capacity;
      ref_.plain = ValueOrThrow(pipeline::FifoQueue<TFElement>::Create(o));
    } else if (kind == "shuffle") {
      pipeline::RandomShuffleQueueOptions o;
      o.name = name;
      o.capacity = capacity;
      o.min_after_dequeue = min_after_dequeue;
      o.seed = seed;
      ref_.plain = ValueOrThrow(pipeline::RandomShuffleQueue<TFElement>::Create(o));
    } else if (kind == "priority") {
      pipeline::QueueOptions o;
      o.name = name;
      o.capacity = capacity;
      ref_.priority = ValueOrThrow(pipeline::PriorityQueue<TFElement>::Create(o));
    } else {
      ThrowStatus(absl::InvalidArgumentError(
          absl::StrCat("queue kind must be fifo, shuffle or priority, got '", kind, "'")));
    }
  }

  ~PyTFQueue() {
    py::gil_scoped_release release;
    ref_ = TFQueueRef{};
  }

  const TFQueueRef& ref() const { return ref_; }

  // Calls f with the queue, whichever kind it is.
  template <typename F>
  auto Visit(F f) const {
    return ref_.plain != nullptr ? f(*ref_.plain) : f(*ref_.priority);
  }
  std::string name() const {
    return ref_.plain != nullptr ? ref_.plain->name() : ref_.priority->name();
  }
  std::string What(const char* op) const { return absl::StrCat("queue '", name(), "': ", op); }

  void Enqueue(const py::list& components, int64_t priority, std::optional<double> timeout) {
    TFElement element = ElementFromPython(components);
    Visit([&](auto& q) {
      using T = typename std::decay_t<decltype(q)>::value_type;
      const T item = MakeItem<T>(std::move(element), priority);
      absl::Status s = WaitReleased(TimeoutOf(timeout), What("enqueue"),
                                    [&](absl::Duration t) { return q.Enqueue(item, t); });
      ThrowIfError(AsEnqueueError(s));
      return 0;
    });
  }

  void EnqueueMany(const py::list& components, const std::vector<int64_t>& priorities,
                   std::optional<double> timeout) {
    std::vector<TFElement> elements = ElementsFromPython(components);
    const absl::Duration total = TimeoutOf(timeout);
    Visit([&](auto& q) {
      using T = typename std::decay_t<decltype(q)>::value_type;
      std::vector<T> items;
      items.reserve(elements.size());
      for (size_t i = 0; i < elements.size(); ++i) {
        items.push_back(
            MakeItem<T>(std::move(elements[i]), i < priorities.size() ? priorities[i] : 0));
      }
      absl::Status s;
      if (!OnPythonMainThread()) {
        py::gil_scoped_release release;
        s = q.EnqueueMany(std::move(items), total);
      } else {
        // One element at a time, so that a slice that runs out loses
        // nothing; another producer may get in between two of them.
        const absl::Time deadline =
            total == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + total;
        for (size_t i = 0; i < items.size() && s.ok(); ++i) {
          const absl::Duration left = deadline == absl::InfiniteFuture()
                                          ? absl::InfiniteDuration()
                                          : std::max(absl::ZeroDuration(), deadline - absl::Now());
          s = WaitReleased(left, What("enqueue_many"),
                           [&](absl::Duration t) { return q.Enqueue(items[i], t); });
          if (!s.ok()) {
            s = absl::Status(s.code(), absl::StrCat(s.message(), " (", i, " of ", items.size(),
                                                    " elements enqueued)"));
          }
        }
        if (items.empty() && q.closed()) s = absl::FailedPreconditionError(absl::StrCat(
            What("enqueue_many"), ": the queue is closed"));
      }
      ThrowIfError(AsEnqueueError(s));
      return 0;
    });
  }

  // (priority or None, components).
  py::tuple Dequeue(std::optional<double> timeout) {
    return Visit([&](auto& q) {
      auto item = WaitReleased(TimeoutOf(timeout), What("dequeue"),
                               [&](absl::Duration t) { return q.Dequeue(t); });
      auto value = ValueOrThrow(std::move(item));
      return py::make_tuple(PriorityOf(value), ElementToPython(ElementOf(value)));
    });
  }

  // (list of priorities or None, components stacked).
  py::tuple DequeueMany(int64_t n, bool up_to, std::optional<double> timeout) {
    return Visit([&](auto& q) {
      auto items = WaitReleased(TimeoutOf(timeout), What(up_to ? "dequeue_up_to" : "dequeue_many"),
                                [&](absl::Duration t) {
                                  return up_to ? q.DequeueUpTo(n, t) : q.DequeueMany(n, t);
                                });
      auto values = ValueOrThrow(std::move(items));
      std::vector<TFElement> elements;
      py::object priorities = py::none();
      py::list prios;
      for (auto& v : values) {
        py::object p = PriorityOf(v);
        if (!p.is_none()) prios.append(p);
        elements.push_back(std::move(ElementOf(v)));
      }
      if (ref_.priority != nullptr) priorities = prios;
      return py::make_tuple(priorities, ElementsToPython(elements, name()));
    });
  }

  void Close(bool cancel_pending) {
    py::gil_scoped_release release;
    Visit([&](auto& q) {
      q.Close(cancel_pending);
      return 0;
    });
  }

  int64_t size() const { return Visit([](auto& q) { return q.size(); }); }
  bool closed() const { return Visit([](auto& q) { return q.closed(); }); }
  int64_t capacity() const { return Visit([](auto& q) { return q.capacity(); }); }
  int64_t waiting_producers() const {
    return Visit([](auto& q) { return q.num_waiting_producers(); });
  }
  int64_t waiting_consumers() const {
    return Visit([](auto& q) { return q.num_waiting_consumers(); });
  }

 private:
  TFQueueRef ref_;
};

TFQueueRef QueueOf(py::handle queue) {
  py::handle native = py::hasattr(queue, "_native") ? queue.attr("_native") : queue;
  if (!py::isinstance<PyTFQueue>(native)) {
    throw py::type_error("needs a shardq.FIFOQueue, RandomShuffleQueue or PriorityQueue");
  }
  return native.cast<PyTFQueue&>().ref();
}

void BindTFQueues(py::module_& m) {
  py::class_<PyTFQueue>(m, "_TFQueue")
      .def(py::init<const std::string&, const std::string&, int64_t, int64_t, uint64_t>(),
           py::arg("kind"), py::arg("name"), py::arg("capacity"),
           py::arg("min_after_dequeue") = 0, py::arg("seed") = 0)
      .def("enqueue", &PyTFQueue::Enqueue, py::arg("components"), py::arg("priority") = 0,
           py::arg("timeout") = py::none())
      .def("enqueue_many", &PyTFQueue::EnqueueMany, py::arg("components"),
           py::arg("priorities") = std::vector<int64_t>{}, py::arg("timeout") = py::none())
      .def("dequeue", &PyTFQueue::Dequeue, py::arg("timeout") = py::none())
      .def("dequeue_many", &PyTFQueue::DequeueMany, py::arg("n"), py::arg("up_to"),
           py::arg("timeout") = py::none())
      .def("close", &PyTFQueue::Close, py::arg("cancel_pending"))
      .def("size", &PyTFQueue::size)
      .def_property_readonly("closed", &PyTFQueue::closed)
      .def_property_readonly("capacity", &PyTFQueue::capacity)
      .def_property_readonly("name", &PyTFQueue::name)
      .def_property_readonly("waiting_producers", &PyTFQueue::waiting_producers)
      .def_property_readonly("waiting_consumers", &PyTFQueue::waiting_consumers);
  BindTFRunners(m);
}

}  // namespace shardq::python
