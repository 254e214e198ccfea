// Internal to the pipeline: the Map stage (dataset.h), in the caller's
// thread (num_threads == 0) or over worker threads.
//
// Threads. A dispatcher thread pulls what the input has ready (up to the
// room left: at most buffer_size elements pulled and not yet taken by the
// consumer), with no lock held, and queues it as numbered chunks, split
// over the workers; worker threads apply the function with no lock held
// and file the result chunks. The consumer takes chunks by number
// (deterministic) or as they finish. The end of the input (or its error)
// is filed at the number it came at, so it is handed on after every
// element before it. Elements move between threads in chunks, so the
// cost of a hand-off is shared by the elements ready at the time.
#ifndef SHARDQ_SRC_PIPELINE_MAP_STAGE_H_
#define SHARDQ_SRC_PIPELINE_MAP_STAGE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "shardq/pipeline/stage_options.h"
#include "shardq/pipeline/internal/stage.h"

namespace shardq::pipeline::internal {

// The function of a Map stage: maps `in` into *out (OK), or fails. What
// the user's function returns (an Out, or a StatusOr<Out>) is unwrapped
// here, in a wrapper compiled for its type (MakeMapFunction), so that an
// element costs one indirect call and no StatusOr when the function cannot
// fail.
template <typename In, typename Out>
using MapFunction = std::function<absl::Status(In&& in, Out* out)>;

template <typename U>
struct IsStatusOr : std::false_type {};
template <typename U>
struct IsStatusOr<absl::StatusOr<U>> : std::true_type {};

template <typename In, typename Out, typename Fn>
MapFunction<In, Out> MakeMapFunction(Fn fn) {
  return [fn = std::move(fn)](In&& in, Out* out) mutable -> absl::Status {
    using Result = std::decay_t<std::invoke_result_t<Fn&, In>>;
    if constexpr (IsStatusOr<Result>::value) {
      Result value = fn(std::move(in));
      if (!value.ok()) return value.status();
      *out = *std::move(value);
    } else {
      *out = fn(std::move(in));
    }
    return absl::OkStatus();
  };
}

// Applies `fn` to one element (not a marker). `index` numbers the element
// in the stage's input, for the error.
template <typename In, typename Out>
absl::Status ApplyMapTo(const MapFunction<In, Out>& fn, const std::string& name,
                        int64_t index, Tracked<In>&& in, Tracked<Out>* out) {
  absl::Status s = fn(std::move(in.value), &out->value);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat(name, ": element ", index, ": ",
                                               s.message()));
  }
  out->tags = std::move(in.tags);
  return absl::OkStatus();
}

// Applies `fn` to one element; markers and errors pass unchanged.
template <typename In, typename Out>
Envelope<Out> ApplyMap(const MapFunction<In, Out>& fn, const std::string& name,
                       int64_t index, Envelope<In> in) {
  if (!in.ok()) return in.status();
  if (in->marker) return Tracked<Out>::Marker();
  Tracked<Out> tracked;
  absl::Status s = ApplyMapTo(fn, name, index, *std::move(in), &tracked);
  if (!s.ok()) return s;
  return tracked;
}

template <typename In, typename Out>
class InlineMapStage final : public Stage<Out> {
 public:
  InlineMapStage(std::unique_ptr<Stage<In>> input, MapFunction<In, Out> fn,
                 const MapOptions& options)
      : input_(std::move(input)), fn_(std::move(fn)), name_(options.name) {}

  Envelope<Out> Next() override {
    if (!deferred_.ok()) return std::exchange(deferred_, absl::OkStatus());
    Envelope<In> in = input_->Next();
    const int64_t index = in.ok() && !in->marker ? next_index_++ : -1;
    return ApplyMap(fn_, name_, index, std::move(in));
  }

  // A run of the input, mapped. A failing element ends the run; its error
  // comes from the next call (the rest of the input run is dropped: the
  // error ends the pipeline).
  absl::Status NextRun(int64_t max, std::vector<Tracked<Out>>* out) override {
    if (!deferred_.ok()) return std::exchange(deferred_, absl::OkStatus());
    in_.clear();
    if (absl::Status s = input_->NextRun(max, &in_); !s.ok()) return s;
    const size_t start = out->size();
    for (Tracked<In>& e : in_) {
      if (e.marker) {
        out->push_back(Tracked<Out>::Marker());
        continue;
      }
      Tracked<Out>& mapped = out->emplace_back();
      absl::Status s = ApplyMapTo(fn_, name_, next_index_++, std::move(e),
                                  &mapped);
      if (!s.ok()) {
        out->pop_back();
        if (out->size() == start) return s;
        deferred_ = std::move(s);
        break;
      }
    }
    return absl::OkStatus();
  }

  bool ReadInPullingThread() override { return input_->ReadInPullingThread(); }

 private:
  const std::unique_ptr<Stage<In>> input_;
  const MapFunction<In, Out> fn_;
  const std::string name_;
  int64_t next_index_ = 0;
  std::vector<Tracked<In>> in_;  // NextRun's input run, reused
  absl::Status deferred_;        // an error that ends the last run
};

template <typename In, typename Out>
class ParallelMapStage final : public Stage<Out> {
 public:
  // Most elements in one piece of work: enough to amortise the hand-offs
  // between threads, few enough to spread work over the threads.
  static constexpr int64_t kMaxChunk = 64;

  // `options` are validated and resolved (num_threads >= 1, buffer_size >=
  // num_threads).
  ParallelMapStage(PipelineContext* context, std::unique_ptr<Stage<In>> input,
                   MapFunction<In, Out> fn, const MapOptions& options)
      : context_(context),
        input_(std::move(input)),
        fn_(std::move(fn)),
        options_(options) {
    context->starters.push_back([this] { Start(); });
  }

  Envelope<Out> Next() override {
    if (current_.empty()) TakeChunk();
    Envelope<Out> out = std::move(current_.front());
    current_.pop_front();
    return out;
  }

  absl::Status NextRun(int64_t max, std::vector<Tracked<Out>>* out) override {
    if (current_.empty()) TakeChunk();
    if (!current_.front().ok()) {
      absl::Status end = current_.front().status();
      current_.pop_front();
      return end;
    }
    for (int64_t n = 0; n < max && !current_.empty() && current_.front().ok();
         ++n) {
      out->push_back(*std::move(current_.front()));
      current_.pop_front();
      if (out->back().marker) break;
    }
    return absl::OkStatus();
  }

 private:
  // Consecutive input elements, numbered in input order.
  struct Work {
    int64_t seq = 0;          // of the chunk
    int64_t first_index = 0;  // of its first element (markers excluded)
    std::vector<Tracked<In>> in;
  };
  using Chunk = std::vector<Envelope<Out>>;

  void Start() {
    context_->coordinator.AddStopCallback([this] {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      room_cv_.SignalAll();
      work_cv_.SignalAll();
      ready_cv_.SignalAll();
    });
    context_->coordinator.Launch(absl::StrCat(options_.name, " dispatcher"),
                                 [this] { return DispatchLoop(); });
    for (int64_t t = 0; t < options_.num_threads; ++t) {
      context_->coordinator.Launch(
          absl::StrCat(options_.name, " worker #", t),
          [this] { return WorkLoop(); });
    }
  }

  // Fills current_ with the next chunk of results (or the end).
  void TakeChunk() {
    absl::MutexLock lock(&mu_);
    while (true) {
      if (stopping_) {
        current_.push_back(StoppingError(options_.name));
        return;
      }
      Chunk chunk;
      bool found = false;
      if (options_.deterministic) {
        auto it = results_.find(next_out_);
        if (it != results_.end()) {
          chunk = std::move(it->second);
          results_.erase(it);
          found = true;
        }
      } else if (!finished_.empty()) {
        chunk = std::move(finished_.front());
        finished_.pop_front();
        found = true;
      }
      if (found) {
        ++next_out_;
        taken_ -= static_cast<int64_t>(chunk.size());
        room_cv_.Signal();
        for (Envelope<Out>& e : chunk) current_.push_back(std::move(e));
        return;
      }
      if (input_ended_ && next_out_ == end_seq_) {
        current_.push_back(end_status_);
        return;
      }
      ready_cv_.Wait(&mu_);
    }
  }

  // Pulls what the input has ready (no lock held), in chunks spread over
  // the workers.
  absl::Status DispatchLoop() {
    int64_t seq = 0;
    int64_t index = 0;
    std::vector<Tracked<In>> pulled;
    while (true) {
      int64_t room = 0;
      {
        absl::MutexLock lock(&mu_);
        while (!stopping_ && taken_ >= options_.buffer_size) {
          room_cv_.Wait(&mu_);
        }
        if (stopping_) return absl::OkStatus();
        room = std::min(kMaxChunk, options_.buffer_size - taken_);
      }
      pulled.clear();
      // Empty exactly when `end` is not OK.
      absl::Status end = input_->NextRun(room, &pulled);
      const int64_t n = static_cast<int64_t>(pulled.size());
      const int64_t piece =
          std::max<int64_t>(1, (n + options_.num_threads - 1) /
                                   options_.num_threads);
      absl::MutexLock lock(&mu_);
      for (int64_t begin = 0; begin < n; begin += piece) {
        Work work;
        work.seq = seq++;
        work.first_index = index;
        for (int64_t k = begin; k < std::min(n, begin + piece); ++k) {
          if (!pulled[static_cast<size_t>(k)].marker) ++index;
          work.in.push_back(std::move(pulled[static_cast<size_t>(k)]));
        }
        taken_ += static_cast<int64_t>(work.in.size());
        work_.push_back(std::move(work));
      }
      work_cv_.SignalAll();
      if (!end.ok()) {
        input_ended_ = true;
        end_seq_ = seq;
        end_status_ = std::move(end);
        ready_cv_.SignalAll();
        return absl::OkStatus();
      }
    }
  }

  absl::Status WorkLoop() {
    while (true) {
      Work work;
      {
        absl::MutexLock lock(&mu_);
        while (!stopping_ && work_.empty() && !input_ended_) {
          work_cv_.Wait(&mu_);
        }
        if (stopping_ || work_.empty()) return absl::OkStatus();
        work = std::move(work_.front());
        work_.pop_front();
      }
      Chunk out;
      out.reserve(work.in.size());
      int64_t index = work.first_index;
      for (Tracked<In>& in : work.in) {
        if (in.marker) {
          out.push_back(Tracked<Out>::Marker());
          continue;
        }
        Tracked<Out> mapped;
        absl::Status s =
            ApplyMapTo(fn_, options_.name, index++, std::move(in), &mapped);
        if (s.ok()) {
          out.push_back(std::move(mapped));
        } else {
          out.push_back(std::move(s));
        }
      }
      absl::MutexLock lock(&mu_);
      if (options_.deterministic) {
        results_.emplace(work.seq, std::move(out));
        if (work.seq == next_out_) ready_cv_.Signal();
      } else {
        finished_.push_back(std::move(out));
        ready_cv_.Signal();
      }
    }
  }

  PipelineContext* const context_;
  const std::unique_ptr<Stage<In>> input_;  // the dispatcher's only
  const MapFunction<In, Out> fn_;
  const MapOptions options_;
  std::deque<Envelope<Out>> current_;  // the consumer's only

  absl::Mutex mu_;
  absl::CondVar room_cv_;   // the dispatcher waits for room
  absl::CondVar work_cv_;   // workers wait for work
  absl::CondVar ready_cv_;  // the consumer waits for a result
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Elements pulled from the input and not yet taken by the consumer (at
  // most buffer_size).
  int64_t taken_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Work> work_ ABSL_GUARDED_BY(mu_);
  // Result chunks by number (deterministic) or in finishing order.
  std::map<int64_t, Chunk> results_ ABSL_GUARDED_BY(mu_);
  std::deque<Chunk> finished_ ABSL_GUARDED_BY(mu_);
  int64_t next_out_ ABSL_GUARDED_BY(mu_) = 0;  // chunks taken
  bool input_ended_ ABSL_GUARDED_BY(mu_) = false;
  int64_t end_seq_ ABSL_GUARDED_BY(mu_) = 0;  // chunks before the end
  absl::Status end_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_MAP_STAGE_H_
