// Fuzz target: a coordinator recovering a queue from a snapshot
// (QueueState::FromSnapshot, src/core/queue_state_snapshot.cc).
//
// A snapshot on disk carries a CRC, so what reaches FromSnapshot is what
// some coordinator wrote; this target asks what a wrong one (a bug in a
// version that wrote it, an edited state dir) does. The input edits a real
// snapshot (a queue of items of every shape, three epochs, leases of two
// workers that were completed, split, failed, released and expired):
// pairs of a 16-bit offset and a byte XORed into its serialised form. An
// input that starts with 0xFF is instead a whole serialised snapshot.
//
// Properties, for every input that parses as a QueueSnapshot:
//  1. FromSnapshot either refuses it with DATA_LOSS (inconsistent) or
//     FAILED_PRECONDITION (a format it does not know), or rebuilds a state.
//  2. A rebuilt state's snapshot is read back into a state whose snapshot
//     is the same (no second recovery changes what the first gave).
//  3. The rebuilt state serves takes, completions and releases without
//     breaking its accounting: completed + pending + leased never exceed
//     the items of the epochs, and a completion never fails but as
//     NOT_FOUND / PERMISSION_DENIED.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/queue_history.h"
#include "google/protobuf/util/message_differencer.h"
#include "proto/shardq/journal.pb.h"
#include "src/core/queue_state.h"

namespace shardq {
namespace {

const absl::Time kT0 = fuzz_history::kT0;

// The serialised snapshot the edits apply to.
std::string BaseSnapshot() {
  std::unique_ptr<QueueState> s = *QueueState::Create(fuzz_history::Config());
  fuzz_history::RunHistory(*s);
  std::string out;
  FUZZ_CHECK(s->ToSnapshot().SerializeToString(&out), "the base snapshot serialises");
  return out;
}

bool Same(const journal::QueueSnapshot& a, const journal::QueueSnapshot& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

void CheckAccounting(const QueueState& s, absl::Time now) {
  const QueueStats st = s.Stats(now);
  FUZZ_CHECK(st.pending >= 0 && st.leased >= 0 && st.completed >= 0,
             absl::StrCat("pending ", st.pending, " leased ", st.leased, " completed ",
                          st.completed));
  FUZZ_CHECK(st.completed + st.failed <= st.num_items * st.num_epochs + st.splits,
             absl::StrCat("completed ", st.completed, " failed ", st.failed, " of ",
                          st.num_items, " x ", st.num_epochs, " + ", st.splits, " splits"));
}

}  // namespace
}  // namespace shardq

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardq;
  static const std::string* base = new std::string(BaseSnapshot());
  std::string bytes;
  if (size > 0 && data[0] == 0xFF) {
    bytes.assign(reinterpret_cast<const char*>(data) + 1, size - 1);
  } else {
    bytes = *base;
    for (size_t i = 0; i + 3 <= size; i += 3) {
      const size_t offset = (data[i] | (size_t{data[i + 1]} << 8)) % bytes.size();
      bytes[offset] = static_cast<char>(bytes[offset] ^ data[i + 2]);
    }
  }
  journal::QueueSnapshot snapshot;
  if (!snapshot.ParseFromString(bytes)) return 0;
  // A plan of millions of items is a valid snapshot, but not a quick one.
  if (snapshot.items().item_work_size() > 10000 || snapshot.config().items_size() > 10000) {
    return 0;
  }

  absl::StatusOr<std::unique_ptr<QueueState>> state = QueueState::FromSnapshot(snapshot, kT0);
  if (!state.ok()) {
    const absl::StatusCode code = state.status().code();
    FUZZ_CHECK(code == absl::StatusCode::kDataLoss ||
                   code == absl::StatusCode::kFailedPrecondition,
               state.status().ToString());
    return 0;
  }
  QueueState& s = **state;
  CheckAccounting(s, kT0);

  const journal::QueueSnapshot again = s.ToSnapshot();
  absl::StatusOr<std::unique_ptr<QueueState>> second = QueueState::FromSnapshot(again, kT0);
  FUZZ_CHECK(second.ok(), absl::StrCat("its own snapshot is refused: ",
                                       second.status().ToString()));
  FUZZ_CHECK(Same((*second)->ToSnapshot(), again), "a second recovery changed the state");

  // Serve it a while: takes by two workers, completions, a release.
  absl::Time now = kT0;
  for (int step = 0; step < 64; ++step) {
    now += absl::Milliseconds(10);
    const char* worker = step % 3 == 0 ? "w2" : "w1";
    absl::StatusOr<TakeResult> r = s.Take(worker, now);
    FUZZ_CHECK(r.ok(), r.status().ToString());
    if (r->outcome != TakeOutcome::kItem) break;
    if (step % 5 == 4) {
      absl::Status released = s.Release(worker, r->item.lease_id, now);
      FUZZ_CHECK(released.ok(), released.ToString());
    } else {
      absl::StatusOr<CompleteOutcome> done = s.Complete(worker, r->item.lease_id, now, 1);
      FUZZ_CHECK(done.ok(), done.status().ToString());
    }
    CheckAccounting(s, now);
  }
  // Completions of lease ids the state never handed out are refused.
  for (uint64_t id : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    absl::StatusOr<CompleteOutcome> bogus = s.Complete("w3", id, now);
    if (!bogus.ok()) {
      const absl::StatusCode code = bogus.status().code();
      FUZZ_CHECK(code == absl::StatusCode::kNotFound ||
                     code == absl::StatusCode::kPermissionDenied,
                 bogus.status().ToString());
    }
  }
  return 0;
}
