// The queue both recovery fuzz targets start from (queue_snapshot_fuzzer.cc,
// journal_replay_fuzzer.cc): items of every shape, three epochs, and a
// history of leases taken by two workers, then completed, split, failed,
// released, reported on, expired and completed late.
#ifndef SHARDQ_FUZZ_QUEUE_HISTORY_H_
#define SHARDQ_FUZZ_QUEUE_HISTORY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "src/core/legacy_format_testing.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace fuzz_history {

inline const absl::Time kT0 = absl::FromUnixSeconds(1000);

inline QueueConfig Config() {
  QueueConfig c;
  c.name = "fuzz";
  c.items = testing_legacy::ItemsOfEveryShape();
  c.num_epochs = 3;
  c.seed = 7;
  c.num_clients = 4;
  c.max_attempts = 2;
  c.lease_timeout = absl::Seconds(30);
  return c;
}

// Runs the history on `s`, a queue of Config() nobody has touched. The
// seed inputs of both targets' corpora (fuzz/corpus/) are edits of what
// it leaves: change it and they no longer show what they were kept for.
inline void RunHistory(QueueState& s) {
  std::vector<WorkItem> held;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<TakeResult> r = s.Take(i % 2 == 0 ? "w1" : "w2", kT0);
    if (r.ok() && r->outcome == TakeOutcome::kItem) held.push_back(r->item);
  }
  FUZZ_CHECK(held.size() == 8, "the base queue hands out 8 items");
  (void)s.Complete("w1", held[0].lease_id, kT0, 10);
  (void)s.AcceptSplit("w2", held[1].lease_id, 500, kT0);
  (void)s.Fail("w1", held[2].lease_id, "bad record", kT0);
  (void)s.Release("w2", held[3].lease_id, kT0);
  (void)s.ReportProgress("w1", held[4].lease_id, 100, kT0);
  // w2's other leases expire; a late completion of one counts.
  (void)s.Take("w1", kT0 + absl::Seconds(31));
  (void)s.Complete("w2", held[5].lease_id, kT0 + absl::Seconds(31));
}

}  // namespace fuzz_history
}  // namespace shardq

#endif  // SHARDQ_FUZZ_QUEUE_HISTORY_H_
