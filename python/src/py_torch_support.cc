// When a DataLoader worker (shardq.torch) stops waiting: once the rest of
// the queue is held by the worker's siblings or other live workers. The rule
// (OnlySiblingsHoldTheRest, src/core/pass_rule.h, asked of the coordinator
// as WorkQueue::OnlyOthersHoldTheRest) serves the C++ pipeline of shardq.torch
// (py_pipeline.cc, a pipeline built with `siblings`) and _PassSource, an
// item source with the same behaviour for the plain readers.
//
// Why: torch's DataLoader hands batches to the training loop in a fixed
// round-robin order over its workers, and a worker is asked for its next
// batch only when the loop has taken its previous ones. A worker that has
// yielded a batch is parked, still holding the item it is reading. If the
// only items left are held by parked siblings, a worker that waits for them
// waits forever: the loop waits for that worker's batch, and the siblings
// wait for the loop. Such a worker ends its pass instead; the siblings read
// what they hold once they are asked again (a sibling that dies makes the
// DataLoader raise, so nothing is skipped silently). The same goes for
// items held by live workers of other ranks: under torchrun, rank A's
// starving worker may wait for rank B's parked worker while B's loop waits
// for its own starving worker, which waits for A's parked one (seen: two
// ranks of two workers each, stuck for good). A worker with an open
// session counts as one that will read what it holds.
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "pybind11/pybind11.h"
#include "python/src/errors.h"
#include "python/src/py_sources.h"
#include "shardq/item_source.h"
#include "src/client/discovery.h"

namespace py = pybind11;

namespace shardq::python {
namespace {

// How long a take waits before the worker looks at who holds the rest.
constexpr absl::Duration kPoll = absl::Milliseconds(200);

}  // namespace

absl::Status PassEnded(const WorkQueue& queue, const std::string& siblings) {
  return absl::OutOfRangeError(absl::StrCat(
      "queue '", queue.name(), "': the items left are held by the other DataLoader workers "
      "of this pass ('", siblings, "*'), which read them"));
}

PassSource::PassSource(std::shared_ptr<PyWorkQueue> queue, std::string siblings)
    : queue_(std::move(queue)), siblings_(std::move(siblings)) {}

absl::StatusOr<WorkItem> PassSource::NextItem() {
  WorkQueue* q = queue_->queue();
  while (true) {
    absl::StatusOr<WorkItem> item = q->Take(kPoll);
    if (!absl::IsDeadlineExceeded(item.status())) return item;
    absl::StatusOr<bool> ended =
        q->EndTakesIf([&] { return q->OnlyOthersHoldTheRest(siblings_); });
    if (!ended.ok()) return ended.status();
    if (*ended) return PassEnded(*q, siblings_);
  }
}

absl::Status PassSource::ItemDone(const WorkItem& item) { return queue_->queue()->Complete(item); }

void PassSource::NoteProgress(const WorkItem& item, int64_t offset) {
  queue_->queue()->NoteProgress(item, offset);
}

void PassSource::NoteReturned(const WorkItem& item, int64_t offset, int64_t in_order,
                              int64_t returned) {
  queue_->queue()->NoteReturned(item, offset, in_order, returned);
}

void PassSource::NoteLost(const WorkItem& item, int64_t records) {
  queue_->queue()->NoteLost(item, records);
}

absl::Status PassSource::CheckOpen() const { return queue_->queue()->CheckOpen(); }

void BindTorchSupport(py::module_& m) {
  py::class_<PassSource, std::shared_ptr<PassSource>>(m, "_PassSource")
      .def(py::init([](py::object queue, std::string siblings) {
             py::object native = py::hasattr(queue, "_native") ? queue.attr("_native") : queue;
             return std::make_shared<PassSource>(native.cast<std::shared_ptr<PyWorkQueue>>(),
                                                 std::move(siblings));
           }),
           py::arg("queue"), py::arg("siblings"));
  // The coordinator a WorkQueue made here with `address` would use: the
  // C++ discovery itself, so that shardq.torch decides nothing on its own.
  m.def(
      "_discover",
      [](const std::string& address) {
        absl::StatusOr<Discovered> found = DiscoverCoordinator(address, ProcessEnv());
        const Discovered d = ValueOrThrow(std::move(found));
        py::dict out;
        out["address"] = d.address;
        out["worker_id"] = d.worker_id;
        out["source"] = d.source;
        return out;
      },
      py::arg("address") = "");
}

}  // namespace shardq::python
