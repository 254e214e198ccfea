// `shardq demo`: static sharding vs the shared WorkQueue on a generated text
// data set, with worker threads of unequal speed.
#ifndef SHARDQ_TOOLS_DEMO_H_
#define SHARDQ_TOOLS_DEMO_H_

#include <cstdint>
#include <string>

namespace shardq {

struct DemoOptions {
  int workers = 8;
  int files = 64;
  int64_t lines_per_file = 625;
  // Emulated work per record of a full-speed worker; worker 0 is 4x and
  // worker 1 2x slower.
  double record_micros = 500;
  int64_t slices_per_worker = 10;
  uint64_t seed = 2026;
  std::string data_dir;  // empty: a fresh temporary directory, removed after
};

// Runs both modes, prints the table to stdout; returns the process exit
// code (non-zero when a mode lost or repeated a record).
int RunDemo(const DemoOptions& options);

}  // namespace shardq

#endif  // SHARDQ_TOOLS_DEMO_H_
