// The pipeline through an installed shardq (shardq::client): the records
// of the README's data set, two epochs (see readme_example_test.cmake), read by
// ReadItems, mapped, batched and prefetched. Prints "pipeline read N lines
// in M batches" (N = 200); exits 1 on an error. Run in the directory holding data/.
#include <cstdint>
#include <iostream>
#include <string>
#include <utility>

#include "shardq/pipeline/dataset.h"
#include "shardq/text_line_reader.h"
#include "shardq/work_queue.h"

int main() {
  shardq::WorkQueueOptions options;
  options.name = "pipeline";
  options.works = {"part-0.txt", "part-1.txt"};
  options.prefix = "data/";
  options.num_epochs = 2;
  options.num_slices = 4;
  options.num_clients = 4;
  auto queue = shardq::WorkQueue::Create(options);
  if (!queue.ok()) {
    std::cerr << queue.status() << "\n";
    return 1;
  }
  shardq::pipeline::BatchOptions batch;
  batch.batch_size = 8;
  auto dataset = shardq::pipeline::ReadItems(queue->get(), shardq::pipeline::TextReaderFactory())
                     .Map([](shardq::Record r) { return std::move(r.value); })
                     .Batch(batch)
                     .Prefetch(2);
  auto it = dataset.MakeIterator();
  if (!it.ok()) {
    std::cerr << it.status() << "\n";
    return 1;
  }
  int64_t lines = 0;
  int64_t batches = 0;
  while (true) {
    auto next = (*it)->Next();
    if (absl::IsOutOfRange(next.status())) break;
    if (!next.ok()) {
      std::cerr << next.status() << "\n";
      return 1;
    }
    lines += static_cast<int64_t>(next->rows.size());
    ++batches;
  }
  std::cout << "pipeline read " << lines << " lines in " << batches << " batches\n";
}
