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

// Records of dropped elements count as consumed (their items complete).
inline absl::Status ConsumeDropped(PipelineContext* context,
                                   const RecordTags& tags) {
  context->records_dropped += static_cast<int64_t>(tags.size());
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
    buffer_.reserve(static_cast<size_t>(
        std::min<int64_t>(options.buffer_size, kReserveAtMost)));
  }

  Envelope<T> Next() override {
    one_.clear();
    if (absl::Status s = NextRun(1, &one_); !s.ok()) return s;
    return std::move(one_.front());
  }

  // Each element handed on is drawn from a full buffer (or, once the input
  // ended, from what is left), and the input is pulled in runs: as if by
  // one Next() per element, pulling one input element per draw. Pulls only
  // while this run is still empty, so it never waits holding elements that
  // the stages after it have not seen (see item_ledger.h on stalls).
  absl::Status NextRun(int64_t max, std::vector<Tracked<T>>* out) override {
    const size_t start = out->size();
    auto produced = [&] { return static_cast<int64_t>(out->size() - start); };
    while (produced() < max) {
      if (draining_) {
        if (!buffer_.empty()) {
          PopTo(out);
          continue;
        }
        draining_ = false;
        out->push_back(Tracked<T>::Marker());
        break;  // a run ends after a marker
      }
      while (!input_ended_ &&
             static_cast<int64_t>(buffer_.size()) < options_.buffer_size) {
        if (staged_next_ == staged_.size()) {
          if (produced() > 0) return absl::OkStatus();
          if (absl::Status s = PullRun(max); !s.ok()) {
            if (!absl::IsOutOfRange(s)) return s;
            input_ended_ = true;
            break;
          }
        }
        Tracked<T>& in = staged_[staged_next_];
        if (in.marker) {
          // Judged only with nothing handed on in this run, as a Next()
          // would: the stages after this one hold all it handed on.
          if (produced() > 0) return absl::OkStatus();
          ++staged_next_;
          const StallReason why =
              buffer_.empty() ? StallReason::kNone : context_->Stalled(held_records_);
          if (why == StallReason::kNone) {
            out->push_back(std::move(in));
            return absl::OkStatus();
          }
          // Nothing more comes in until records leave: hand them all on.
          if (why == StallReason::kLimit) context_->ledger->NoteLimitStall();
          draining_ = true;
          ++context_->shuffle_drains;
          break;
        }
        if (static_cast<int64_t>(buffer_.size()) + 1 == options_.buffer_size &&
            !buffer_.empty()) {
          // The draw that a full buffer makes, without the element first
          // joining the buffer: the drawn one leaves, the new one takes its
          // place (or is drawn itself), as a push and PopTo would.
          ++staged_next_;
          DrawWith(std::move(in), out);
          if (produced() >= max) return absl::OkStatus();
          continue;
        }
        buffer_.push_back(std::move(in));
        ++staged_next_;
      }
      if (draining_) continue;
      if (buffer_.empty()) {
        if (produced() > 0) break;
        return EndOfData();
      }
      PopTo(out);
    }
    return absl::OkStatus();
  }

  bool ReadInPullingThread() override { return input_->ReadInPullingThread(); }

 private:
  // Pulls the next input run into staged_ (which is used up), declaring
  // the records held here while waiting. Its records count as held here.
  absl::Status PullRun(int64_t max) {
    staged_.clear();
    staged_next_ = 0;
    const int64_t room =
        options_.buffer_size - static_cast<int64_t>(buffer_.size());
    absl::Status s;
    {
      ItemLedger::WaitingHold hold(context_->ledger.get(), held_records_);
      s = input_->NextRun(std::max(room, max), &staged_);
    }
    for (const Tracked<T>& in : staged_) held_records_ += NumRecords(in.tags);
    return s;
  }

  // Moves a random element of the buffer to the end of *out; the last
  // element takes its place.
  void PopTo(std::vector<Tracked<T>>* out) {
    const size_t index = static_cast<size_t>(
        rng_.UniformBelow(static_cast<uint64_t>(buffer_.size())));
    out->push_back(std::move(buffer_[index]));
    if (index + 1 != buffer_.size()) buffer_[index] = std::move(buffer_.back());
    buffer_.pop_back();
    held_records_ -= NumRecords(out->back().tags);
  }

  // PopTo as if `in` had been pushed first: the same draw, one move less.
  void DrawWith(Tracked<T>&& in, std::vector<Tracked<T>>* out) {
    const size_t size = buffer_.size() + 1;
    const size_t index =
        static_cast<size_t>(rng_.UniformBelow(static_cast<uint64_t>(size)));
    if (index + 1 == size) {
      out->push_back(std::move(in));
    } else {
      out->push_back(std::move(buffer_[index]));
      buffer_[index] = std::move(in);
    }
    held_records_ -= NumRecords(out->back().tags);
  }

  PipelineContext* const context_;
  const std::unique_ptr<Stage<T>> input_;
  const ShuffleOptions options_;
  SplitMix64 rng_;
  std::vector<Tracked<T>> buffer_;
  // The input run being taken in, from staged_[staged_next_] on.
  std::vector<Tracked<T>> staged_;
  size_t staged_next_ = 0;
  std::vector<Tracked<T>> one_;  // Next()'s run
  // Records of buffer_ and of the rest of staged_.
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

  // Pulls the input in runs of at most the rows still missing, so nothing
  // is left over when the batch is full.
  Envelope<Batch<T>> Next() override {
    while (!input_ended_ && partial_.size() < options_.batch_size) {
      if (staged_next_ == staged_.size()) {
        staged_.clear();
        staged_next_ = 0;
        absl::Status s;
        {
          ItemLedger::WaitingHold hold(context_->ledger.get(), held_records_);
          s = input_->NextRun(options_.batch_size - partial_.size(), &staged_);
        }
        if (!s.ok()) {
          if (!absl::IsOutOfRange(s)) return s;
          input_ended_ = true;
          break;
        }
      }
      Tracked<T>& in = staged_[staged_next_++];
      if (in.marker) {
        if (partial_.size() > 0) {
          switch (context_->Stalled(held_records_)) {
            case StallReason::kDry:
              // No record comes before these leave: the data has ended
              // here, for now. Hand them on as a short batch (or drop them).
              if (!options_.drop_remainder) return TakePartial();
              if (absl::Status s = DropPartial(); !s.ok()) return s;
              break;
            case StallReason::kLimit:
              // Every item the pipeline may hold is read, and these
              // records must leave before another can be taken: handed on
              // as a short batch. Where a short batch would be dropped,
              // they count as consumed now instead and stay to fill this
              // batch (ItemLedger::ConsumeEarly).
              context_->ledger->NoteLimitStall();
              if (!options_.drop_remainder && !context_->short_batches_dropped) {
                return TakePartial();
              }
              early_records_ += held_records_;
              held_records_ = 0;
              if (absl::Status s = context_->ledger->ConsumeEarly(&tags_); !s.ok()) return s;
              break;
            case StallReason::kNone:
              break;
          }
        }
        return Tracked<Batch<T>>::Marker();
      }
      if (partial_.rows.empty()) Reserve();
      partial_.rows.push_back(std::move(in.value));
      partial_.padded.push_back(0);
      held_records_ += NumRecords(in.tags);
      tags_.Append(std::move(in.tags));
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
    if (early_records_ > 0) {
      if (partial_.size() == options_.batch_size) {
        context_->ledger->NoteEarlyHandedOn(early_records_);
      }
      early_records_ = 0;
    }
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

  PipelineContext* const context_;
  const std::unique_ptr<Stage<T>> input_;
  const BatchOptions options_;
  Batch<T> partial_;
  RecordTags tags_;
  // The input run being taken in, from staged_[staged_next_] on.
  std::vector<Tracked<T>> staged_;
  size_t staged_next_ = 0;
  int64_t held_records_ = 0;
  // Records of partial_ counted consumed early (ItemLedger::ConsumeEarly).
  int64_t early_records_ = 0;
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
        options_(options) {
    // (Stages are built before any thread starts.)
    if (options.remainder == DistributeOptions::Remainder::kDrop) {
      context->short_batches_dropped = true;
    }
  }

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
