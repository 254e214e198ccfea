// Internal to the pipeline: the Prefetch stage (dataset.h). One thread
// pulls from the input (running every calling-thread stage before it) and
// keeps up to buffer_size results in a FifoQueue; Next() takes from it.
#ifndef SHARDQ_SRC_PIPELINE_PREFETCH_STAGE_H_
#define SHARDQ_SRC_PIPELINE_PREFETCH_STAGE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "shardq/pipeline/queues.h"
#include "shardq/pipeline/internal/stage.h"

namespace shardq::pipeline::internal {

template <typename T>
class PrefetchStage final : public Stage<T> {
 public:
  // buffer_size >= 1 (validated).
  PrefetchStage(PipelineContext* context, std::unique_ptr<Stage<T>> input,
                int64_t buffer_size)
      : context_(context), input_(std::move(input)) {
    QueueOptions options;
    options.name = "prefetch";
    options.capacity = buffer_size;
    out_ = *FifoQueue<Envelope<T>>::Create(options);
    drain_ = std::make_unique<QueueDrain<T>>(out_.get(), "prefetch");
    // The fill thread is the input's only puller: a serial reading stage
    // upstream may read in it (one thread and one hand-off fewer).
    input_->ReadInPullingThread();
    context->starters.push_back([this] { Start(); });
  }

  Envelope<T> Next() override { return drain_->Next(); }
  absl::Status NextRun(int64_t max, std::vector<Tracked<T>>* out) override {
    return drain_->NextRun(max, out);
  }
  bool WaitReady(absl::Duration timeout) override {
    return drain_->WaitReady(timeout);
  }

 private:
  void Start() {
    context_->coordinator.AddStopCallback(
        [this] { out_->Close(/*cancel_pending=*/true); });
    context_->coordinator.Launch("prefetch", [this] { return FillLoop(); });
  }

  absl::Status FillLoop() {
    while (!context_->coordinator.ShouldStop()) {
      Envelope<T> next = input_->Next();
      const bool last = !next.ok();
      const bool end_of_data = last && absl::IsOutOfRange(next.status());
      if (!end_of_data && !out_->Enqueue(std::move(next)).ok()) break;
      if (last) break;
    }
    out_->Close();
    return absl::OkStatus();
  }

  PipelineContext* const context_;
  const std::unique_ptr<Stage<T>> input_;
  std::unique_ptr<FifoQueue<Envelope<T>>> out_;
  std::unique_ptr<QueueDrain<T>> drain_;  // the consumer's side of out_
};

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_PREFETCH_STAGE_H_
