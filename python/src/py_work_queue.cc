// Python bindings of WorkQueue, its item iterator and input producer, and
// of an in-process coordinator server.
#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/errors.h"
#include "python/src/py_sources.h"
#include "shardq/input_producer.h"
#include "shardq/work_queue.h"
#include "src/client/retry.h"
#include "src/server/grpc_service.h"

namespace py = pybind11;

namespace shardq::python {
namespace {

// How often a blocked call wakes to let Python handle Ctrl-C.
constexpr absl::Duration kSignalCheck = absl::Milliseconds(100);

py::dict StatsToDict(const QueueStats& s) {
  py::dict d;
  d["name"] = s.name;
  d["seed"] = s.seed;
  d["items"] = s.num_items;
  d["epochs"] = s.num_epochs;
  d["pending"] = s.pending;
  d["leased"] = s.leased;
  d["completed"] = s.completed;
  d["taken"] = s.taken;
  d["expired"] = s.expired;
  d["released"] = s.released;
  d["given_back"] = s.given_back;
  d["records"] = s.records;
  d["duplicates"] = s.duplicates;
  d["splits"] = s.splits;
  d["split_items_open"] = s.split_items_open;
  d["finished"] = s.finished;
  d["failed"] = s.failed;
  d["refused_completions"] = s.refused_completions;
  d["epochs_done"] = s.epochs_done;
  py::list epochs;
  for (const EpochStats& e : s.epochs) {
    py::dict ed;
    ed["epoch"] = e.epoch;
    ed["failed"] = e.failed;
    ed["pending"] = e.pending;
    ed["leased"] = e.leased;
    ed["completed"] = e.completed;
    epochs.append(ed);
  }
  d["per_epoch"] = epochs;
  py::dict workers;
  for (const auto& [name, w] : s.workers) {
    py::dict wd;
    wd["taken"] = w.taken;
    wd["completed"] = w.completed;
    wd["held"] = w.held;
    wd["records"] = w.records;
    wd["sessions"] = w.sessions;
    wd["items_per_second"] = w.items_per_second;
    workers[py::str(name)] = wd;
  }
  d["workers"] = workers;
  return d;
}

}  // namespace

PyWorkQueue::PyWorkQueue(std::unique_ptr<WorkQueue> queue) : queue_(std::move(queue)) {}

PyWorkQueue::~PyWorkQueue() {
  py::gil_scoped_release release;
  producer_.reset();
  queue_.reset();
}

InputProducer* PyWorkQueue::Producer(int64_t capacity) {
  if (capacity < 0) {
    ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
        "queue '", queue_->name(), "': input_producer capacity must be >= 0, got ", capacity)));
  }
  if (producer_ == nullptr) {
    py::gil_scoped_release release;
    producer_ = queue_->MakeInputProducer(capacity);
    return producer_.get();
  }
  if (capacity > 0 && std::min(capacity, queue_->num_clients()) != producer_->capacity()) {
    ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
        "queue '", queue_->name(), "' already has an input producer of capacity ",
        producer_->capacity(), "; input_producer(capacity=", capacity,
        ") cannot change it (a queue has one producer)")));
  }
  return producer_.get();
}

WorkItem PyWorkQueue::TakeItem(std::optional<double> timeout_seconds) {
  const absl::Time deadline = timeout_seconds.has_value()
                                  ? absl::Now() + absl::Seconds(*timeout_seconds)
                                  : absl::InfiniteFuture();
  while (true) {
    absl::StatusOr<WorkItem> item;
    {
      py::gil_scoped_release release;
      item = queue_->Take(std::min(kSignalCheck, std::max(absl::ZeroDuration(),
                                                          deadline - absl::Now())));
    }
    if (item.ok()) return *std::move(item);
    if (!absl::IsDeadlineExceeded(item.status())) ThrowStatus(item.status());
    if (absl::Now() >= deadline) {
      ThrowStatus(absl::DeadlineExceededError(absl::StrCat(
          "queue '", queue_->name(), "': no item within ", *timeout_seconds,
          " s (the remaining items are held by other workers)")));
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

py::tuple PyWorkQueue::Take(std::optional<double> timeout_seconds) {
  // PAI's take() has no complete(): at the num_clients limit, the oldest
  // item taken through take() is the one the worker has finished.
  if (static_cast<int64_t>(taken_.size()) >= queue_->num_clients()) {
    WorkItem oldest = taken_.front();
    taken_.pop_front();
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = queue_->Complete(oldest);
    }
    ThrowIfError(s);
  }
  WorkItem item = TakeItem(timeout_seconds);
  taken_.push_back(item);
  const auto bound = [](const std::optional<int64_t>& v) -> py::object {
    return v.has_value() ? py::object(py::int_(*v)) : py::object(py::none());
  };
  if (!item.spec.has_value()) {
    return py::make_tuple(item.item, item.epoch, item.item, py::none(), py::none(),
                          item.work_size);
  }
  return py::make_tuple(item.item, item.epoch, item.spec->work, bound(item.spec->start),
                        bound(item.spec->end), item.work_size);
}

WorkItem PyWorkQueue::Untrack(const std::string& item,
                              std::optional<int64_t> epoch) {
  auto found = taken_.end();
  std::vector<int64_t> epochs;  // of the copies held, when ambiguous
  for (auto it = taken_.begin(); it != taken_.end(); ++it) {
    if (it->item != item || (epoch.has_value() && it->epoch != *epoch)) continue;
    if (found == taken_.end()) found = it;
    epochs.push_back(it->epoch);
  }
  if (found == taken_.end()) {
    ThrowStatus(absl::NotFoundError(absl::StrCat(
        "queue '", queue_->name(), "': item '", item, "'",
        epoch.has_value() ? absl::StrCat(" of epoch ", *epoch) : "",
        " is not held by this worker")));
  }
  if (epochs.size() > 1) {
    // Completing the wrong one would count the other epoch's copy as read
    // (and re-read this one after a crash): refuse rather than guess.
    ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
        "queue '", queue_->name(), "': item '", item,
        "' is held in several epochs (", absl::StrJoin(epochs, ", "),
        "): pass the Item that take() returned, which carries its epoch")));
  }
  WorkItem untracked = *found;
  taken_.erase(found);
  return untracked;
}

int64_t PyWorkQueue::Complete(const std::string& item,
                              std::optional<int64_t> epoch) {
  const WorkItem done = Untrack(item, epoch);
  ThrowIfError([&] {
    py::gil_scoped_release release;
    return queue_->Complete(done);
  }());
  return done.epoch;
}

int64_t PyWorkQueue::Release(const std::string& item,
                             std::optional<int64_t> epoch) {
  const WorkItem given_back = Untrack(item, epoch);
  ThrowIfError([&] {
    py::gil_scoped_release release;
    return queue_->Release(given_back);
  }());
  return given_back.epoch;
}

py::dict PyWorkQueue::Stats() {
  absl::StatusOr<QueueStats> stats;
  {
    py::gil_scoped_release release;
    stats = queue_->Stats();
  }
  return StatsToDict(ValueOrThrow(std::move(stats)));
}

void PyWorkQueue::Close() {
  py::gil_scoped_release release;
  for (const WorkItem& item : taken_) queue_->Release(item).IgnoreError();
  taken_.clear();
  queue_->Close();
}

void PyWorkQueue::SaveCheckpoint(const std::string& path) {
  absl::Status s;
  {
    py::gil_scoped_release release;
    s = queue_->SaveCheckpoint(path);
  }
  ThrowIfError(s);
}

// The input_dataset shape: yields item strings, completing each when the
// next is requested.
class PyItemIterator {
 public:
  explicit PyItemIterator(std::shared_ptr<PyWorkQueue> queue) : queue_(std::move(queue)) {}
  ~PyItemIterator() {
    if (current_.has_value()) {
      py::gil_scoped_release release;
      queue_->queue()->Release(*current_).IgnoreError();
    }
  }
  std::string Next() {
    if (current_.has_value()) {
      absl::Status s;
      {
        py::gil_scoped_release release;
        s = queue_->queue()->Complete(*current_);
      }
      current_.reset();
      ThrowIfError(s);
    }
    if (done_) throw py::stop_iteration();
    try {
      current_ = queue_->TakeItem(std::nullopt);
    } catch (py::error_already_set& e) {
      if (e.matches(py::module_::import("shardq.errors").attr("OutOfRangeError"))) {
        done_ = true;
        throw py::stop_iteration();
      }
      throw;
    }
    return current_->item;
  }

 private:
  std::shared_ptr<PyWorkQueue> queue_;
  std::optional<WorkItem> current_;
  bool done_ = false;
};

// The client's interrupt check (src/client/retry.h): on the thread that
// imported shardq (Python's main thread, where signals are handled) it runs
// Python's signal handlers. A handler that raises (Ctrl-C:
// KeyboardInterrupt) leaves its exception set; the waiting call ends with
// CANCELLED, and ThrowStatus re-raises the pending exception instead.
std::thread::id g_python_main_thread;

bool PythonInterruptRequested() {
  if (std::this_thread::get_id() != g_python_main_thread) return false;
  py::gil_scoped_acquire gil;
  return PyErr_Occurred() != nullptr || PyErr_CheckSignals() != 0;
}

void BindWorkQueue(py::module_& m) {
  g_python_main_thread = std::this_thread::get_id();
  SetInterruptCheck(&PythonInterruptRequested);
  py::class_<PyWorkQueue, std::shared_ptr<PyWorkQueue>>(m, "_WorkQueue")
      .def(py::init([](std::vector<std::string> works, int64_t num_epochs, bool shuffle,
                       std::optional<uint64_t> seed, std::optional<std::string> prefix,
                       std::optional<int64_t> num_slices, int64_t num_clients,
                       std::string name, std::optional<std::string> address,
                       double lease_timeout, std::optional<std::string> worker_id,
                       std::optional<std::string> token, std::optional<std::string> tls_ca,
                       bool attach, bool split, int64_t split_min_residual,
                       double connect_timeout, int64_t take_ahead) {
             WorkQueueOptions o;
             o.works = std::move(works);
             o.num_epochs = num_epochs;
             o.shuffle = shuffle;
             o.seed = seed;
             o.prefix = prefix.value_or("");
             o.num_slices = num_slices;
             o.num_clients = num_clients;
             o.name = std::move(name);
             o.address = address.value_or("");
             o.lease_timeout = absl::Seconds(lease_timeout);
             o.worker_id = worker_id.value_or("");
             o.token = token.value_or("");
             o.tls_ca_file = tls_ca.value_or("");
             o.split = split;
             o.split_min_residual = split_min_residual;
             if (take_ahead < 0) {
               ThrowStatus(absl::InvalidArgumentError(
                   absl::StrCat("take_ahead must be >= 0, got ", take_ahead)));
             }
             o.take_ahead = take_ahead;
             if (!(connect_timeout > 0)) {
               ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
                   "connect_timeout must be > 0 seconds, got ", connect_timeout)));
             }
             o.connect_timeout = absl::Seconds(connect_timeout);
             absl::StatusOr<std::unique_ptr<WorkQueue>> queue;
             {
               py::gil_scoped_release release;
               queue = attach ? WorkQueue::Attach(o) : WorkQueue::Create(o);
             }
             return std::make_shared<PyWorkQueue>(ValueOrThrow(std::move(queue)));
           }),
           py::arg("works"), py::arg("num_epochs"), py::arg("shuffle"), py::arg("seed"),
           py::arg("prefix"), py::arg("num_slices"), py::arg("num_clients"), py::arg("name"),
           py::arg("address"), py::arg("lease_timeout"), py::arg("worker_id"),
           py::arg("token"), py::arg("tls_ca"), py::arg("attach"), py::arg("split") = true,
           py::arg("split_min_residual") = 1, py::arg("connect_timeout") = 60.0,
           py::arg("take_ahead") = 1)
      .def("take", &PyWorkQueue::Take, py::arg("timeout") = py::none())
      .def("complete", &PyWorkQueue::Complete, py::arg("item"),
           py::arg("epoch") = py::none())
      .def("release", &PyWorkQueue::Release, py::arg("item"),
           py::arg("epoch") = py::none())
      .def("stats", &PyWorkQueue::Stats)
      .def("close", &PyWorkQueue::Close)
      .def("save_checkpoint", &PyWorkQueue::SaveCheckpoint, py::arg("path"))
      // Equal steps (WorkQueue::AgreeSteps), for shardq.data / shardq.torch.
      .def(
          "_agree_steps",
          [](PyWorkQueue& q, std::string key, std::string participant, int64_t participants,
             int64_t count, bool done) {
            StepReport report;
            report.key = std::move(key);
            report.participant = std::move(participant);
            report.participants = participants;
            report.count = count;
            report.done = done;
            absl::StatusOr<StepTally> tally;
            {
              py::gil_scoped_release release;
              tally = q.queue()->AgreeSteps(report);
            }
            const StepTally t = ValueOrThrow(std::move(tally));
            py::dict out;
            out["granted"] = t.granted;
            out["agreed"] = t.agreed;
            out["steps"] = t.steps;
            out["max_count"] = t.max_count;
            out["reported"] = t.reported;
            out["done"] = t.done;
            return out;
          },
          py::arg("key"), py::arg("participant"), py::arg("participants"), py::arg("count"),
          py::arg("done"))
      .def("input_dataset",
           [](std::shared_ptr<PyWorkQueue> self) { return PyItemIterator(std::move(self)); })
      .def("input_producer",
           [](std::shared_ptr<PyWorkQueue> self, int64_t capacity) {
             return std::make_shared<PyProducer>(std::move(self), capacity);
           },
           py::arg("capacity") = 0)
      .def_property_readonly("name", [](PyWorkQueue& q) { return q.queue()->name(); })
      .def_property_readonly("worker_id", [](PyWorkQueue& q) { return q.queue()->worker_id(); })
      .def_property_readonly("seed", [](PyWorkQueue& q) { return q.queue()->seed(); })
      .def_property_readonly("num_items", [](PyWorkQueue& q) { return q.queue()->num_items(); })
      .def_property_readonly("num_epochs", [](PyWorkQueue& q) { return q.queue()->num_epochs(); })
      .def_property_readonly("num_clients",
                             [](PyWorkQueue& q) { return q.queue()->num_clients(); })
      .def_property_readonly("records_read_again",
                             [](PyWorkQueue& q) { return q.queue()->records_read_again(); })
      .def_property_readonly("records_lost",
                             [](PyWorkQueue& q) { return q.queue()->records_lost(); })
      .def_property_readonly(
          "records_beyond_checkpoint",
          [](PyWorkQueue& q) { return q.queue()->records_beyond_checkpoint(); });

  py::class_<PyItemIterator>(m, "_ItemIterator")
      .def("__iter__", [](PyItemIterator& it) -> PyItemIterator& { return it; },
           py::return_value_policy::reference_internal)
      .def("__next__", &PyItemIterator::Next);

  py::class_<PyProducer, std::shared_ptr<PyProducer>>(m, "_InputProducer")
      .def("size", [](PyProducer& p) { return p.producer()->size(); })
      .def_property_readonly("capacity", [](PyProducer& p) { return p.producer()->capacity(); });

  py::class_<CoordinatorServer>(m, "_Server")
      .def(py::init([](const std::string& listen, const std::string& token,
                       const std::string& state_dir) {
             ServerOptions options;
             options.listen = listen;
             options.token = token;
             options.state_dir = state_dir;
             absl::StatusOr<std::unique_ptr<CoordinatorServer>> server;
             {
               py::gil_scoped_release release;
               server = CoordinatorServer::Start(options);
             }
             return ValueOrThrow(std::move(server));
           }),
           py::arg("listen"), py::arg("token") = "", py::arg("state_dir") = "")
      .def_property_readonly("port", &CoordinatorServer::port)
      .def("stop", [](CoordinatorServer& s) {
        py::gil_scoped_release release;
        s.Shutdown();
      });
}

}  // namespace shardq::python
