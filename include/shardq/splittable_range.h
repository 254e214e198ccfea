// The live end of a work item while it is read, shared by the reader and
// the WorkQueue that leased the item, so that the coordinator can split the
// item in flight (tail rebalancing): the holder keeps [start, S) and the
// rest [S, end) goes to an idle worker.
//
// Coverage stays exact because a record belongs to the range in which it
// starts: the reader claims each record's start offset before handing the
// record out, and a split moves the end only past every claimed record.
// A reader stops at the first record whose start is at or after end().
//
// Thread-safe: one reader thread claims while another thread splits.
#ifndef SHARDQ_SPLITTABLE_RANGE_H_
#define SHARDQ_SPLITTABLE_RANGE_H_

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/synchronization/mutex.h"

namespace shardq {

class SplittableRange {
 public:
  // The range [start, end) of an item string's start/end.
  SplittableRange(int64_t start, int64_t end);

  // Called by the reader before it hands out the record that starts at
  // `offset` (offsets only grow). True: the record belongs to this range
  // and no split can take it away any more. False: the range now ends at or
  // before `offset`; the reader must stop (the item is done).
  bool Claim(int64_t offset);

  // Moves the end to max(point, the first offset not yet claimed, start+1)
  // and returns it, unless fewer than `min_residual` units (or none) would
  // be left after it, or no record was claimed yet (a reader that does not
  // claim would read past any split): then nothing changes and the result
  // is empty.
  std::optional<int64_t> Split(int64_t point, int64_t min_residual);

  int64_t start() const { return start_; }
  int64_t end() const { return end_.load(); }

 private:
  const int64_t start_;
  // Claim's fast path reads these without the mutex; a split stores end_
  // and then re-reads claimed_ under mu_, and a Claim that would stop takes
  // mu_ first, so a stop is only ever decided against a settled end_.
  // On a cache line of their own: the reader stores claimed_ for every
  // record, and the line must not bounce between cores with what other
  // threads write next to the range (the shared_ptr's counts, say).
  alignas(64) std::atomic<int64_t> end_;
  std::atomic<int64_t> claimed_;  // one past the last claimed start; -1: none
  char padding_[64 - 2 * sizeof(std::atomic<int64_t>)];
  absl::Mutex mu_;
};

}  // namespace shardq

#endif  // SHARDQ_SPLITTABLE_RANGE_H_
