// The shared-memory batch slots of a DataLoader worker (shardq/_torch_slots.py),
// as the C++ parse_example stage sees them: it parses a batch straight into
// a free slot (no copy in the worker's Python thread).
//
// A slot is memory Python owns (a torch shared storage, mapped by the
// worker and the training process): kHeader bytes of header, whose byte 0
// is 1 while the slot is in use, then the batch. Whoever claims a slot,
// Python or a parse thread, claims it through the pool, which sets that
// byte under its mutex, so no slot is given to two batches; the training
// process sets it back to 0 when it is done with the batch.
#ifndef SHARDQ_PYTHON_PY_SLOTS_H_
#define SHARDQ_PYTHON_PY_SLOTS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "pybind11/pybind11.h"

namespace shardq::python {

class SlotPool {
 public:
  static constexpr int64_t kHeader = 64;  // as _torch_slots._HEADER

  // Registers slot `id`: its header at `base`, `capacity` bytes after the
  // header. The memory must stay valid until Remove(id) returns true.
  // Whether it is in use is its header's byte 0, as it is now.
  void Add(int64_t id, uintptr_t base, int64_t capacity);

  // The first registered free slot of at least `bytes`, now in use; -1 when
  // none is (the caller makes a new one, or parses elsewhere).
  int64_t Claim(int64_t bytes, char** data);

  // Unregisters slot `id` if it is free: true (its memory may go); false
  // when it is in use or unknown (it stays registered).
  bool Remove(int64_t id);

  // Marks slot `id` free again (a claimed batch that never reached Python).
  void Release(int64_t id);

 private:
  struct Slot {
    int64_t id;
    uint8_t* base;
    int64_t capacity;
  };
  absl::Mutex mu_;
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
};

// One batch's claim on a slot. Destroyed before it reached Python (the
// batch failed to parse, or the pipeline stopped with it buffered), it frees
// the slot; once Handed(), the slot is the training process's to free.
class SlotClaim {
 public:
  // A claim on a free slot of at least `bytes`, or null when none is free.
  static std::shared_ptr<SlotClaim> Make(std::shared_ptr<SlotPool> pool, int64_t bytes);
  ~SlotClaim();
  SlotClaim(const SlotClaim&) = delete;
  SlotClaim& operator=(const SlotClaim&) = delete;

  char* data() const { return data_; }
  void Handed() { handed_.store(true, std::memory_order_release); }

 private:
  SlotClaim(std::shared_ptr<SlotPool> pool, int64_t id, char* data)
      : pool_(std::move(pool)), id_(id), data_(data) {}
  const std::shared_ptr<SlotPool> pool_;
  const int64_t id_;
  char* const data_;
  std::atomic<bool> handed_{false};
};

void BindSlots(pybind11::module_& m);

}  // namespace shardq::python

#endif  // SHARDQ_PYTHON_PY_SLOTS_H_
