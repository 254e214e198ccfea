// The elements that flow out of an input pipeline (see dataset.h).
//
// A pipeline is typed by its element: a reading stage yields one element per
// record (shardq::Record for text lines and TFRecord records: key
// "<item>:<offset>", value the payload), Map turns an element into another
// type (a parsed example, a tensor, ...), Batch groups elements into a
// Batch<T>, and Distribute splits each batch into one per replica:
//
//   ReadItems(queue, TextReaderFactory())   Dataset<Record>
//     .Map(Parse)                           Dataset<Example>
//     .Batch(batch_options)                 Dataset<Batch<Example>>
//     .Distribute(distribute_options)       Dataset<PerReplicaBatches<Example>>
//
// Requirements on an element type T: movable and default-constructible
// (padding rows are default-constructed Ts). Copyable only for FromVector.
// These are plain value types: not thread-safe, owned by whoever holds them.
#ifndef SHARDQ_PIPELINE_ELEMENT_H_
#define SHARDQ_PIPELINE_ELEMENT_H_

#include <cstdint>
#include <vector>

namespace shardq::pipeline {

// Rows of a batch, in the order the pipeline produced them. Padding rows
// (added only by Distribute with Remainder::kPad) are default-constructed
// Ts marked in `padded`, so a training step can mask them out (zero loss
// weight) instead of seeing made-up data as real.
template <typename T>
struct Batch {
  std::vector<T> rows;
  // One flag per row, same length as rows: 1 for a padding row, 0 for a
  // real one. Bytes rather than vector<bool> so that it can be handed to
  // numpy / torch as a mask without conversion.
  std::vector<uint8_t> padded;

  int64_t size() const { return static_cast<int64_t>(rows.size()); }
  int64_t num_padded() const {
    int64_t n = 0;
    for (uint8_t p : padded) n += p != 0;
    return n;
  }
  int64_t num_real() const { return size() - num_padded(); }
};

// One step of synchronous training with R replicas: replicas[r] is the
// batch of replica r. Every step has exactly R batches of the same size
// (global batch size / R), so every replica runs the same number of steps.
template <typename T>
struct PerReplicaBatches {
  std::vector<Batch<T>> replicas;

  int64_t num_replicas() const {
    return static_cast<int64_t>(replicas.size());
  }
};

}  // namespace shardq::pipeline

#endif  // SHARDQ_PIPELINE_ELEMENT_H_
