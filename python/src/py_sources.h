// Python-side holders of the C++ item sources, shared by the bindings of
// the queue and of the readers.
#ifndef SHARDQ_PYTHON_PY_SOURCES_H_
#define SHARDQ_PYTHON_PY_SOURCES_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
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
  // PAI's take(): (item string, epoch, work, start, end); start and end are
  // None for a whole work. shardq.WorkQueue.take wraps it in an Item.
  pybind11::tuple Take(std::optional<double> timeout_seconds);
  // complete() / release() of an item taken through take(); `epoch` picks
  // which when the worker holds the item in two epochs (an Item carries
  // it; a bare string then is refused as ambiguous). Return the epoch.
  int64_t Complete(const std::string& item, std::optional<int64_t> epoch);
  int64_t Release(const std::string& item, std::optional<int64_t> epoch);
  pybind11::dict Stats();
  void Close();
  void SaveCheckpoint(const std::string& path);
  // The queue's one input producer, made on the first call and kept as long
  // as the queue (PAI code calls input_producer() inside loops; a second
  // producer would take items beyond num_clients). `capacity` 0 accepts the
  // existing one; another capacity than the existing one's raises
  // InvalidArgumentError.
  InputProducer* Producer(int64_t capacity);
  WorkQueue* queue() { return queue_.get(); }

 private:
  std::unique_ptr<WorkQueue> queue_;
  std::unique_ptr<InputProducer> producer_;  // destroyed before queue_
  // Removes `item` (of `epoch`, when given) from taken_ and returns it;
  // NotFoundError if not held, InvalidArgumentError if held in several
  // epochs and `epoch` is not given.
  WorkItem Untrack(const std::string& item, std::optional<int64_t> epoch);
  std::deque<WorkItem> taken_;  // leased through take(), oldest first
};

// A handle on the queue's input producer that keeps the queue (which owns
// the producer) alive.
class PyProducer {
 public:
  PyProducer(std::shared_ptr<PyWorkQueue> queue, int64_t capacity)
      : queue_(std::move(queue)), producer_(queue_->Producer(capacity)) {}
  InputProducer* producer() { return producer_; }

 private:
  std::shared_ptr<PyWorkQueue> queue_;
  InputProducer* const producer_;  // owned by queue_
};

// A DataLoader worker's source (shardq.torch): takes from `queue` and ends
// with OUT_OF_RANGE, instead of waiting, once nothing is pending and every
// held item is held by another worker whose id starts with `siblings` (the
// workers of the same DataLoader pass; see py_torch_support.cc for why).
// Used by one reader at a time.
class PassSource final : public ItemSource {
 public:
  PassSource(std::shared_ptr<PyWorkQueue> queue, std::string siblings);
  absl::StatusOr<WorkItem> NextItem() override;
  absl::Status ItemDone(const WorkItem& item) override;
  void NoteProgress(const WorkItem& item, int64_t offset) override;
  void NoteReturned(const WorkItem& item, int64_t offset, int64_t in_order,
                    int64_t returned) override;
  void NoteLost(const WorkItem& item, int64_t records) override;
  absl::Status CheckOpen() const override;

 private:
  std::shared_ptr<PyWorkQueue> queue_;
  const std::string siblings_;
};

// The OUT_OF_RANGE that ends such a worker's pass.
absl::Status PassEnded(const WorkQueue& queue, const std::string& siblings);

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
void BindTorchSupport(pybind11::module_& m);
void BindDownload(pybind11::module_& m);

}  // namespace shardq::python

#endif  // SHARDQ_PYTHON_PY_SOURCES_H_
