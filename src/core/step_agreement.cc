#include "src/core/step_agreement.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardq {

StepTally StepAgreements::TallyOf(const Agreement& a, bool granted) const {
  StepTally t;
  t.granted = granted;
  t.agreed = a.agreed >= 0;
  t.steps = std::max<int64_t>(a.agreed, 0);
  t.reported = static_cast<int64_t>(a.reported.size());
  t.done = a.done;
  for (const auto& [name, p] : a.reported) t.max_count = std::max(t.max_count, p.count);
  return t;
}

absl::StatusOr<StepTally> StepAgreements::Report(const StepReport& r) {
  const std::string where = absl::StrCat("queue '", queue_, "', steps '", r.key, "'");
  if (r.key.empty() || r.key.size() > kMaxStepNameBytes || r.participant.empty() ||
      r.participant.size() > kMaxStepNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": key and participant must have 1 to ", kMaxStepNameBytes,
        " bytes, got ", r.key.size(), " and ", r.participant.size()));
  }
  if (r.participants < 1 || r.participants > kMaxStepParticipants) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": participants must be 1 to ", kMaxStepParticipants, ", got ",
        r.participants));
  }
  if (r.count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": participant '", r.participant, "' reports count ", r.count));
  }
  auto it = keys_.find(r.key);
  if (it == keys_.end()) {
    if (keys_.size() >= kMaxStepKeys) {
      keys_.erase(order_.front());
      order_.pop_front();
    }
    it = keys_.emplace(r.key, Agreement{}).first;
    it->second.participants = r.participants;
    order_.push_back(r.key);
  }
  Agreement& a = it->second;
  if (a.participants != r.participants) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": participant '", r.participant, "' expects ", r.participants,
        " participants, others ", a.participants,
        " (every rank must run the same number of DataLoader workers)"));
  }
  auto p = a.reported.find(r.participant);
  if (p == a.reported.end()) {
    if (static_cast<int64_t>(a.reported.size()) >= a.participants) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": participant '", r.participant, "' is one more than the ",
          a.participants, " expected (two passes under one key, or a wrong world size?)"));
    }
    p = a.reported.emplace(r.participant, Participant{}).first;
  }
  Participant& me = p->second;
  if (r.count < me.count || (me.done && !r.done)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": participant '", r.participant, "' reports count ", r.count,
        r.done ? " (done)" : " (not done)", " after ", me.count,
        me.done ? " (done)" : " (not done)",
        ": it started the pass over (a restarted participant?), and a "
        "pass's counts only grow. Every participant of a restarted job "
        "needs a pass of its own: under torchrun each restart is one "
        "(TORCHELASTIC_RESTART_COUNT)"));
  }
  if (a.agreed >= 0) {
    // A padding request that crossed the agreement: refused, not an error.
    if (r.count > a.agreed && r.done) return TallyOf(a, /*granted=*/false);
    if (r.count > a.agreed) {
      return absl::FailedPreconditionError(absl::StrCat(
          where, ": participant '", r.participant, "' reports count ", r.count,
          " but the participants agreed on ", a.agreed, " steps"));
    }
    return TallyOf(a, /*granted=*/true);
  }
  bool granted = true;
  if (me.done && r.count > me.count) {
    // Padding: only up to a count another participant has reached.
    int64_t others = 0;
    for (const auto& [name, q] : a.reported) {
      if (name != r.participant) others = std::max(others, q.count);
    }
    granted = r.count <= others;
  }
  if (granted) me.count = r.count;
  if (r.done && !me.done) {
    me.done = true;
    ++a.done;
  }
  if (a.done == a.participants) {
    a.agreed = 0;
    for (const auto& [name, q] : a.reported) a.agreed = std::max(a.agreed, q.count);
  }
  return TallyOf(a, granted);
}

}  // namespace shardq
