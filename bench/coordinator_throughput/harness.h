// bench/coordinator_throughput: what the harness (main.cc) needs from a
// system under test, shared by the drivers in this folder.
#ifndef SHARDQ_BENCH_COORDINATOR_THROUGHPUT_HARNESS_H_
#define SHARDQ_BENCH_COORDINATOR_THROUGHPUT_HARNESS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace shardq::throughput {

// One leased item as the harness sees it.
struct Taken {
  int64_t index = 0;      // position in the item list, for the exactly-once check
  uint64_t lease_id = 0;  // shardq only
  std::string item;       // Redis only (LREM needs the value)
};

// One client's connection. Used by one thread only.
class ClientSession {
 public:
  virtual ~ClientSession() = default;
  // Called once per queue before its first Take, outside the measured
  // time (a session stream is opened here). Default: nothing to do.
  virtual absl::Status Open(const std::string& queue) { return absl::OkStatus(); }
  // Leases the next item(s) of `queue` into `out` (cleared first). An empty
  // `out` means the queue is drained.
  virtual absl::Status Take(const std::string& queue, std::vector<Taken>* out) = 0;
  // Completes one taken item; an error if the server did not count it as the
  // item's first completion. A session may instead send the completion with
  // the next Take (CompletesWithNextTake), which then fails if it was not
  // counted as the first.
  virtual absl::Status Complete(const std::string& queue, const Taken& taken) = 0;
  // True: Complete only records the completion, and the next Take carries
  // it and waits for its answer (so a Take's latency is a completion's too).
  virtual bool CompletesWithNextTake() const { return false; }
};

// A system under test. Thread-safe: Connect is called from every client thread.
class System {
 public:
  virtual ~System() = default;
  // Creates `queue` holding `num_items` items named ItemName(0..num_items-1).
  virtual absl::Status CreateQueue(const std::string& queue, int64_t num_items) = 0;
  virtual absl::StatusOr<std::unique_ptr<ClientSession>> Connect(const std::string& worker) = 0;
  // Checks on the server side that every item of the drained `queue` was
  // completed exactly once and nothing is left; returns what it checked.
  virtual absl::StatusOr<std::string> CheckDrained(const std::string& queue,
                                                   int64_t num_items) = 0;
};

inline std::string ItemName(int64_t index) { return absl::StrFormat("item-%08d", index); }

inline absl::StatusOr<int64_t> ItemIndex(absl::string_view item) {
  int64_t index = 0;
  if (!absl::ConsumePrefix(&item, "item-") || !absl::SimpleAtoi(item, &index)) {
    return absl::InternalError(absl::StrCat("unexpected item '", item, "'"));
  }
  return index;
}

}  // namespace shardq::throughput

#endif  // SHARDQ_BENCH_COORDINATOR_THROUGHPUT_HARNESS_H_
