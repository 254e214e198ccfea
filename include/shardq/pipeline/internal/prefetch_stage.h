// Internal to the pipeline: the Prefetch stage (dataset.h). One thread
// pulls from the input (running every calling-thread stage before it) and
// keeps up to buffer_size results ready; Next() takes from them.
//
// Hand-off. The consumer takes everything ready in one go. When it finds
// nothing ready it sleeps until the buffer is full or the input has ended,
// at most kLinger; if nothing came by then (a stall), until the first
// result arrives (as long as the caller asked) and then kLinger more for
// the buffer to fill. The fill thread signals it only then (it knows what
// the consumer waits for: waiting_for_), so a consumer faster than its
// input is woken once per buffer rather than once per result: each wake-up
// costs the fill thread a system call, and on a machine with few cores
// (or a virtual machine, where waking an idle core costs tens of
// microseconds) often its core for a while. Both sides wait on
// CondVars, not absl::Condition, so ThreadSanitizer sees every hand-off
// (src/pipeline/tsan_absl_mutex_shim.cc).
// Throughput is unchanged: the fill thread never waits for the consumer
// while there is room; a result waits at most about 2 * kLinger longer.
// When the fill thread is the only thread filling the buffer (a serial
// reading stage upstream), the consumer first spins up to kSpin on an
// empty buffer (SpinWhileFilling), so that neither side makes a system
// call while the input keeps up.
//
// Recycling (Iterator::Recycle, and the record tags of every element
// consumed). What the consumer hands back waits in spent_ (the consumer's)
// and travels with its next Take, or once more than two buffers' worth
// wait, under the same lock; the fill thread destroys it at its next Put,
// outside the lock, so what it allocated is freed in the thread that
// allocated it; strings first go to the context's StringPool, for the
// reading stage to read the next records into. Once the consumer has seen
// the end it destroys what it hands back itself. A few buffers' worth are
// held at most: between two Puts the consumer takes at most a buffer.
#ifndef SHARDQ_SRC_PIPELINE_PREFETCH_STAGE_H_
#define SHARDQ_SRC_PIPELINE_PREFETCH_STAGE_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "shardq/pipeline/internal/stage.h"

namespace shardq::pipeline::internal {

template <typename T>
class PrefetchStage final : public Stage<T> {
 public:
  // The longest a result that is ready waits for more to come with it.
  static constexpr absl::Duration kLinger = absl::Milliseconds(1);
  // The longest the consumer spins on an empty buffer before it sleeps.
  static constexpr absl::Duration kSpin = absl::Microseconds(300);

  // buffer_size >= 1 (validated).
  PrefetchStage(PipelineContext* context, std::unique_ptr<Stage<T>> input,
                int64_t buffer_size)
      : context_(context), input_(std::move(input)), capacity_(buffer_size) {
    ready_.reserve(
        static_cast<size_t>(std::min<int64_t>(capacity_, kReserveAtMost)));
    // The fill thread is the input's only puller: a serial reading stage
    // upstream may read in it (one thread and one hand-off fewer).
    // Then the fill thread is the only thread filling the buffer, and the
    // consumer may spin while it does (SpinWhileFilling) when there is a
    // core for each; with more threads a spinning consumer would take a
    // core they need.
    spin_ = input_->ReadInPullingThread() &&
            std::thread::hardware_concurrency() >= 2;
    context->starters.push_back([this] { Start(); });
  }

  Envelope<T> Next() override {
    if (taken_.empty()) Take(absl::InfiniteDuration());
    Envelope<T> next = std::move(taken_.front());
    taken_.pop_front();
    if (!next.ok()) SawTheEnd();
    return next;
  }

  absl::Status NextRun(int64_t max, std::vector<Tracked<T>>* out) override {
    if (taken_.empty()) Take(absl::InfiniteDuration());
    if (!taken_.front().ok()) {
      absl::Status end = taken_.front().status();
      taken_.pop_front();
      SawTheEnd();
      return end;
    }
    for (int64_t n = 0; n < max && !taken_.empty() && taken_.front().ok();
         ++n) {
      out->push_back(*std::move(taken_.front()));
      taken_.pop_front();
      if (out->back().marker) break;
    }
    return absl::OkStatus();
  }

  bool WaitReady(absl::Duration timeout) override {
    return !taken_.empty() || Take(timeout);
  }
  bool CanWaitReady() const override { return true; }

  void Recycle(T spent) override {
    if (fill_done_) return;  // destroyed here
    std::optional<size_t> block_bytes;
    if constexpr (std::is_same_v<T, Batch<std::string>>) {
      block_bytes = BlockBytes(spent.rows);  // here: the consumer is idle
    }
    spent_.elements.push_back(Spent{std::move(spent), block_bytes});
    MaybeHandBack();
  }

  void RecycleTags(RecordTags spent) override {
    if (fill_done_) return;  // destroyed here
    spent_.tags.push_back(std::move(spent));
    MaybeHandBack();
  }

 private:
  // What the consumer hands back: spent elements (Recycle) and the tags of
  // the records it consumed (RecycleTags), all made in the fill thread.
  // Moved between the vectors below, never swapped: each vector's buffer
  // stays with the thread that allocated it.
  struct Spent {
    T element;
    // For a batch of strings: BlockBytes of its rows (see ReuseSpent).
    std::optional<size_t> block_bytes;
  };
  struct Returns {
    std::vector<Spent> elements;
    std::vector<RecordTags> tags;
    bool empty() const { return elements.empty() && tags.empty(); }
    size_t size() const { return elements.size() + tags.size(); }
    void clear() {
      elements.clear();
      tags.clear();
    }
    // Appends everything to *to and clears this (capacity kept).
    void MoveTo(Returns* to) {
      to->elements.insert(to->elements.end(),
                          std::make_move_iterator(elements.begin()),
                          std::make_move_iterator(elements.end()));
      to->tags.insert(to->tags.end(), std::make_move_iterator(tags.begin()),
                      std::make_move_iterator(tags.end()));
      clear();
    }
  };

  void Start() {
    context_->coordinator.AddStopCallback([this] {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      PublishLocked();
      room_.SignalAll();
      ready_cv_.SignalAll();
    });
    context_->coordinator.Launch("prefetch", [this] { return FillLoop(); });
  }

  absl::Status FillLoop() {
    while (!context_->coordinator.ShouldStop()) {
      Envelope<T> next = input_->Next();
      const bool last = !next.ok();
      const bool end_of_data = last && absl::IsOutOfRange(next.status());
      if (!end_of_data && !Put(std::move(next))) break;
      if (last) break;
    }
    Returns spent;  // destroyed after the lock is released
    absl::MutexLock lock(&mu_);
    ended_ = true;
    PublishLocked();
    returned_.MoveTo(&spent);
    WakeConsumer();
    return absl::OkStatus();
  }

  // The consumer was handed the end (or an error): what it hands back from
  // now on is destroyed in its own thread, at once.
  void SawTheEnd() {
    fill_done_ = true;
    spent_.clear();
  }

  // Hands spent_ back under the lock once more than two buffers' worth
  // waits (Take hands it back too).
  void MaybeHandBack() {
    if (static_cast<int64_t>(spent_.size()) <= 2 * capacity_) return;
    Returns drop;  // destroyed after the lock is released
    absl::MutexLock lock(&mu_);
    HandBackLocked(&drop);
  }

  // Passes spent_ to the fill thread, or to *drop (the caller destroys it
  // after unlocking) once the fill thread is done.
  void HandBackLocked(Returns* drop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (ended_ || stopping_) {
      fill_done_ = true;
      spent_.MoveTo(drop);
      returned_.MoveTo(drop);
      return;
    }
    spent_.MoveTo(&returned_);
  }

  // The fill thread's: the elements it was handed back, harvested into
  // the reading stage's StringPool (what the pool cannot keep is freed) and
  // destroyed once Put has released the lock.
  void ReuseSpent() {
    if (spent_here_.empty()) return;
    for (Spent& spent : spent_here_.elements) {
      if constexpr (std::is_same_v<T, Batch<std::string>>) {
        if (spent.block_bytes.has_value()) {  // its rows go whole
          blocks_here_.push_back(StringPool::Block{
              std::move(spent.element.rows), *spent.block_bytes});
          continue;
        }
      }
      Harvest(spent.element, &strings_here_);
    }
    context_->strings.Give(&strings_here_);
    context_->strings.GiveBlocks(&blocks_here_);
    strings_here_.clear();
    blocks_here_.clear();  // what the pool did not keep is freed here
    spent_here_.clear();
  }

  // Waits for room (false once stopping), then adds `result`.
  bool Put(Envelope<T> result) {
    {
      absl::MutexLock lock(&mu_);
      while (!RoomOrStopping()) room_.Wait(&mu_);
      if (stopping_) return false;
      // Moved, not swapped: every buffer stays with the thread that
      // allocated it (a block freed by another thread than its allocator
      // makes the two contend for glibc's arena lock).
      returned_.MoveTo(&spent_here_);
      ready_.push_back(std::move(result));
      PublishLocked();
      if (waiting_for_ == Awaiting::kAny ||
          (waiting_for_ == Awaiting::kFull && FullOrEnded())) {
        WakeConsumer();
      }
    }
    ReuseSpent();
    return true;
  }

  // Signals the consumer if it waits (once: it re-arms waiting_for_).
  void WakeConsumer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (waiting_for_ == Awaiting::kNothing) return;
    waiting_for_ = Awaiting::kNothing;
    ready_cv_.Signal();
  }

  // What the consumer may spin on without the lock: ready_.size(), or
  // capacity_ once the input ended or the pipeline stops.
  void PublishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    published_.store(stopping_ || ended_ ? capacity_
                                         : static_cast<int64_t>(ready_.size()),
                     std::memory_order_release);
  }

  // Before sleeping on an empty buffer, the consumer spins (without the
  // lock, for at most kSpin) while the fill thread is filling it: waking a
  // sleeping thread costs the fill thread a system call and, on a virtual
  // machine, tens of microseconds before the consumer runs, about what a
  // buffer of small records takes to fill. Returns at once when something
  // is ready; never when nothing has arrived for a while (a stall sleeps).
  void SpinWhileFilling(absl::Duration timeout) {
    if (!spin_ || published_.load(std::memory_order_acquire) != 0) return;
    const absl::Time until = absl::Now() + std::min(timeout, kSpin);
    for (int n = 1;; ++n) {
      if (published_.load(std::memory_order_acquire) >= capacity_) return;
      if (n % 64 == 0 && absl::Now() >= until) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
  }

  bool RoomOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || static_cast<int64_t>(ready_.size()) < capacity_;
  }
  bool AnyOrEnded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || ended_ || !ready_.empty();
  }
  bool FullOrEnded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || ended_ ||
           static_cast<int64_t>(ready_.size()) >= capacity_;
  }

  // Waits until the buffer is full, the input ended or `until`.
  void LingerUntilFull(absl::Time until) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!FullOrEnded()) {
      waiting_for_ = Awaiting::kFull;
      if (ready_cv_.WaitWithDeadline(&mu_, until)) break;
    }
  }

  // Moves what is ready into taken_, waiting up to `timeout` for the first
  // result (see the hand-off at the top). Once the input has ended and
  // everything was taken: OUT_OF_RANGE; once stopping: CANCELLED. False if
  // nothing came within `timeout`.
  bool Take(absl::Duration timeout) {
    SpinWhileFilling(timeout);
    Returns drop;  // destroyed after the lock is released
    absl::MutexLock lock(&mu_);
    if (!spent_.empty()) HandBackLocked(&drop);
    if (ready_.empty()) {
      const absl::Time now = absl::Now();
      const absl::Time give_up = now + timeout;
      // An input that keeps up fills the buffer within kLinger: one
      // wake-up, when it is full.
      LingerUntilFull(std::min(give_up, now + kLinger));
      if (!AnyOrEnded()) {
        // A stall: woken by the first result, then kLinger for more.
        while (!AnyOrEnded()) {
          waiting_for_ = Awaiting::kAny;
          if (ready_cv_.WaitWithDeadline(&mu_, give_up) && !AnyOrEnded()) {
            waiting_for_ = Awaiting::kNothing;
            return false;
          }
        }
        LingerUntilFull(absl::Now() + kLinger);
      }
      waiting_for_ = Awaiting::kNothing;
    }
    if (stopping_) {
      HandBackLocked(&drop);  // from now on Recycle destroys here
      taken_.push_back(StoppingError("prefetch"));
      return true;
    }
    if (ready_.empty()) {  // ended
      HandBackLocked(&drop);
      taken_.push_back(absl::OutOfRangeError(
          "prefetch: the input has ended and every result was taken"));
      return true;
    }
    for (Envelope<T>& result : ready_) taken_.push_back(std::move(result));
    ready_.clear();
    PublishLocked();
    room_.Signal();  // the fill thread may wait for room
    return true;
  }

  PipelineContext* const context_;
  const std::unique_ptr<Stage<T>> input_;  // the fill thread's only
  const int64_t capacity_;
  bool spin_ = false;  // set once, in the constructor
  std::deque<Envelope<T>> taken_;  // the consumer's only
  Returns spent_;                  // the consumer's only: handed back
  bool fill_done_ = false;         // the consumer's only: saw the end

  // What a waiting consumer waits for (kNothing: it is not waiting).
  enum class Awaiting { kNothing, kAny, kFull };

  absl::Mutex mu_;
  absl::CondVar room_;      // the fill thread waits for room
  absl::CondVar ready_cv_;  // the consumer waits for waiting_for_
  Awaiting waiting_for_ ABSL_GUARDED_BY(mu_) = Awaiting::kNothing;
  // Reserved for capacity_ results up front, so that no buffer of it is
  // allocated by one thread and freed by the other.
  std::vector<Envelope<T>> ready_ ABSL_GUARDED_BY(mu_);
  // Handed back by the consumer, for the fill thread to destroy.
  // Its buffers are the consumer's (grown in HandBackLocked).
  Returns returned_ ABSL_GUARDED_BY(mu_);
  Returns spent_here_;                   // the fill thread's: see ReuseSpent
  std::vector<std::string> strings_here_;  // the fill thread's
  std::vector<StringPool::Block> blocks_here_;  // the fill thread's
  bool ended_ ABSL_GUARDED_BY(mu_) = false;  // the fill thread is done
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Written under mu_ (PublishLocked), read by the spinning consumer.
  std::atomic<int64_t> published_{0};
};

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_PREFETCH_STAGE_H_
