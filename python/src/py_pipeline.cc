// Python binding of the C++ input pipeline (include/shardq/pipeline/
// dataset.h) behind shardq.data.from_queue: reading (text, TFRecord, table
// rows), shuffle, batch, split (Distribute), parse_example and prefetch run
// in the pipeline's C++ threads without the GIL; Python only receives the
// finished elements.
//
// A pipeline built with `siblings` (shardq.torch: a DataLoader worker of
// one pass) also ends, like a PassSource, when it holds no item and the
// queue's remaining items are all held by other workers of that pass or by
// live workers of other ranks (OnlySiblingsHoldTheRest; py_torch_support.cc
// says why waiting for them would never end).
// With `others_hold_ends_pass` (equal_steps, shardq.data), the same holds
// for items held by ANY other worker: a rank whose worker waited for an
// item another rank holds would stop its training loop, and with it the
// other rank's (blocked in an all-reduce), whose consumption completes
// that item; the equal-steps stage pads instead.
//
// _Pipeline is a builder, used once by shardq.data: each call appends a
// stage; iterator() builds the pipeline and starts its threads. The element
// type changes along the chain (records, batches, per-replica batches,
// parsed batches), so the builder holds a variant of Datasets and refuses
// a stage that does not apply to the current element (data.py runs such
// stages in Python instead).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "pybind11/numpy.h"
#include "pybind11/pybind11.h"
#include "pybind11/stl.h"
#include "python/src/errors.h"
#include "python/src/py_elements.h"
#include "python/src/py_example.h"
#include "python/src/py_slots.h"
#include "python/src/py_sources.h"
#include "shardq/pipeline/dataset.h"
#include "shardq/pipeline/element.h"
#include "shardq/pipeline/record_reader.h"
#include "shardq/pipeline/stage_options.h"
#include "shardq/table_reader.h"
#include "src/parse/example_parser.h"

namespace py = pybind11;

namespace shardq::python {
namespace {

using pipeline::Batch;
using pipeline::Dataset;
using pipeline::PerReplicaBatches;

// How often a blocked next() wakes to let Python handle Ctrl-C.
constexpr absl::Duration kSignalCheck = absl::Milliseconds(100);
// A pipeline with siblings waits in shorter slices and, while it holds no
// item, asks the coordinator who holds the rest: first after
// kFirstPassCheck, then twice as long after each check that says no, up to
// kPassCheck. The DataLoader's loop waits for this worker's answer (a
// batch, or the end of its pass) before it asks the next worker, so the
// first checks come soon; a worker that waits long asks rarely.
constexpr absl::Duration kPassSlice = absl::Milliseconds(5);
constexpr absl::Duration kFirstPassCheck = absl::Milliseconds(1);
constexpr absl::Duration kPassCheck = absl::Milliseconds(50);
// Such a pipeline's takes wait at most this long at the coordinator
// (WorkQueue::SetTakePoll): the longest a check waits for a take on its
// way, which the loop waits out too.
constexpr absl::Duration kPassTakePoll = absl::Milliseconds(10);

// The element types a bound pipeline can hand out, in chain order.
template <typename... Ts>
struct ElementTypes {
  using Datasets = std::variant<Dataset<Ts>...>;
  using Iterators = std::variant<std::unique_ptr<pipeline::Iterator<Ts>>...>;
};
using Elements = ElementTypes<Record, Batch<Record>, PerReplicaBatches<Record>,
                              ParsedBatch, ParsedReplicas, Row, Batch<Row>,
                              PerReplicaBatches<Row>>;

[[noreturn]] void Refuse(absl::string_view stage, absl::string_view needs) {
  ThrowStatus(absl::InvalidArgumentError(
      absl::StrCat("shardq.data: ", stage, " needs ", needs)));
}

}  // namespace

// The iterator of one built pipeline. next() waits with the GIL released,
// waking every kSignalCheck to run Python's signal handlers (Ctrl-C raises
// KeyboardInterrupt and leaves the iterator usable). close() (or
// destruction) stops and joins the pipeline's threads and gives the items
// whose records were not all consumed back to the queue. One consumer at
// a time: next() from a second thread while one waits raises RuntimeError.
class PyPipelineIterator {
 public:
  PyPipelineIterator(std::shared_ptr<PyWorkQueue> queue, Elements::Iterators iterator,
                     bool with_mask, std::string siblings, bool pass_rule)
      : queue_(std::move(queue)),
        iterator_(std::move(iterator)),
        with_mask_(with_mask),
        siblings_(std::move(siblings)),
        pass_rule_(pass_rule) {}

  ~PyPipelineIterator() {
    py::gil_scoped_release release;
    Reset();
  }

  py::object Next() {
    if (closed_ || cancelled_.load(std::memory_order_acquire)) throw py::stop_iteration();
    if (in_next_) throw std::runtime_error("a shardq.data iterator is used by two threads at once");
    in_next_ = true;   // (before the wait, which lets other threads run)
    WaitForConsume();
    py::object out;
    try {
      out = std::visit([this](auto& it) { return NextOf(*it); }, iterator_);
    } catch (...) {
      ApplyPending(/*release_gil=*/false);
      in_next_ = false;
      throw;
    }
    ApplyPending(/*release_gil=*/true);
    in_next_ = false;
    return out;
  }

  // From any thread: next() ends (StopIteration) within kSignalCheck,
  // also one waiting now, and at every later call. For a Python prefetch
  // thread waiting in next() whose consumer has stopped: that thread then
  // closes the iterator.
  void Cancel() { cancelled_.store(true, std::memory_order_release); }

  // Iterator::Consume, and Iterator::ConsumeAll for `all` (for an
  // iterator made with defer < 0), from any thread: now, or, while another
  // thread is in next() (a Python prefetch's), as that next() returns. A
  // failure to consume ends the pipeline: next() raises it.
  void Consume(const std::vector<int64_t>& elements, bool all) {
    if (closed_) return;
    pending_.insert(pending_.end(), elements.begin(), elements.end());
    pending_all_ = pending_all_ || all;
    if (in_next_ || in_consume_) return;  // that thread applies them
    ApplyPending(/*release_gil=*/true);
  }

  void Close() {
    if (in_next_) throw std::runtime_error("close() while another thread waits in next()");
    in_next_ = true;  // no next() from another thread meanwhile
    WaitForConsume();
    ApplyPending(/*release_gil=*/true);  // delivered before the close
    {
      py::gil_scoped_release release;
      Reset();
    }
    in_next_ = false;
  }

  py::dict Stats() {
    if (closed_) return StatsToDict(last_stats_);
    return StatsToDict(std::visit([](auto& it) { return it->stats(); }, iterator_));
  }

 private:
  // With the GIL: applies what Consume collected (and what other threads
  // add meanwhile). Errors stay in the iterator (next() returns them).
  void ApplyPending(bool release_gil) {
    while (!closed_ && (!pending_.empty() || pending_all_)) {
      std::vector<int64_t> elements;
      elements.swap(pending_);
      const bool all = std::exchange(pending_all_, false);
      in_consume_ = true;
      {
        std::optional<py::gil_scoped_release> release;
        if (release_gil) release.emplace();
        std::visit(
            [&](auto& it) { (all ? it->ConsumeAll() : it->Consume(elements)).IgnoreError(); },
            iterator_);
      }
      in_consume_ = false;
    }
  }

  // With the GIL: until no other thread applies consumption (it has
  // released the GIL for a short ledger call).
  void WaitForConsume() {
    while (in_consume_) {
      py::gil_scoped_release release;
      std::this_thread::yield();
    }
  }

  template <typename T>
  py::object NextOf(pipeline::Iterator<T>& it) {
    while (true) {
      absl::StatusOr<std::optional<T>> next;
      {
        py::gil_scoped_release release;
        next = it.TryNext(!pass_rule_                 ? kSignalCheck
                          : holding_ || pass_ended_ ? kPassSlice
                                                    : pass_wait_);
      }
      if (!next.ok()) {
        if (absl::IsOutOfRange(next.status())) throw py::stop_iteration();
        ThrowStatus(next.status());
      }
      if (next->has_value()) {
        py::object out = ToPython(**next, with_mask_);
        // Converted: the C++ element goes back to the thread that made it
        // (Iterator::Recycle), so its strings are freed where allocated.
        it.Recycle(**std::move(next));
        return out;
      }
      // (Made with defer < 0 only: the caller flushes its own stages.)
      if (it.stalled()) return py::module_::import("shardq._shardq").attr("_STALLED");
      // What another thread said consumed meanwhile (a Python prefetch's
      // consumer): applied between slices, not only when an element comes.
      ApplyPending(/*release_gil=*/true);
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      if (cancelled_.load(std::memory_order_acquire)) throw py::stop_iteration();
      MaybeEndPass(it.stats());
    }
  }

  // With siblings: once this pipeline holds no item (so none of its
  // records is waiting anywhere) and the coordinator says the rest of the
  // queue is held by the other workers of the pass or by live workers of
  // other ranks (OnlySiblingsHoldTheRest), the queue's takes end
  // (WorkQueue::EndTakesIf, atomic with respect to the pipeline's takes):
  // the pipeline then ends as at the end of the queue, with nothing held
  // and nothing given back. An item granted before that is read.
  void MaybeEndPass(const pipeline::PipelineStats& mine) {
    holding_ = mine.items_held > 0;
    if (!pass_rule_ || pass_ended_ || holding_) {
      pass_wait_ = kFirstPassCheck;
      return;
    }
    const absl::Time now = absl::Now();
    if (now - last_pass_check_ < pass_wait_) return;
    last_pass_check_ = now;
    pass_wait_ = std::min(2 * pass_wait_, kPassCheck);
    WorkQueue* q = queue_->queue();
    absl::StatusOr<bool> ended;
    {
      py::gil_scoped_release release;
      ended = q->EndTakesIf([&] { return q->OnlyOthersHoldTheRest(siblings_); });
    }
    pass_ended_ = ValueOrThrow(std::move(ended));
  }

  // Without the GIL: joins the pipeline's threads.
  void Reset() {
    if (closed_) return;
    last_stats_ = std::visit([](auto& it) { return it->stats(); }, iterator_);
    std::visit([](auto& it) { it.reset(); }, iterator_);
    closed_ = true;
  }

  // Declared first, destroyed last: the pipeline takes from this queue.
  const std::shared_ptr<PyWorkQueue> queue_;
  Elements::Iterators iterator_;
  const bool with_mask_;
  bool closed_ = false;
  bool in_next_ = false;  // guarded by the GIL
  bool in_consume_ = false;  // guarded by the GIL: ApplyPending is under way
  std::vector<int64_t> pending_;  // guarded by the GIL: Consume's, not applied yet
  bool pending_all_ = false;      // guarded by the GIL
  std::atomic<bool> cancelled_{false};  // Cancel()
  pipeline::PipelineStats last_stats_;
  const std::string siblings_;  // the worker-id prefix of the pass's workers
  const bool pass_rule_;        // false: no pass to end early
  bool pass_ended_ = false;     // the queue's takes ended (MaybeEndPass)
  absl::Time last_pass_check_ = absl::InfinitePast();
  bool holding_ = true;  // the pipeline held items at the last MaybeEndPass
  absl::Duration pass_wait_ = kFirstPassCheck;  // from one check to the next
};

// Builds a pipeline over a WorkQueue, one stage per call.
class PyPipeline {
 public:
  PyPipeline(py::handle queue, const std::string& reader, const std::string& on_corrupt,
             int64_t cycle_length, int64_t num_parallel_reads, int64_t table_batch_rows,
             bool complete_when_read, std::string siblings, int64_t max_epoch,
             bool others_hold_ends_pass)
      : siblings_(others_hold_ends_pass ? "" : std::move(siblings)),
        pass_rule_(others_hold_ends_pass || !siblings_.empty()) {
    py::handle native = py::hasattr(queue, "_native") ? queue.attr("_native") : queue;
    if (!py::isinstance<PyWorkQueue>(native)) {
      throw py::type_error("shardq.data.from_queue needs a shardq.WorkQueue");
    }
    queue_ = native.cast<std::shared_ptr<PyWorkQueue>>();
    if (pass_rule_) queue_->queue()->SetTakePoll(kPassTakePoll);
    pipeline::InterleaveOptions read;
    read.cycle_length = cycle_length;
    read.num_parallel_reads = num_parallel_reads;
    read.complete_when_read = complete_when_read;
    read.max_epoch = max_epoch;
    // Python gets the records' values only (RowObject): no keys are built.
    if (reader == "text") {
      read.open_ahead = pipeline::TextOpenAhead();
      stream_ = pipeline::ReadItems(queue_->queue(),
                                    pipeline::TextReaderFactory(RecordKeys::kSkip), read);
    } else if (reader == "tfrecord") {
      TFRecordReaderOptions options;
      options.on_corrupt = ParseOnCorrupt(on_corrupt);
      read.open_ahead = pipeline::TFRecordOpenAhead();
      stream_ =
          pipeline::ReadItems(queue_->queue(),
                              pipeline::TFRecordReaderFactory(options, RecordKeys::kSkip), read);
    } else if (reader == "table") {
      TableReaderOptions options;
      if (table_batch_rows > 0) options.batch_rows = table_batch_rows;
      stream_ = pipeline::ReadItems(queue_->queue(), pipeline::TableReaderFactory(options), read);
    } else {
      ThrowStatus(absl::InvalidArgumentError(absl::StrCat(
          "shardq.data: reader must be 'text', 'tfrecord' or 'table', got '", reader, "'")));
    }
  }

  void Shuffle(int64_t buffer_size, uint64_t seed) {
    pipeline::ShuffleOptions options;
    options.buffer_size = buffer_size;
    options.seed = seed;
    stream_ = std::visit(
        [&](const auto& ds) -> Elements::Datasets { return ds.Shuffle(options); }, stream_);
    ends_with_prefetch_ = false;
  }

  void Batch(int64_t batch_size, bool drop_remainder) {
    pipeline::BatchOptions options;
    options.batch_size = batch_size;
    options.drop_remainder = drop_remainder;
    stream_ = std::visit(
        [&](const auto& ds) -> Elements::Datasets {
          using T = typename std::decay_t<decltype(ds)>::element_type;
          if constexpr (std::is_same_v<T, Record> || std::is_same_v<T, Row>) {
            return ds.Batch(options);
          }
          Refuse("batch", "records or rows (batches of batches are not built in C++)");
        },
        stream_);
    ends_with_prefetch_ = false;
  }

  void Split(int64_t replicas, const std::string& remainder) {
    pipeline::DistributeOptions options;
    options.num_replicas = replicas;
    if (remainder == "pad") {
      options.remainder = pipeline::DistributeOptions::Remainder::kPad;
    } else if (remainder == "drop") {
      options.remainder = pipeline::DistributeOptions::Remainder::kDrop;
    } else {
      ThrowStatus(absl::InvalidArgumentError(
          absl::StrCat("split: remainder must be 'drop' or 'pad', got '", remainder, "'")));
    }
    stream_ = std::visit(
        [&](const auto& ds) -> Elements::Datasets {
          using T = typename std::decay_t<decltype(ds)>::element_type;
          if constexpr (std::is_same_v<T, pipeline::Batch<Record>> ||
                        std::is_same_v<T, pipeline::Batch<Row>>) {
            return ds.Distribute(options);
          }
          Refuse("split", "batches (call .batch(n) first)");
        },
        stream_);
    with_mask_ = options.remainder == pipeline::DistributeOptions::Remainder::kPad;
    ends_with_prefetch_ = false;
  }

  // With `slots` (a DataLoader worker's, shardq/_torch_slots.py), batches
  // are parsed into its free slots (see ParseRows).
  void ParseExample(const py::dict& spec, int64_t num_threads, std::shared_ptr<SlotPool> slots) {
    auto parser = std::make_shared<const ExampleParser>(
        ValueOrThrow(ExampleParser::Create(FeaturesFromSpec(spec))));
    pipeline::MapOptions options;
    options.name = "parse_example";
    options.num_threads = num_threads;
    // Batches are large: a few in flight are enough to keep threads busy.
    options.buffer_size = std::max<int64_t>(2 * num_threads, 1);
    stream_ = std::visit(
        [&](const auto& ds) -> Elements::Datasets {
          using T = typename std::decay_t<decltype(ds)>::element_type;
          if constexpr (std::is_same_v<T, pipeline::Batch<Record>>) {
            return ds.Map(
                [parser, slots](pipeline::Batch<Record> b) -> absl::StatusOr<ParsedBatch> {
                  return ParseRows(*parser, b, nullptr, slots);
                },
                options);
          } else if constexpr (std::is_same_v<T, PerReplicaBatches<Record>>) {
            return ds.Map(
                [parser](PerReplicaBatches<Record> step) -> absl::StatusOr<ParsedReplicas> {
                  const Record* filler = nullptr;
                  for (const pipeline::Batch<Record>& b : step.replicas) {
                    for (size_t i = 0; i < b.rows.size() && filler == nullptr; ++i) {
                      if (b.padded[i] == 0) filler = &b.rows[i];
                    }
                  }
                  ParsedReplicas out;
                  for (const pipeline::Batch<Record>& b : step.replicas) {
                    absl::StatusOr<ParsedBatch> parsed = ParseRows(*parser, b, filler);
                    if (!parsed.ok()) return parsed.status();
                    out.replicas.push_back(*std::move(parsed));
                  }
                  return out;
                },
                options);
          } else {
            Refuse("parse_example", "batches of tf.Example records (call .batch(n) first)");
          }
        },
        stream_);
    ends_with_prefetch_ = false;
  }

  void Prefetch(int64_t buffer_size) {
    stream_ = std::visit(
        [&](const auto& ds) -> Elements::Datasets { return ds.Prefetch(buffer_size); },
        stream_);
    ends_with_prefetch_ = true;
  }

  // Builds the pipeline and starts its threads. A Prefetch(1) is added at
  // the end unless the chain ends with one, so that next() can wait in
  // slices (see Iterator::TryNext).
  // `defer`: Iterator::DeferConsumption's elements (0: none; < 0:
  // kUntilTold, the caller says with consume()).
  std::unique_ptr<PyPipelineIterator> MakeIterator(int64_t defer) {
    if (defer < 0) defer = pipeline::Iterator<Record>::kUntilTold;
    Elements::Datasets stream = stream_;
    if (!ends_with_prefetch_) {
      stream = std::visit(
          [](const auto& ds) -> Elements::Datasets { return ds.Prefetch(1); }, stream);
    }
    absl::StatusOr<Elements::Iterators> iterator;
    {
      py::gil_scoped_release release;
      iterator = std::visit(
          [defer](const auto& ds) -> absl::StatusOr<Elements::Iterators> {
            auto it = ds.MakeIterator();
            if (!it.ok()) return it.status();
            if (absl::Status s = (*it)->DeferConsumption(defer); !s.ok()) return s;
            return Elements::Iterators(*std::move(it));
          },
          stream);
    }
    return std::make_unique<PyPipelineIterator>(queue_, ValueOrThrow(std::move(iterator)),
                                                with_mask_, siblings_, pass_rule_);
  }

  // What the elements are: "records", "batches", "replicas", "parsed",
  // "parsed_replicas", "rows", "row_batches", "row_replicas".
  std::string kind() const {
    static constexpr const char* kNames[] = {"records", "batches", "replicas", "parsed",
                                             "parsed_replicas", "rows", "row_batches",
                                             "row_replicas"};
    return kNames[stream_.index()];
  }

 private:
  const std::string siblings_;
  const bool pass_rule_;
  std::shared_ptr<PyWorkQueue> queue_;
  Elements::Datasets stream_{std::in_place_index<0>,
                             pipeline::FromVector(std::vector<Record>{})};
  bool with_mask_ = false;
  bool ends_with_prefetch_ = false;
};

void BindPipeline(py::module_& m) {
  // What next() of an iterator made with defer < 0 returns when the
  // pipeline waits for the items of elements it returned (see
  // Iterator::stalled).
  m.attr("_STALLED") = py::module_::import("builtins").attr("object")();
  py::class_<PyPipeline>(m, "_Pipeline")
      .def(py::init<py::handle, const std::string&, const std::string&, int64_t, int64_t,
                    int64_t, bool, std::string, int64_t, bool>(),
           py::arg("queue"), py::arg("reader"), py::arg("on_corrupt") = "fail",
           py::arg("cycle_length") = 0, py::arg("num_parallel_reads") = 1,
           py::arg("table_batch_rows") = 0, py::arg("complete_when_read") = false,
           py::arg("siblings") = "", py::arg("max_epoch") = -1,
           py::arg("others_hold_ends_pass") = false)
      .def("shuffle", &PyPipeline::Shuffle, py::arg("buffer_size"), py::arg("seed"))
      .def("batch", &PyPipeline::Batch, py::arg("batch_size"), py::arg("drop_remainder"))
      .def("split", &PyPipeline::Split, py::arg("replicas"), py::arg("remainder"))
      .def("parse_example", &PyPipeline::ParseExample, py::arg("spec"),
           py::arg("num_threads"), py::arg("slots") = nullptr)
      .def("prefetch", &PyPipeline::Prefetch, py::arg("buffer_size"))
      .def("iterator", &PyPipeline::MakeIterator, py::arg("defer") = 0)
      .def_property_readonly("kind", &PyPipeline::kind);

  py::class_<PyPipelineIterator>(m, "_PipelineIterator")
      .def("__iter__", [](PyPipelineIterator& it) -> PyPipelineIterator& { return it; },
           py::return_value_policy::reference_internal)
      .def("__next__", &PyPipelineIterator::Next)
      .def("consume", &PyPipelineIterator::Consume, py::arg("elements"),
           py::arg("all") = false)
      .def("close", &PyPipelineIterator::Close)
      .def("cancel", &PyPipelineIterator::Cancel)
      .def("stats", &PyPipelineIterator::Stats);
}

}  // namespace shardq::python
