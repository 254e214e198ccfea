// Equal steps across ranks (shardq.torch / shardq.data equal_steps=True):
// the participants of one pass (every DataLoader worker of every rank)
// agree on how many batches each of them yields, so synchronous
// data-parallel training never waits in an all-reduce for a rank that has
// no batch left. Pure logic: no I/O, no clock, no lock (the coordinator
// holds its own mutex around it).
//
// The protocol, per (queue, key) (key: one pass, e.g. "epoch-3"):
//  * A participant reports its count (batches it has yielded or is about
//    to yield) before yielding each real batch: Report(done = false).
//  * A participant that has no real batch left reports done, with its
//    count. From then on it may only yield padding batches, each granted
//    before it is yielded: Report(count + 1, done = true) is granted when
//    some other participant's count is at least count + 1 (that rank's
//    loop will get that far anyway; the padding keeps this rank's loop in
//    step with it, so the others can go on). Otherwise it is refused and
//    the participant asks again later.
//  * Once all `participants` reported done, the agreed step count is the
//    largest count (frozen from then on); every participant yields padding
//    batches up to it. No count ever exceeds it: a real count is reported
//    before its batch is yielded, and padding is only granted below
//    another participant's count.
// Counts only grow; a participant never stops being done.
//
// Not durable: soft state (not journaled). Every report carries the
// participant's whole state, so after a coordinator restart the next
// reports rebuild it, except for participants that already ended their
// pass after learning an agreement.
#ifndef SHARDQ_CORE_STEP_AGREEMENT_H_
#define SHARDQ_CORE_STEP_AGREEMENT_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "shardq/work_item.h"

namespace shardq {

// Limits on what one queue's agreements may hold (bogus clients).
inline constexpr int64_t kMaxStepParticipants = 65536;
inline constexpr size_t kMaxStepKeys = 1024;  // oldest keys are forgotten
inline constexpr size_t kMaxStepNameBytes = 1024;

// The agreements of one queue. Not thread-safe.
class StepAgreements {
 public:
  explicit StepAgreements(std::string queue) : queue_(std::move(queue)) {}

  // Records `report` (see the protocol above) and returns the tally after
  // it. INVALID_ARGUMENT for an empty or over-long key or participant, a
  // participant count outside [1, kMaxStepParticipants] or different from
  // the one the key was first reported with, a count below the one
  // recorded, or a done participant reporting not done;
  // FAILED_PRECONDITION for a participant beyond the expected number, or a
  // real (not done) count above an agreed step count. A padding count above
  // it (a request that crossed the agreement) is not granted.
  absl::StatusOr<StepTally> Report(const StepReport& report);

  int64_t keys() const { return static_cast<int64_t>(keys_.size()); }

 private:
  struct Participant {
    int64_t count = 0;
    bool done = false;
  };
  struct Agreement {
    int64_t participants = 0;  // expected
    int64_t done = 0;
    int64_t agreed = -1;  // the step count once all are done
    std::map<std::string, Participant, std::less<>> reported;
  };
  StepTally TallyOf(const Agreement& a, bool granted) const;

  const std::string queue_;
  std::map<std::string, Agreement, std::less<>> keys_;
  std::deque<std::string> order_;  // keys, oldest first
};

}  // namespace shardq

#endif  // SHARDQ_CORE_STEP_AGREEMENT_H_
