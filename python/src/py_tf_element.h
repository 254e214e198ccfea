// The element of shardq's Python TF queues (shardq.FIFOQueue,
// RandomShuffleQueue, PriorityQueue, shuffle_batch, ...): a tuple of
// components, each a bytes scalar or a numpy array, held in C++ so that the
// queues, their QueueRunner threads and C++ readers move elements without
// the GIL. shardq/queues.py turns a user's tuple or dict into the component
// list (dtype casts, shape checks, names); this file only packs and unpacks.
#ifndef SHARDQ_PYTHON_PY_TF_ELEMENT_H_
#define SHARDQ_PYTHON_PY_TF_ELEMENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pybind11/pybind11.h"
#include "shardq/pipeline/coordinator.h"
#include "shardq/pipeline/queues.h"

namespace shardq::python {

// One component: a bytes scalar (TF's string scalar), or an array with a
// numpy dtype string ("<f4") and a shape, its bytes in C order. The data
// are shared, so copying an element (to retry an enqueue) copies no bytes.
struct TFComponent {
  bool is_bytes = false;
  std::string dtype;
  std::vector<int64_t> shape;
  std::shared_ptr<const std::string> data;
};

using TFElement = std::vector<TFComponent>;
using TFPrioritized = pipeline::Prioritized<TFElement>;

// What a queue of T holds for `element`: the element itself, or, in a
// priority queue, the element with its priority.
template <typename T>
T MakeItem(TFElement element, int64_t priority);
template <>
inline TFElement MakeItem<TFElement>(TFElement element, int64_t) {
  return element;
}
template <>
inline TFPrioritized MakeItem<TFPrioritized>(TFElement element, int64_t priority) {
  return TFPrioritized{priority, std::move(element)};
}

// A bytes component holding `bytes`.
TFComponent BytesComponent(std::string bytes);

// The GIL must be held for the conversions below. Errors raise
// shardq.InvalidArgumentError (or TypeError) naming the component.

// One element from a list of components, each `bytes` or a numpy array
// (queues.py has already cast it to its dtype, C-contiguous).
TFElement ElementFromPython(const pybind11::list& components);

// enqueue_many: `components` hold the batch, each a list of `bytes` or an
// array of shape [n, ...]; split along axis 0 into n elements.
std::vector<TFElement> ElementsFromPython(const pybind11::list& components);

// dequeue: a list of components (bytes, or numpy arrays; 0-d arrays too).
pybind11::list ElementToPython(const TFElement& element);

// dequeue_many / dequeue_up_to: component i of every element stacked into
// one array of shape [n, ...] (a list of bytes for bytes components).
// InvalidArgumentError naming `queue` and the component if the elements'
// shapes or dtypes differ (a queue without declared shapes).
pybind11::list ElementsToPython(const std::vector<TFElement>& elements,
                                const std::string& queue);

// A Python object kept alive by C++ threads: the last copy drops the
// reference with the GIL taken (or leaks it once the interpreter is
// finalizing). Create with the GIL held.
std::shared_ptr<pybind11::object> KeepAlive(pybind11::object object);

// True on the thread that imported shardq (where Python runs signal
// handlers): blocking calls there wait in slices so Ctrl-C works.
bool OnPythonMainThread();

// The queues and runners as the bindings of py_tf_queues.cc and
// py_tf_runners.cc share them. A Python queue object holds a shared_ptr to
// one of the two kinds; a running QueueRunner holds another.
struct TFQueueRef {
  std::shared_ptr<pipeline::Queue<TFElement>> plain;        // FIFO, shuffle
  std::shared_ptr<pipeline::Queue<TFPrioritized>> priority;  // priority
};

// The queue inside a Python queue object (shardq.FIFOQueue or its native
// _TFQueue); TypeError otherwise.
TFQueueRef QueueOf(pybind11::handle queue);

// BindTFQueues binds the queues, then calls BindTFRunners.
void BindTFQueues(pybind11::module_& m);
void BindTFRunners(pybind11::module_& m);

}  // namespace shardq::python

#endif  // SHARDQ_PYTHON_PY_TF_ELEMENT_H_
