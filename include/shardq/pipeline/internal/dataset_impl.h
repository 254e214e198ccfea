// Template definitions for include/shardq/pipeline/dataset.h; include that
// header, not this one.
//
// A Dataset holds a Node: a function that builds its stage into a
// PipelineContext, after building its input's. MakeIterator builds the
// whole chain, and only then runs the context's starters (threads), so a
// bad option anywhere fails the build before any thread runs.
#ifndef SHARDQ_SRC_PIPELINE_DATASET_IMPL_H_
#define SHARDQ_SRC_PIPELINE_DATASET_IMPL_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/memory/memory.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "shardq/pipeline/dataset.h"
#include "shardq/pipeline/internal/buffer_stages.h"
#include "shardq/pipeline/internal/map_stage.h"
#include "shardq/pipeline/internal/prefetch_stage.h"
#include "shardq/pipeline/internal/read_setup.h"
#include "shardq/pipeline/internal/read_stage.h"
#include "shardq/pipeline/internal/stage.h"

namespace shardq::pipeline {
namespace internal {

template <typename T>
class Node {
 public:
  using Builder = std::function<absl::StatusOr<std::unique_ptr<Stage<T>>>(
      PipelineContext*)>;

  // `batch_size`: the rows per batch of the elements, when they are
  // batches made by Batch (for Distribute).
  explicit Node(Builder build, std::optional<int64_t> batch_size = {})
      : build_(std::move(build)), batch_size_(batch_size) {}

  absl::StatusOr<std::unique_ptr<Stage<T>>> Build(
      PipelineContext* context) const {
    return build_(context);
  }
  std::optional<int64_t> batch_size() const { return batch_size_; }

 private:
  const Builder build_;
  const std::optional<int64_t> batch_size_;
};

template <typename T>
std::shared_ptr<const Node<T>> MakeNode(typename Node<T>::Builder build,
                                        std::optional<int64_t> batch_size = {}) {
  return std::make_shared<const Node<T>>(std::move(build), batch_size);
}

inline absl::Status BadStageOption(const std::string& stage,
                                   const std::string& field, int64_t value,
                                   const std::string& requirement) {
  return absl::InvalidArgumentError(absl::StrCat(
      stage, ": ", field, " = ", value, ", must be ", requirement));
}

}  // namespace internal

// --- Iterator ---

template <typename T>
Iterator<T>::Iterator(std::unique_ptr<internal::PipelineContext> context,
                      std::unique_ptr<internal::Stage<T>> stage)
    : context_(std::move(context)), stage_(std::move(stage)) {}

template <typename T>
Iterator<T>::~Iterator() {
  context_->coordinator.RequestStop();
  context_->coordinator.Join().IgnoreError();
  if (context_->ledger == nullptr) return;
  // Deferred records were returned: if their items go back, they are read
  // again, and counted as such.
  // (With kUntilTold those never reached the consumer's user: not counted.)
  if (defer_ != kUntilTold) {
    for (const internal::RecordTags& tags : deferred_) context_->ledger->NoteDeferred(tags);
  }
  context_->ledger->ReleaseHeld();
}

template <typename T>
absl::StatusOr<T> Iterator<T>::Next() {
  absl::StatusOr<std::optional<T>> next = TryNext(absl::InfiniteDuration());
  if (!next.ok()) return next.status();
  return **std::move(next);  // an infinite wait never comes back empty
}

template <typename T>
absl::StatusOr<std::optional<T>> Iterator<T>::TryNext(absl::Duration timeout) {
  if (!status_.ok()) return status_;
  if (context_->ledger != nullptr) {
    // A queue closed under the pipeline gave its items back: none of the
    // records still buffered here may be returned (someone else reads them).
    if (absl::Status open = context_->ledger->SourceOpen(); !open.ok()) {
      status_ = std::move(open);
      context_->coordinator.RequestStop();
      return status_;
    }
  }
  const absl::Time deadline = absl::Now() + timeout;
  stalled_ = false;
  while (true) {
    // Nothing ready while records are deferred: wait in slices as long as
    // the pipeline can go on without them; once its reading stage is idle
    // for want of their items (the held-item limit, or nothing else left
    // to take), they are consumed (with kUntilTold, the caller is told).
    // The first look is a wait of one slice (WaitReady spins before it
    // sleeps), not a bare poll: a poll takes the Prefetch's lock, and one
    // per element made the reading thread and this one contend.
    while (!deferred_.empty() &&
           !stage_->WaitReady(std::clamp(deadline - absl::Now(), absl::ZeroDuration(),
                                         kDeferredPoll))) {
      // (Stalled takes the ledger's lock, which the reading thread takes
      // per record: asked only while that thread is idle.)
      if (context_->ledger->reader_idle_hint() &&
          context_->Stalled(deferred_records_) != internal::StallReason::kNone) {
        if (defer_ == kUntilTold) {
          stalled_ = true;
          return std::optional<T>();
        }
        if (!ConsumeDeferred(0)) return status_;
        break;
      }
      if (absl::Now() >= deadline) return std::optional<T>();
    }
    if (timeout != absl::InfiniteDuration() &&
        !stage_->WaitReady(std::max(absl::ZeroDuration(),
                                    deadline - absl::Now()))) {
      return std::optional<T>();
    }
    internal::Envelope<T> next = stage_->Next();
    if (!next.ok() && absl::IsOutOfRange(next.status()) && !deferred_.empty() &&
        !ConsumeDeferred(0)) {
      // The end of the data: the consumer asked past the last element, so
      // the deferred ones are done with (and their items complete).
      return status_;
    }
    if (!next.ok()) {
      status_ = next.status();
      if (absl::IsOutOfRange(status_)) {
        // A stage's end; the end of the data unless a thread failed.
        absl::Status error = context_->coordinator.error();
        if (!error.ok()) status_ = error;
      }
      if (!absl::IsOutOfRange(status_)) context_->coordinator.RequestStop();
      return status_;
    }
    if (next->marker) continue;
    if (defer_ > 0 && context_->ledger != nullptr) {
      deferred_records_ += internal::NumRecords(next->tags);
      deferred_.push_back(std::move(next->tags));
      deferred_done_.push_back(false);
      ++deferred_returned_;
      // An error here ends the pipeline after this element (status_).
      ConsumeDeferred(static_cast<size_t>(defer_));
      return std::optional<T>(std::move(next->value));
    }
    if (context_->ledger != nullptr) {
      absl::Status consumed = context_->ledger->Consume(next->tags);
      if (!consumed.ok()) {
        // This element is delivered; the pipeline ends with the error.
        status_ = std::move(consumed);
        context_->coordinator.RequestStop();
      }
    }
    stage_->RecycleTags(std::move(next->tags));
    return std::optional<T>(std::move(next->value));
  }
}

template <typename T>
bool Iterator<T>::ConsumeDeferred(size_t keep) {
  while (deferred_.size() > keep) {
    internal::RecordTags tags = std::move(deferred_.front());
    const bool done = deferred_done_.front();
    deferred_.pop_front();
    deferred_done_.pop_front();
    if (done) continue;  // consumed out of order (Consume)
    if (!ConsumeTags(std::move(tags))) return false;
  }
  return true;
}

template <typename T>
bool Iterator<T>::ConsumeTags(internal::RecordTags tags) {
  deferred_records_ -= internal::NumRecords(tags);
  absl::Status consumed = context_->ledger->Consume(tags);
  stage_->RecycleTags(std::move(tags));
  if (!consumed.ok()) {
    // The elements are delivered; the pipeline ends with the error.
    status_ = std::move(consumed);
    context_->coordinator.RequestStop();
    deferred_.clear();
    deferred_done_.clear();
    deferred_records_ = 0;
    return false;
  }
  return true;
}

template <typename T>
absl::Status Iterator<T>::Consume(const std::vector<int64_t>& elements) {
  if (!status_.ok() && !absl::IsOutOfRange(status_)) return status_;
  for (int64_t index : elements) {
    const int64_t oldest = deferred_returned_ - static_cast<int64_t>(deferred_.size());
    if (index < oldest || index >= deferred_returned_) continue;
    const size_t at = static_cast<size_t>(index - oldest);
    if (deferred_done_[at]) continue;
    deferred_done_[at] = true;
    if (!ConsumeTags(std::exchange(deferred_[at], internal::RecordTags()))) return status_;
  }
  while (!deferred_done_.empty() && deferred_done_.front()) {
    deferred_.pop_front();
    deferred_done_.pop_front();
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Iterator<T>::ConsumeAll() {
  if (!status_.ok() && !absl::IsOutOfRange(status_)) return status_;
  if (defer_ != kUntilTold || context_->ledger == nullptr) {
    if (!ConsumeDeferred(0)) return status_;
    return absl::OkStatus();
  }
  // Not named yet: they may not have reached the user. Counted consumed
  // early, settled when named; lost (and reported) if never named.
  for (size_t i = 0; i < deferred_.size(); ++i) {
    if (deferred_done_[i]) continue;
    deferred_records_ -= internal::NumRecords(deferred_[i]);
    absl::Status s = context_->ledger->ConsumeEarly(&deferred_[i]);
    if (!s.ok()) {
      status_ = std::move(s);
      context_->coordinator.RequestStop();
      return status_;
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status Iterator<T>::DeferConsumption(int64_t elements) {
  if (elements < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeferConsumption: elements = ", elements, ", must be >= 0"));
  }
  if (elements > 0 && !stage_->CanWaitReady()) {
    return absl::InvalidArgumentError(
        "DeferConsumption needs a pipeline that ends in a Prefetch");
  }
  defer_ = elements;
  if (!deferred_.empty() && !ConsumeDeferred(static_cast<size_t>(defer_))) {
    return status_;
  }
  return absl::OkStatus();
}

template <typename T>
void Iterator<T>::Recycle(T spent) {
  stage_->Recycle(std::move(spent));
}

template <typename T>
PipelineStats Iterator<T>::stats() const {
  PipelineStats stats;
  if (context_->ledger != nullptr) {
    const internal::LedgerStats ledger = context_->ledger->stats();
    stats.items_taken = ledger.items_taken;
    stats.items_completed = ledger.items_completed;
    stats.items_held = ledger.items_held;
    stats.records_read = ledger.records_read;
    stats.records_consumed = ledger.records_consumed;
    stats.stalls = ledger.stalls;
    stats.records_consumed_early = ledger.records_consumed_early;
  }
  stats.records_dropped = context_->records_dropped.load();
  stats.shuffle_drains = context_->shuffle_drains.load();
  stats.short_batches = context_->short_batches.load();
  stats.corrupt_regions = context_->corrupt_regions.load();
  stats.skipped_bytes = context_->skipped_bytes.load();
  return stats;
}

// --- Dataset ---

template <typename T>
template <typename Fn>
Dataset<internal::MapResult<Fn, T>> Dataset<T>::Map(Fn fn,
                                                    MapOptions options) const {
  using Out = internal::MapResult<Fn, T>;
  internal::MapFunction<T, Out> function =
      internal::MakeMapFunction<T, Out>(std::move(fn));
  auto input = node_;
  return Dataset<Out>(internal::MakeNode<Out>(
      [input, function, options](internal::PipelineContext* context)
          -> absl::StatusOr<std::unique_ptr<internal::Stage<Out>>> {
        const std::string stage = absl::StrCat("Map '", options.name, "'");
        if (options.num_threads < 0 || options.num_threads > kMaxStageThreads) {
          return internal::BadStageOption(
              stage, "num_threads", options.num_threads,
              absl::StrCat(">= 0 and <= ", kMaxStageThreads));
        }
        if (options.buffer_size < 0) {
          return internal::BadStageOption(stage, "buffer_size",
                                          options.buffer_size, ">= 0");
        }
        absl::StatusOr<std::unique_ptr<internal::Stage<T>>> in =
            input->Build(context);
        if (!in.ok()) return in.status();
        if (options.num_threads == 0) {
          return std::make_unique<internal::InlineMapStage<T, Out>>(
              *std::move(in), function, options);
        }
        MapOptions resolved = options;
        resolved.buffer_size =
            options.buffer_size == 0
                ? std::max<int64_t>(256, 4 * options.num_threads)
                : std::max(options.buffer_size, options.num_threads);
        return std::make_unique<internal::ParallelMapStage<T, Out>>(
            context, *std::move(in), function, resolved);
      }));
}

template <typename T>
Dataset<T> Dataset<T>::Shuffle(ShuffleOptions options) const {
  auto input = node_;
  return Dataset<T>(internal::MakeNode<T>(
      [input, options](internal::PipelineContext* context)
          -> absl::StatusOr<std::unique_ptr<internal::Stage<T>>> {
        if (options.buffer_size < 1) {
          return internal::BadStageOption(
              absl::StrCat("Shuffle '", options.name, "'"), "buffer_size",
              options.buffer_size, ">= 1");
        }
        absl::StatusOr<std::unique_ptr<internal::Stage<T>>> in =
            input->Build(context);
        if (!in.ok()) return in.status();
        return std::make_unique<internal::ShuffleStage<T>>(
            context, *std::move(in), options);
      },
      input->batch_size()));
}

template <typename T>
Dataset<pipeline::Batch<T>> Dataset<T>::Batch(BatchOptions options) const {
  using Out = pipeline::Batch<T>;
  auto input = node_;
  return Dataset<Out>(internal::MakeNode<Out>(
      [input, options](internal::PipelineContext* context)
          -> absl::StatusOr<std::unique_ptr<internal::Stage<Out>>> {
        if (options.batch_size < 1) {
          return internal::BadStageOption("Batch", "batch_size",
                                          options.batch_size, ">= 1");
        }
        absl::StatusOr<std::unique_ptr<internal::Stage<T>>> in =
            input->Build(context);
        if (!in.ok()) return in.status();
        return std::make_unique<internal::BatchStage<T>>(
            context, *std::move(in), options);
      },
      options.batch_size));
}

template <typename T>
template <typename B>
Dataset<PerReplicaBatches<typename internal::BatchRow<B>::type>>
Dataset<T>::Distribute(DistributeOptions options) const {
  using Row = typename internal::BatchRow<B>::type;
  using Out = PerReplicaBatches<Row>;
  auto input = node_;
  return Dataset<Out>(internal::MakeNode<Out>(
      [input, options](internal::PipelineContext* context)
          -> absl::StatusOr<std::unique_ptr<internal::Stage<Out>>> {
        const std::optional<int64_t> batch_size = input->batch_size();
        if (!batch_size.has_value()) {
          return absl::InvalidArgumentError(
              "Distribute: its input must be batched by Batch (optionally "
              "followed by Shuffle or Prefetch), so that the global batch "
              "size is known");
        }
        if (options.num_replicas < 1) {
          return internal::BadStageOption("Distribute", "num_replicas",
                                          options.num_replicas, ">= 1");
        }
        if (*batch_size % options.num_replicas != 0) {
          return internal::BadStageOption(
              "Distribute", "num_replicas", options.num_replicas,
              absl::StrCat("a divisor of the batch size ", *batch_size));
        }
        absl::StatusOr<std::unique_ptr<internal::Stage<B>>> in =
            input->Build(context);
        if (!in.ok()) return in.status();
        return std::make_unique<internal::DistributeStage<Row>>(
            context, *std::move(in), *batch_size, options);
      }));
}

template <typename T>
Dataset<T> Dataset<T>::Prefetch(int64_t buffer_size) const {
  auto input = node_;
  return Dataset<T>(internal::MakeNode<T>(
      [input, buffer_size](internal::PipelineContext* context)
          -> absl::StatusOr<std::unique_ptr<internal::Stage<T>>> {
        if (buffer_size < 1) {
          return internal::BadStageOption("Prefetch", "buffer_size",
                                          buffer_size, ">= 1");
        }
        absl::StatusOr<std::unique_ptr<internal::Stage<T>>> in =
            input->Build(context);
        if (!in.ok()) return in.status();
        return std::make_unique<internal::PrefetchStage<T>>(
            context, *std::move(in), buffer_size);
      },
      input->batch_size()));
}

template <typename T>
absl::StatusOr<std::unique_ptr<Iterator<T>>> Dataset<T>::MakeIterator() const {
  auto context = std::make_unique<internal::PipelineContext>();
  absl::StatusOr<std::unique_ptr<internal::Stage<T>>> stage =
      node_->Build(context.get());
  if (!stage.ok()) return stage.status();
  for (const auto& start : context->starters) start();
  return absl::WrapUnique(
      new Iterator<T>(std::move(context), *std::move(stage)));
}

// --- Sources ---

template <typename R>
Dataset<R> ReadItems(ItemSource* source, ItemReaderFactory<R> factory,
                     InterleaveOptions options) {
  return Dataset<R>(internal::MakeNode<R>(
      [source, factory, options](internal::PipelineContext* context)
          -> absl::StatusOr<std::unique_ptr<internal::Stage<R>>> {
        if (!factory) {
          return absl::InvalidArgumentError(absl::StrCat(
              "ReadItems '", options.name, "': the reader factory is empty"));
        }
        absl::StatusOr<InterleaveOptions> resolved =
            internal::PrepareRead(source, options, context);
        if (!resolved.ok()) return resolved.status();
        return std::make_unique<internal::ReadStage<R>>(context, factory,
                                                        *resolved);
      }));
}

template <typename T>
Dataset<T> FromVector(std::vector<T> elements) {
  auto shared = std::make_shared<const std::vector<T>>(std::move(elements));
  return Dataset<T>(internal::MakeNode<T>(
      [shared](internal::PipelineContext*)
          -> absl::StatusOr<std::unique_ptr<internal::Stage<T>>> {
        return std::make_unique<internal::VectorStage<T>>(shared);
      }));
}

}  // namespace shardq::pipeline

#endif  // SHARDQ_SRC_PIPELINE_DATASET_IMPL_H_
