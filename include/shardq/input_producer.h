// A local, bounded proxy of a WorkQueue, kept filled by a background thread,
// so that a reader finds its next item already leased when it finishes one.
#ifndef SHARDQ_INPUT_PRODUCER_H_
#define SHARDQ_INPUT_PRODUCER_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "shardq/item_source.h"
#include "shardq/work_queue.h"

namespace shardq {

// Thread-safe. The background thread takes an item whenever fewer than
// `capacity` items are buffered or being read and not yet done (never more
// than the queue's num_clients leases).
class InputProducer final : public ItemSource {
 public:
  // `queue` must outlive the producer. Starts the background thread.
  InputProducer(WorkQueue* queue, int64_t capacity);
  // Stops the thread and releases the items still buffered.
  ~InputProducer() override;

  // The next buffered item; blocks until one arrives. OUT_OF_RANGE once the
  // queue is at its end and the buffer is drained; the queue's error if
  // taking failed.
  absl::StatusOr<WorkItem> NextItem() override;
  // Completes the item in the queue and frees its slot.
  absl::Status ItemDone(const WorkItem& item) override;
  // Forwards to the queue.
  void NoteProgress(const WorkItem& item, int64_t offset) override;
  void NoteReturned(const WorkItem& item, int64_t offset, int64_t in_order,
                    int64_t returned) override;
  void NoteLost(const WorkItem& item, int64_t records) override;
  // The oldest buffered item, else the queue's next item taken ahead.
  std::optional<WorkItem> PeekNextItem() override;
  // True: NextItem waits while `capacity` items are out and not done.
  bool NextWaitsForItemsDone() const override { return true; }
  absl::Status CheckOpen() const override;

  int64_t size() const;
  int64_t capacity() const { return capacity_; }

 private:
  class State;  // the buffer and its thread (src/client/input_producer.cc)

  WorkQueue* const queue_;
  const int64_t capacity_;
  const std::unique_ptr<State> state_;
};

}  // namespace shardq

#endif  // SHARDQ_INPUT_PRODUCER_H_
