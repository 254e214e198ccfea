// Test-only: the pipeline the ReadItems tests build over a WorkQueue, by
// configuration, and how they compare what it read (read_items_test.cc,
// read_items_completion_test.cc).
#ifndef SHARDQ_SRC_PIPELINE_READ_ITEMS_TEST_UTIL_H_
#define SHARDQ_SRC_PIPELINE_READ_ITEMS_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "shardq/pipeline/dataset.h"
#include "shardq/pipeline/record_reader.h"
#include "shardq/work_queue.h"

namespace shardq::pipeline::testutil {

// `v` in ascending order (records compared regardless of read order).
inline std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

struct Config {
  std::string label;
  int64_t cycle_length = 0;
  int64_t block_length = 1;
  int64_t parallel_reads = 1;
  int64_t map_threads = 1;
  bool deterministic = true;
  int64_t shuffle = 0;  // buffer size; 0: no shuffle
  int64_t batch = 16;
  int64_t prefetch = 2;
};

inline Dataset<Batch<Record>> MakePipeline(WorkQueue* queue, const Config& c,
                                    uint64_t shuffle_seed = 5) {
  InterleaveOptions read;
  read.cycle_length = c.cycle_length;
  read.block_length = c.block_length;
  read.num_parallel_reads = c.parallel_reads;
  read.deterministic = c.deterministic;
  read.buffer_size = 64;
  MapOptions map;
  map.num_threads = c.map_threads;
  map.deterministic = c.deterministic;
  Dataset<Record> records =
      ReadItems(queue, TextReaderFactory(), read)
          .Map([](Record r) { return r; }, map);
  if (c.shuffle > 0) {
    ShuffleOptions shuffle;
    shuffle.buffer_size = c.shuffle;
    shuffle.seed = shuffle_seed;
    records = records.Shuffle(shuffle);
  }
  BatchOptions batch;
  batch.batch_size = c.batch;
  Dataset<Batch<Record>> batches = records.Batch(batch);
  if (c.prefetch > 0) batches = batches.Prefetch(c.prefetch);
  return batches;
}

}  // namespace shardq::pipeline::testutil

#endif  // SHARDQ_SRC_PIPELINE_READ_ITEMS_TEST_UTIL_H_
