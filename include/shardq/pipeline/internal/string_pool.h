// StringPool: strings of spent pipeline elements, kept for the reading stage
// to read its next records into, so that a record's bytes usually land in
// memory that is already allocated instead of a fresh malloc (and the free
// of the spent one). Fed by PrefetchStage with what the consumer hands back
// (Iterator::Recycle), drained by ItemSlots a block of records at a time.
//
// Bounded: at most kMaxBytes of string capacity and kMaxStrings strings are
// kept; a string with more capacity than kMaxStringBytes (a huge record) is
// never kept. What does not fit is destroyed by the caller of Give, as if
// there were no pool. Thread-safe; one lock per call, and calls move whole
// blocks of strings.
//
// GiveBlocks keeps a spent batch's rows vector whole (strings kept as
// they are; the capacity of its strings counted by the consumer thread with
// BlockBytes), so that recycling costs the fill thread one move a batch
// rather than a few a string.
//
// Harvest(element, &strings) moves the strings out of an element the pool
// knows (std::string, a Record's value, Batch and PerReplicaBatches of
// them); for any other type it takes nothing.
#ifndef SHARDQ_SRC_PIPELINE_STRING_POOL_H_
#define SHARDQ_SRC_PIPELINE_STRING_POOL_H_

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "shardq/pipeline/element.h"
#include "shardq/text_line_reader.h"  // Record

namespace shardq::pipeline::internal {

class StringPool {
 public:
  static constexpr size_t kMaxStrings = 8192;
  static constexpr size_t kMaxBytes = size_t{4} << 20;
  static constexpr size_t kMaxStringBytes = 64 << 10;

  // Keeps what fits of *strings (as they are: contents and capacity); what
  // is left in *strings is for the caller to destroy. Not cleared: a reader
  // overwrites what a string held, and a string that still holds about a
  // record's bytes is cut or grown by the difference (std::string::resize
  // zero-fills what it grows by, so a cleared string would be zero-filled
  // whole before every record is copied in).
  void Give(std::vector<std::string>* strings) {
    if (strings->empty()) return;
    absl::MutexLock lock(&mu_);
    while (!strings->empty()) {
      std::string& s = strings->back();
      const size_t cap = s.capacity();
      if (cap <= kMaxStringBytes && count_ < kMaxStrings &&
          bytes_ + cap <= kMaxBytes) {
        kept_.push_back(std::move(s));
        bytes_ += cap;
        ++count_;
      } else if (cap <= kMaxStringBytes) {
        return;  // full: the rest is the caller's
      }
      strings->pop_back();  // kept, or too large to keep (freed here)
    }
  }

  // A vector of strings kept whole (a spent batch's rows), without moving
  // its strings one by one: `bytes` is the capacity of its strings, each
  // of which is at most kMaxStringBytes (see BlockBytes).
  struct Block {
    std::vector<std::string> strings;
    size_t bytes = 0;
  };

  // Keeps the blocks of *blocks that fit within the bounds; the rest stay
  // in *blocks for the caller to destroy.
  void GiveBlocks(std::vector<Block>* blocks) {
    if (blocks->empty()) return;
    absl::MutexLock lock(&mu_);
    size_t kept = 0;
    for (size_t i = 0; i < blocks->size(); ++i) {
      Block& block = (*blocks)[i];
      const size_t n = block.strings.size();
      if (n == 0 || count_ + n > kMaxStrings || bytes_ + block.bytes > kMaxBytes) {
        if (kept != i) (*blocks)[kept] = std::move(block);
        ++kept;
        continue;
      }
      count_ += n;
      bytes_ += block.bytes;
      blocks_.push_back(std::move(block.strings));
    }
    blocks->resize(kept);
  }

  // Moves up to `n` kept strings (contents unspecified: overwrite them) to
  // the end of *out.
  void Take(size_t n, std::vector<std::string>* out) {
    absl::MutexLock lock(&mu_);
    while (n > 0 && !kept_.empty()) {
      TakeOne(kept_, out);
      --n;
    }
    while (n > 0 && !blocks_.empty()) {
      std::vector<std::string>& block = blocks_.back();
      while (n > 0 && !block.empty()) {
        TakeOne(block, out);
        --n;
      }
      if (block.empty()) blocks_.pop_back();
    }
  }

  size_t size() const {
    absl::MutexLock lock(&mu_);
    return count_;
  }

 private:
  void TakeOne(std::vector<std::string>& from, std::vector<std::string>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    bytes_ -= from.back().capacity();
    --count_;
    out->push_back(std::move(from.back()));
    from.pop_back();
  }

  mutable absl::Mutex mu_;
  std::vector<std::string> kept_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> blocks_ ABSL_GUARDED_BY(mu_);
  size_t count_ ABSL_GUARDED_BY(mu_) = 0;  // strings in kept_ and blocks_
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;  // their capacity
};

// The capacity of `strings` for StringPool::Block, or nullopt if one of
// them is longer than the pool keeps (the block then goes string by
// string, through Harvest and Give). A read-only pass: the consumer
// thread makes it, so that the fill thread only moves the vector.
inline std::optional<size_t> BlockBytes(const std::vector<std::string>& strings) {
  size_t bytes = 0;
  for (const std::string& s : strings) {
    if (s.capacity() > StringPool::kMaxStringBytes) return std::nullopt;
    bytes += s.capacity();
  }
  return bytes;
}

// Moves the strings of `element` to the end of *out (see the top).
template <typename T>
void Harvest(T&, std::vector<std::string>*) {}
inline void Harvest(std::string& s, std::vector<std::string>* out) {
  // Only strings with memory of their own (not held inline).
  if (s.capacity() > std::string().capacity()) out->push_back(std::move(s));
}
// The value only: that is what the reading stage reads into (a key is
// short, and a pool full of keys would make values grow again).
inline void Harvest(Record& r, std::vector<std::string>* out) {
  Harvest(r.value, out);
}
template <typename R>
void Harvest(Batch<R>& batch, std::vector<std::string>* out) {
  for (R& row : batch.rows) Harvest(row, out);
}
template <typename R>
void Harvest(PerReplicaBatches<R>& step, std::vector<std::string>* out) {
  for (Batch<R>& batch : step.replicas) Harvest(batch, out);
}

}  // namespace shardq::pipeline::internal

#endif  // SHARDQ_SRC_PIPELINE_STRING_POOL_H_
