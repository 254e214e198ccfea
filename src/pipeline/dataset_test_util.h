// Helpers shared by the pipeline stage tests: data files, queues, draining.
#ifndef SHARDQ_SRC_PIPELINE_DATASET_TEST_UTIL_H_
#define SHARDQ_SRC_PIPELINE_DATASET_TEST_UTIL_H_

#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/pipeline/dataset.h"
#include "shardq/work_queue.h"
#include "src/pipeline/test_util.h"

namespace shardq::pipeline::testutil {

// A name no other test in this process uses (embedded queues are shared
// process-wide by name).
// Unique across processes too: test files go to the shared TempDir, and
// two runs of one test binary at once (another worktree's ctest) used to
// write each other's files, which Determinism.* reported as a changed order.
inline std::string UniqueName(const std::string& tag) {
  static std::atomic<int> counter{0};
  return absl::StrCat(tag, "-", ::getpid(), "-", counter++);
}

// Writes `files` text files of `lines` lines each, "<tag> <file> <line>",
// and returns their paths.
inline std::vector<std::string> WriteTextFiles(const std::string& tag,
                                               int files, int lines) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string path =
        absl::StrCat(::testing::TempDir(), "/", tag, "-", f, ".txt");
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    for (int l = 0; l < lines; ++l) out << tag << " " << f << " " << l << "\n";
    paths.push_back(path);
  }
  return paths;
}

// Every line the files hold, as WriteTextFiles wrote them.
inline std::vector<std::string> ExpectedLines(const std::string& tag,
                                              int files, int lines) {
  std::vector<std::string> all;
  for (int f = 0; f < files; ++f) {
    for (int l = 0; l < lines; ++l) all.push_back(absl::StrCat(tag, " ", f, " ", l));
  }
  return all;
}

inline std::unique_ptr<WorkQueue> MakeQueue(std::vector<std::string> works,
                                            int64_t num_slices,
                                            int64_t num_clients,
                                            uint64_t seed = 7,
                                            int64_t num_epochs = 1,
                                            std::string name = "") {
  WorkQueueOptions options;
  options.name = name.empty() ? UniqueName("pipeline") : std::move(name);
  options.works = std::move(works);
  if (num_slices > 0) options.num_slices = num_slices;
  options.num_clients = num_clients;
  options.num_epochs = num_epochs;
  options.seed = seed;
  return ValueOrDie(WorkQueue::Create(options));
}

// Reads `iterator` to its end; fails the test on an error.
template <typename T>
std::vector<T> Drain(Iterator<T>& iterator) {
  std::vector<T> out;
  while (true) {
    absl::StatusOr<T> next = iterator.Next();
    if (absl::IsOutOfRange(next.status())) break;
    EXPECT_TRUE(next.ok()) << next.status();
    if (!next.ok()) break;
    out.push_back(*std::move(next));
  }
  return out;
}

template <typename T>
std::vector<T> DrainDataset(const Dataset<T>& dataset) {
  std::unique_ptr<Iterator<T>> iterator = ValueOrDie(dataset.MakeIterator());
  return Drain(*iterator);
}

// The values of batches of Records, flattened.
inline std::vector<std::string> Values(const std::vector<Batch<Record>>& batches) {
  std::vector<std::string> values;
  for (const Batch<Record>& batch : batches) {
    for (const Record& record : batch.rows) values.push_back(record.value);
  }
  return values;
}

}  // namespace shardq::pipeline::testutil

#endif  // SHARDQ_SRC_PIPELINE_DATASET_TEST_UTIL_H_
