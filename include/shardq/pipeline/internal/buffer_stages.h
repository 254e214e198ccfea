// Internal to the pipeline: the stages that run in the calling thread and
// hold elements between calls (Shuffle, Batch), Distribute, and the
// FromVector source. Not thread-safe: Next() is called by one thread at a
// time, as every Stage.
//
// Stall markers (see item_ledger.h): a holding stage that receives one
// while the pipeline is stalled hands its records on (Shuffle drains its
// buffer, Batch emits or drops its partial batch, or fails when the held
// limit is what stalls the pipeline); otherwise, and afterwards, it passes
// the marker on. While waiting for input it declares what it holds with a
// WaitingHold.
#ifndef SHARDQ_SRC_PIPELINE_BUFFER_STAGES_H_
#define SHARDQ_SRC_PIPELINE_BUFFER_STAGES_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "shardq/pipeline/element.h"
#include "shardq/pipeline/stage_options.h"
#include "shardq/internal/rng.h"
#include "shardq/pipeline/internal/item_ledger.h"
#include "shardq/pipeline/internal/stage.h"

namespace shardq::pipeline::internal {

inline absl::Status EndOfData() { return absl::OutOfRangeError("end of data"); }

// Pulls the next input element, declaring `held` records while waiting.
template <typename T>
Envelope<T> PullHolding(PipelineContext* context, Stage<T>& input,
                        int64_t held) {
  ItemLedger::WaitingHold hold(context->ledger.get(), held);
  return input.Next();
}

// Records of dropped elements count as consumed (their items complete).
inline absl::Status ConsumeDropped(PipelineContext* context,
                                   const RecordTags& tags) {
  context->records_dropped += NumRecords(tags);
  if (context->ledger == nullptr) return absl::OkStatus();
  return context->ledger->Consume(tags);
}

template <typename T>
class ShuffleStage final : public Stage<T> {
 public:
  ShuffleStage(PipelineContext* context, std::unique_ptr<Stage<T>> input,
               const ShuffleOptions& options)
      : context_(context),
        input_(std::move(input)),
        options_(options),
        rng_(options.seed) {
    buffer_.reserve(static_cast<size_t>(options.buffer_size));
  }

  Envelope<T> Next() override {
    if (draining_) {
      if (!buffer_.empty()) return Pop();
      draining_ = false;
      return Tracked<T>::Marker();
    }
    while (!input_ended_ &&
           static_cast<int64_t>(buffer_.size()) < options_.buffer_size) {
      Envelope<T> in = PullHolding(context_, *input_, held_records_);
      if (!in.ok()) {
        if (!absl::IsOutOfRange(in.status())) return in;
        input_ended_ = true;
        break;
      }
      if (in->marker) {
        if (buffer_.empty() ||
            context_->Stalled(held_records_) == StallReason::kNone) {
          return in;
        }
        // Nothing more comes in until records leave: hand them all on.
        draining_ = true;
        ++context_->shuffle_drains;
        return Pop();
      }
      held_records_ += NumRecords(in->tags);
      buffer_.push_back(*std::move(in));
    }
    if (buffer_.empty()) return EndOfData();
    return Pop();
  }

  bool ReadInPullingThread() override { return input_->ReadInPullingThread(); }

 private:
  Tracked<T> Pop() {
    const size_t index = static_cast<size_t>(
        rng_.UniformBelow(static_cast<uint64_t>(buffer_.size())));
    Tracked<T> out = std::move(buffer_[index]);
    if (index + 1 != buffer_.size()) buffer_[index] = std::move(buffer_.back());
    buffer_.pop_back();
    held_records_ -= NumRecords(out.tags);
    return out;
  }

  PipelineContext* const context_;
  const std::unique_ptr<Stage<T>> input_;
  const ShuffleOptions options_;
  SplitMix64 rng_;
  std::vector<Tracked<T>> buffer_;
  int64_t held_records_ = 0;
  bool input_ended_ = false;
  bool draining_ = false;
};

template <typename T>
class BatchStage final : public Stage<Batch<T>> {
 public:
  BatchStage(PipelineContext* context, std::unique_ptr<Stage<T>> input,
             const BatchOptions& options)
      : context_(context), input_(std::move(input)), options_(options) {}

  Envelope<Batch<T>> Next() override {
    while (!input_ended_ && partial_.size() < options_.batch_size) {
      Envelope<T> in = PullHolding(context_, *input_, held_records_);
      if (!in.ok()) {
        if (!absl::IsOutOfRange(in.status())) return in.status();
        input_ended_ = true;
        break;
      }
      if (in->marker) {
        if (partial_.size() > 0) {
          switch (context_->Stalled(held_records_)) {
            case StallReason::kDry:
              // No record comes before these leave: the data has ended
              // here, for now. Hand them on as a short batch (or drop them).
              if (!options_.drop_remainder) return TakePartial();
              if (absl::Status s = DropPartial(); !s.ok()) return s;
              break;
            case StallReason::kLimit:
              return LimitError();
            case StallReason::kNone:
              break;
          }
        }
        return Tracked<Batch<T>>::Marker();
      }
      if (partial_.rows.empty()) Reserve();
      partial_.rows.push_back(std::move(in->value));
      partial_.padded.push_back(0);
      held_records_ += NumRecords(in->tags);
      tags_.Append(std::move(in->tags));
    }
    if (partial_.size() == 0) return EndOfData();
    if (partial_.size() < options_.batch_size && options_.drop_remainder) {
      if (absl::Status s = DropPartial(); !s.ok()) return s;
      return EndOfData();
    }
    return TakePartial();
  }

  bool ReadInPullingThread() override { return input_->ReadInPullingThread(); }

 private:
  Tracked<Batch<T>> TakePartial() {
    if (partial_.size() < options_.batch_size) ++context_->short_batches;
    Tracked<Batch<T>> out;
    out.value = std::move(partial_);
    out.tags = std::move(tags_);
    partial_ = Batch<T>();
    tags_.clear();
    held_records_ = 0;
    return out;
  }

  void Reserve() {
    const size_t n = static_cast<size_t>(std::min<int64_t>(options_.batch_size, 4096));
    partial_.rows.reserve(n);
    partial_.padded.reserve(n);
    tags_.reserve(n);
  }

  absl::Status DropPartial() {
    Tracked<Batch<T>> dropped = TakePartial();
    return ConsumeDropped(context_, dropped.tags);
  }

  absl::Status LimitError() const {
    const int64_t held_items =
        context_->ledger == nullptr ? 0 : context_->ledger->max_items_held();
    return absl::FailedPreconditionError(absl::StrCat(
        "batch: cannot fill a batch of ", options_.batch_size, " rows: the ",
        held_items, " items this pipeline may hold (max_items_held, by "
        "default the WorkQueue's num_clients) are all read, and their ",
        held_records_, " remaining records are waiting here; no item is "
        "completed before its records leave the pipeline. Raise the "
        "queue's num_clients, or lower the batch size or the buffers"));
  }

  PipelineContext* const context_;
  const std::unique_ptr<Stage<T>> input_;
  const BatchOptions options_;
  Batch<T> partial_;
  RecordTags tags_;
  int64_t held_records_ = 0;
  bool input_ended_ = false;
};

// Splits global batches of `batch_size` rows into `num_replicas` batches.
template <typename T>
class DistributeStage final : public Stage<PerReplicaBatches<T>> {
 public:
  // `options` and `batch_size` are validated (batch_size % num_replicas
  // == 0).
  DistributeStage(PipelineContext* context,
                  std::unique_ptr<Stage<Batch<T>>> input, int64_t batch_size,
                  const DistributeOptions& options)
      : context_(context),
        input_(std::move(input)),
        batch_size_(batch_size),
        options_(options) {}

  Envelope<PerReplicaBatches<T>> Next() override {
    while (true) {
      Envelope<Batch<T>> in = input_->Next();
      if (!in.ok()) return in.status();
      if (in->marker) return Tracked<PerReplicaBatches<T>>::Marker();
      const int64_t rows = in->value.size();
      if (rows > batch_size_) {
        return absl::InternalError(absl::StrCat(
            "distribute: a batch of ", rows, " rows, more than the batch "
            "size ", batch_size_));
      }
      if (rows < batch_size_ &&
          options_.remainder == DistributeOptions::Remainder::kDrop) {
        if (absl::Status s = ConsumeDropped(context_, in->tags); !s.ok()) {
          return s;
        }
        continue;
      }
      Tracked<PerReplicaBatches<T>> out;
      out.value = Split(std::move(in->value));
      out.tags = std::move(in->tags);
      return out;
    }
  }

  bool ReadInPullingThread() override { return input_->ReadInPullingThread(); }

 private:
  // Replica r gets a contiguous run of real rows, as even as possible
  // (a full batch: exactly batch_size / R each), padded to batch_size / R.
  PerReplicaBatches<T> Split(Batch<T> global) const {
    const int64_t replicas = options_.num_replicas;
    const int64_t per_replica = batch_size_ / replicas;
    const int64_t rows = global.size();
    PerReplicaBatches<T> out;
    out.replicas.resize(static_cast<size_t>(replicas));
    int64_t next = 0;
    for (int64_t r = 0; r < replicas; ++r) {
      const int64_t real = rows / replicas + (r < rows % replicas ? 1 : 0);
      Batch<T>& batch = out.replicas[static_cast<size_t>(r)];
      batch.rows.reserve(static_cast<size_t>(per_replica));
      batch.padded.reserve(static_cast<size_t>(per_replica));
      for (int64_t k = 0; k < real; ++k, ++next) {
        batch.rows.push_back(std::move(global.rows[static_cast<size_t>(next)]));
        batch.padded.push_back(global.padded[static_cast<size_t>(next)]);
      }
      while (batch.size() < per_replica) {
        batch.rows.emplace_back();
        batch.padded.push_back(1);
      }
    }
    return out;
  }

  PipelineContext* const context_;
  const std::unique_ptr<Stage<Batch<T>>> input_;
  const int64_t batch_size_;
  const DistributeOptions options_;
};

// Hands out copies of a fixed list of elements, which carry no records.
template <typename T>
class VectorStage final : public Stage<T> {
 public:
  explicit VectorStage(std::shared_ptr<const std::vector<T>> elements)
      : elements_(std::move(elements)) {}

  Envelope<T> Next() override {
    if (next_ == elements_->size()) return EndOfData();
    Tracked<T> out;
    out.value = (*elements_)[next_++];
    return out;
  }

 private:
  const std::shared_ptr<const std::vector<T>> elements_;
  size_t next_ = 0;
};

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_BUFFER_STAGES_H_
