// Fuzz target: a coordinator replaying a queue's journal
// (QueueState::FromCreation, then QueueState::Apply per entry).
//
// Journal entries carry a CRC, so what reaches replay is what some
// coordinator wrote; this target asks what a wrong entry (a bug in the
// version that wrote it) does. The input edits a real journal: the
// creation of the queue of fuzz/queue_history.h and the updates of its
// history. Triples of a 16-bit offset into the entries' serialised
// bytes (laid end to end) and a byte XORed there.
//
// Properties, for every input whose entries all parse:
//  1. FromCreation and every Apply either succeed or fail with DATA_LOSS
//     (an entry that does not fit the state) or INVALID_ARGUMENT /
//     FAILED_PRECONDITION (a creation that is not valid, a format not
//     known); replay stops at the first failure, as recovery does.
//  2. A replayed state's snapshot is read back into the same state.
//  3. The replayed state serves takes and completions with its accounting
//     whole: pending, leased, completed and failed are never negative and
//     together never exceed the items (with the ranges split off).
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

// The serialised journal the edits apply to: its creation first.
std::vector<std::string> BaseJournal() {
  std::vector<journal::Update> updates{
      QueueState::CreationUpdate(fuzz_history::Config(), kT0)};
  std::unique_ptr<QueueState> s = *QueueState::FromCreation(updates[0]);
  s->set_update_sink([&](const journal::Update& u) { updates.push_back(u); });
  fuzz_history::RunHistory(*s);
  s->set_update_sink(nullptr);
  std::vector<std::string> out;
  for (const journal::Update& u : updates) {
    out.emplace_back();
    FUZZ_CHECK(u.SerializeToString(&out.back()), "an update serialises");
  }
  return out;
}

void CheckAccounting(const QueueState& s, absl::Time now) {
  const QueueStats st = s.Stats(now);
  FUZZ_CHECK(st.pending >= 0 && st.leased >= 0 && st.completed >= 0 && st.failed >= 0,
             absl::StrCat("pending ", st.pending, " leased ", st.leased, " completed ",
                          st.completed, " failed ", st.failed));
  FUZZ_CHECK(st.pending + st.leased + st.completed + st.failed <=
                 st.num_items * st.num_epochs + st.splits,
             absl::StrCat(st.pending, " + ", st.leased, " + ", st.completed, " + ", st.failed,
                          " items of ", st.num_items, " x ", st.num_epochs, " + ", st.splits,
                          " splits"));
}

bool Allowed(const absl::Status& s) {
  return s.code() == absl::StatusCode::kDataLoss ||
         s.code() == absl::StatusCode::kInvalidArgument ||
         s.code() == absl::StatusCode::kFailedPrecondition;
}

}  // namespace
}  // namespace shardq

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardq;
  static const std::vector<std::string>* base = new std::vector<std::string>(BaseJournal());
  std::vector<std::string> entries = *base;
  size_t total = 0;
  for (const std::string& e : entries) total += e.size();
  for (size_t i = 0; i + 3 <= size; i += 3) {
    size_t offset = (data[i] | (size_t{data[i + 1]} << 8)) % total;
    for (std::string& e : entries) {
      if (offset < e.size()) {
        e[offset] = static_cast<char>(e[offset] ^ data[i + 2]);
        break;
      }
      offset -= e.size();
    }
  }
  std::vector<journal::Update> updates(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!updates[i].ParseFromString(entries[i])) return 0;
  }
  if (updates[0].create().config().items_size() > 10000 ||
      updates[0].create().items().item_work_size() > 10000) {
    return 0;
  }

  absl::StatusOr<std::unique_ptr<QueueState>> state = QueueState::FromCreation(updates[0]);
  if (!state.ok()) {
    FUZZ_CHECK(Allowed(state.status()), state.status().ToString());
    return 0;
  }
  QueueState& s = **state;
  absl::Time now = kT0;
  for (size_t i = 1; i < updates.size(); ++i) {
    absl::Status applied = s.Apply(updates[i]);
    if (!applied.ok()) {
      FUZZ_CHECK(Allowed(applied), absl::StrCat("entry ", i, ": ", applied.ToString()));
      return 0;  // recovery stops here
    }
  }
  now += absl::Seconds(40);
  CheckAccounting(s, now);

  const journal::QueueSnapshot snapshot = s.ToSnapshot();
  absl::StatusOr<std::unique_ptr<QueueState>> again = QueueState::FromSnapshot(snapshot, now);
  FUZZ_CHECK(again.ok(), absl::StrCat("its own snapshot is refused: ", again.status().ToString()));
  FUZZ_CHECK(google::protobuf::util::MessageDifferencer::Equals((*again)->ToSnapshot(), snapshot),
             "a recovery from its snapshot changed the state");

  for (int step = 0; step < 64; ++step) {
    now += absl::Milliseconds(10);
    const char* worker = step % 3 == 0 ? "w2" : "w1";
    absl::StatusOr<TakeResult> r = s.Take(worker, now);
    FUZZ_CHECK(r.ok() || r.status().code() == absl::StatusCode::kFailedPrecondition,
               r.status().ToString());  // past num_clients, if an edit made it small
    if (!r.ok() || r->outcome != TakeOutcome::kItem) break;
    absl::StatusOr<CompleteOutcome> done = s.Complete(worker, r->item.lease_id, now, 1);
    FUZZ_CHECK(done.ok(), done.status().ToString());
    CheckAccounting(s, now);
  }
  return 0;
}
