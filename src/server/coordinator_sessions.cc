// Worker sessions in CoordinatorImpl (see "Worker sessions" in
// coordinator_impl.h): opening and closing, one request's operations under
// one hold of the queue's mutex, waiting takes served by the wait hub, and
// split proposals pushed to the holder's sessions.
#include <algorithm>
#include <atomic>
#include <map>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/core/validate.h"
#include "src/server/coordinator_impl.h"

namespace shardq {
namespace {

constexpr size_t kMaxLeasesPerOpen = 1 << 16;
// Operations of one request, all kinds together.
constexpr size_t kMaxOpsPerStep = 1 << 16;

template <typename T>
void Forget(std::vector<T>& values, const T& value) {
  auto it = std::find(values.begin(), values.end(), value);
  if (it != values.end()) {
    *it = values.back();
    values.pop_back();
  }
}

// Every operation of `ops` answered with `status`, nothing applied.
void RefuseAll(const SessionOps& ops, const absl::Status& status, SessionResult* out) {
  out->Clear();
  for (const SessionOps::SplitAnswer& a : ops.split_answers) {
    out->splits.push_back({a.lease_id, status, false});
  }
  if (!ops.progress.empty()) out->progress = status;
  for (uint64_t lease : ops.completions) out->completions.push_back({lease, status, false});
  for (const SessionOps::Release& r : ops.releases) {
    out->releases.push_back({r.lease_id, status, false});
  }
  if (ops.take > 0) out->take = status;
}

// The answer once the journal failed to store it: every result is the
// error, and no item is handed out (its grant will never be stored).
void FailStored(const absl::Status& status, SessionResult* out) {
  for (SessionResult::Split& s : out->splits) s.status = status;
  if (!out->progress.ok()) out->progress = status;
  for (SessionResult::Completion& c : out->completions) c.status = status;
  for (SessionResult::Release& r : out->releases) r.status = status;
  out->take = status;
  out->items.clear();
  out->end_of_input = false;
}

}  // namespace

// Times one session step for the observer's latency histograms: from the
// SessionStep call until its answer is final, reported as one take when
// the step asked for items and as one completion per lease it completed
// (the unary Take and Complete are timed the same way, whatever the answer).
struct CoordinatorImpl::StepTiming {
  const std::atomic<Observer*>* observer = nullptr;  // null: not timed
  absl::Time started;
  bool take = false;
  size_t completions = 0;

  StepTiming(const std::atomic<Observer*>& o, const SessionOps& ops) {
    if (o.load() == nullptr || (ops.take <= 0 && ops.completions.empty())) return;
    observer = &o;
    started = absl::Now();
    take = ops.take > 0;
    completions = ops.completions.size();
  }
  void Report() const {
    if (observer == nullptr) return;
    Observer* o = observer->load();
    if (o == nullptr) return;
    const absl::Duration took = absl::Now() - started;
    if (take) o->OnCallDone(Observer::Call::kTake, took);
    for (size_t i = 0; i < completions; ++i) o->OnCallDone(Observer::Call::kComplete, took);
  }
};

struct CoordinatorImpl::PendingStep {
  explicit PendingStep(const StepTiming& t) : timing(t) {}
  std::shared_ptr<SessionSink> sink;
  uint64_t cookie = 0;
  SessionResult* out = nullptr;
  StepTiming timing;
  // Parts still running: a waiting take, a durability wait, and the
  // SessionStep call itself while it sets the others up.
  std::atomic<int> parts{1};
  absl::Mutex mu;
  absl::Status store_error ABSL_GUARDED_BY(mu);

  // Ends one part (with the journal's answer, for a durability wait); true
  // when it was the last, and *out is then final.
  bool EndPart(const absl::Status& stored) {
    if (!stored.ok()) {
      absl::MutexLock lock(&mu);
      if (store_error.ok()) store_error = stored;
    }
    if (parts.fetch_sub(1, std::memory_order_acq_rel) != 1) return false;
    absl::MutexLock lock(&mu);
    if (!store_error.ok()) FailStored(store_error, out);
    return true;
  }
  void EndPartAndNotify(const absl::Status& stored) {
    if (!EndPart(stored)) return;
    timing.Report();
    sink->StepDone(cookie);
  }
};

struct CoordinatorImpl::EntrySessions {
  struct TakeWaiter {
    Session* session = nullptr;  // removed from here before it closes
    std::shared_ptr<PendingStep> step;
    int64_t max_items = 1;
    absl::Time deadline;  // real time
    int64_t ahead = 0;    // SessionOps::take_ahead
  };
  absl::flat_hash_map<std::string, std::vector<Session*>> by_worker;
  std::map<uint64_t, TakeWaiter> waiters;  // by id, i.e. in arrival order
  std::set<std::pair<absl::Time, uint64_t>> deadlines;  // of the waiters
  uint64_t next_waiter = 1;

  void Add(uint64_t id, TakeWaiter waiter) {
    deadlines.emplace(waiter.deadline, id);
    waiters.emplace(id, std::move(waiter));
  }
  // Removes waiter `id` (which must be listed) and returns its step.
  std::shared_ptr<PendingStep> Remove(std::map<uint64_t, TakeWaiter>::iterator it) {
    std::shared_ptr<PendingStep> step = std::move(it->second.step);
    deadlines.erase({it->second.deadline, it->first});
    waiters.erase(it);
    return step;
  }
};

WaitHub* CoordinatorImpl::Hub() {
  absl::MutexLock lock(&hub_mu_);
  if (hub_ == nullptr && !hub_stopped_) {
    hub_ = std::make_unique<WaitHub>(
        [this](void* key) { return ServeWaiters(*static_cast<Entry*>(key)); });
  }
  return hub_.get();
}

void CoordinatorImpl::NotifyChanged(Entry& e, bool may_propose) {
  e.changed.SignalAll();
  if (e.sessions == nullptr || e.sessions->waiters.empty()) return;
  if (!may_propose && !e.state->TakeWouldAnswer()) return;
  if (WaitHub* hub = Hub(); hub != nullptr) hub->Poke(&e);
}

void CoordinatorImpl::CollectSplitPush(Entry& e, uint64_t lease_id, SplitPushes* pushes) {
  if (e.sessions == nullptr) return;
  const std::string* holder = e.state->HolderOf(lease_id);
  if (holder == nullptr) return;
  auto sessions = e.sessions->by_worker.find(*holder);
  if (sessions == e.sessions->by_worker.end()) return;
  std::optional<SplitProposal> proposal = e.state->ProposalFor(lease_id);
  if (!proposal.has_value()) return;
  for (Session* session : sessions->second) {
    if (std::find(session->pushed_.begin(), session->pushed_.end(), lease_id) ==
        session->pushed_.end()) {
      session->pushed_.push_back(lease_id);
    }
    pushes->emplace_back(session->sink_, *proposal);
  }
}

void CoordinatorImpl::DeliverPushes(SplitPushes& pushes) {
  for (auto& [sink, proposal] : pushes) sink->PushSplit(proposal);
}

void CoordinatorImpl::AppendProposals(Entry& e, Session& session, SessionResult* out) {
  std::vector<uint64_t>& pushed = session.pushed_;
  for (size_t i = 0; i < pushed.size();) {
    std::optional<SplitProposal> proposal = e.state->ProposalFor(pushed[i]);
    if (!proposal.has_value()) {  // answered, or the lease ended
      pushed[i] = pushed.back();
      pushed.pop_back();
      continue;
    }
    out->proposals.push_back(*proposal);
    ++i;
  }
}

absl::StatusOr<std::shared_ptr<CoordinatorImpl::Session>> CoordinatorImpl::OpenSession(
    absl::string_view queue, absl::string_view worker, const std::vector<uint64_t>& lease_ids,
    std::shared_ptr<SessionSink> sink, SessionOpening* opening, bool reopen) {
  if (absl::Status s = ValidateName("queue name", queue); !s.ok()) return s;
  if (absl::Status s = ValidateName("worker name", worker); !s.ok()) return s;
  if (lease_ids.size() > kMaxLeasesPerOpen) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session of worker '", worker, "' with queue '", queue, "' names ", lease_ids.size(),
        " leases; the limit is ", kMaxLeasesPerOpen));
  }
  if (shutting_down_.load()) {
    return absl::UnavailableError("the coordinator is shutting down");
  }
  if (absl::Status s = Writable(); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  Entry& e = **entry;
  auto session = std::make_shared<Session>();
  session->entry_ = *entry;
  session->worker_ = std::string(worker);
  absl::MutexLock lock(&e.mu);
  const absl::Time now = clock_->Now();
  // Leases whose worker was gone for a lease timeout end first: they are
  // the ones a re-open reports lost. (Written behind, like a take's.)
  ExpireLeases(e, now);
  if (reopen) {
    // Grants whose answers were lost with the broken stream: the worker
    // does not know them, so they would stay held for ever.
    const absl::flat_hash_set<uint64_t> known(lease_ids.begin(), lease_ids.end());
    bool released = false;
    for (uint64_t id : e.state->LeasesHeldBy(worker)) {
      if (known.contains(id)) continue;
      released |= e.state->Release(worker, id, now).ok();
    }
    if (released) NotifyChanged(e);
  }
  e.state->OpenSession(worker);
  HeartbeatReply held = e.state->Heartbeat(worker, lease_ids, now);
  opening->queue = Describe(*e.state, false);
  opening->lost_lease_ids = std::move(held.lost);
  for (const SplitProposal& p : held.splits) session->pushed_.push_back(p.lease_id);
  opening->proposals = std::move(held.splits);
  if (e.sessions == nullptr) e.sessions = std::make_shared<EntrySessions>();
  e.sessions->by_worker[session->worker_].push_back(session.get());
  session->sink_ = std::move(sink);
  AfterChange(e);
  return session;
}

bool CoordinatorImpl::TakeLocked(Entry& e, const std::string& worker, int64_t max_items,
                                 int64_t ahead,
                                 absl::Time now, SessionResult* out, SplitPushes* pushes) {
  ExpireLeases(e, now);
  while (static_cast<int64_t>(out->items.size()) < max_items) {
    // Only the first item may fail on the num_clients limit; once there
    // are some, the limit just ends the batch.
    absl::StatusOr<TakeResult> r = e.state->Take(worker, now, ahead);
    if (!r.ok()) {
      if (out->items.empty()) out->take = r.status();
      return false;
    }
    if (r->outcome == TakeOutcome::kItem) {
      out->items.push_back(std::move(r->item));
      if (journal_ != nullptr) e.grants_behind.push_back(e.last_seq);
      continue;
    }
    if (r->proposed_lease != 0) {
      e.changed.SignalAll();  // a held unary heartbeat of the holder
      CollectSplitPush(e, r->proposed_lease, pushes);
    }
    if (!out->items.empty()) return false;
    if (r->outcome == TakeOutcome::kEndOfInput) {
      out->end_of_input = true;
      return false;
    }
    return true;
  }
  return false;
}

bool CoordinatorImpl::SessionStep(Session& session, const SessionOps& ops, SessionResult* out,
                                  uint64_t cookie) {
  const StepTiming timing(observer_, ops);
  const bool final_now = SessionStepTimed(session, ops, out, cookie, timing);
  if (final_now) timing.Report();
  return final_now;
}

bool CoordinatorImpl::SessionStepTimed(Session& session, const SessionOps& ops,
                                       SessionResult* out, uint64_t cookie,
                                       const StepTiming& timing) {
  out->Clear();
  const size_t op_count = ops.split_answers.size() + ops.progress.size() +
                          ops.completions.size() + ops.releases.size();
  if (op_count > kMaxOpsPerStep) {
    RefuseAll(ops, absl::InvalidArgumentError(absl::StrCat(
                       "a session request carries ", op_count,
                       " operations; the limit is ", kMaxOpsPerStep)),
              out);
    return true;
  }
  if (absl::Status s = Writable(); !s.ok()) {
    RefuseAll(ops, s, out);
    return true;
  }
  Entry& e = *session.entry_;
  const std::string& worker = session.worker_;
  SplitPushes pushes;
  std::shared_ptr<PendingStep> pending;
  uint64_t wait_seq = 0;
  {
    absl::MutexLock lock(&e.mu);
    if (session.sink_ == nullptr) {
      RefuseAll(ops, absl::FailedPreconditionError("the session is closed"), out);
      return true;
    }
    const absl::Time now = clock_->Now();
    bool stored = false;  // journaled a change its answer must wait for
    for (const SessionOps::SplitAnswer& a : ops.split_answers) {
      absl::StatusOr<bool> accepted = e.state->AcceptSplit(worker, a.lease_id, a.split_point, now);
      out->splits.push_back({a.lease_id, accepted.status(), accepted.ok() && *accepted});
      if (accepted.ok()) {
        // A refusal too: a waiting take may propose another split.
        NotifyChanged(e, /*may_propose=*/!*accepted);
        stored = stored || *accepted;
      }
    }
    for (const auto& [lease, offset] : ops.progress) {
      absl::Status s = e.state->ReportProgress(worker, lease, offset, now);
      if (out->progress.ok()) out->progress = s;
    }
    for (size_t i = 0; i < ops.completions.size(); ++i) {
      const uint64_t lease = ops.completions[i];
      const int64_t records =
          i < ops.completion_records.size() ? ops.completion_records[i] : 0;
      absl::StatusOr<CompleteOutcome> outcome = CompleteLocked(e, worker, lease, records);
      out->completions.push_back(
          {lease, outcome.status(), outcome.ok() && *outcome == CompleteOutcome::kDuplicate});
      stored = stored || outcome.ok();
    }
    for (const SessionOps::Release& r : ops.releases) {
      absl::Status status;
      bool item_failed = false;
      if (r.failed) {
        absl::StatusOr<bool> failed = e.state->Fail(worker, r.lease_id, r.reason, now);
        status = failed.status();
        item_failed = failed.ok() && *failed;
      } else {
        status = e.state->Release(worker, r.lease_id, now);
      }
      out->releases.push_back({r.lease_id, status, item_failed});
      if (status.ok()) NotifyChanged(e);
      stored = stored || status.ok();
    }
    bool wait = false;
    if (ops.take > kMaxItemsPerTake) {
      out->take = absl::InvalidArgumentError(absl::StrCat(
          "take from queue '", e.name, "': at most ", kMaxItemsPerTake,
          " items at once, asked for ", ops.take));
    } else if (ops.take > 0) {
      wait = TakeLocked(e, worker, ops.take, ops.take_ahead, now, out, &pushes);
    }
    WaitHub* hub = wait && ops.take_wait > absl::ZeroDuration() && !shutting_down_.load()
                       ? Hub()
                       : nullptr;
    if (hub != nullptr) {
      pending = std::make_shared<PendingStep>(timing);
      pending->sink = session.sink_;
      pending->cookie = cookie;
      pending->out = out;
      pending->parts.fetch_add(1);  // the take: ended by the hub, or a cancel
      if (e.sessions == nullptr) e.sessions = std::make_shared<EntrySessions>();
      const uint64_t id = e.sessions->next_waiter++;
      const absl::Time deadline = absl::Now() + ops.take_wait;
      e.sessions->Add(id, EntrySessions::TakeWaiter{&session, pending, ops.take, deadline,
                                                    ops.take_ahead});
      session.waiting_.push_back(id);
      hub->WakeBy(&e, std::min(deadline, absl::Now() + kMaxWaitSlice));
    }
    AppendProposals(e, session, out);
    const uint64_t seq = AfterChange(e);
    if (journal_ != nullptr) {
      // Grants are written behind (see the header); everything else, an
      // end of input and an error are answered once durable.
      const bool take_needs_disk =
          ops.take > 0 && (out->end_of_input || !out->take.ok() ||
                           (!out->items.empty() && TooManyGrantsBehind(e)));
      if (stored || take_needs_disk) wait_seq = seq;
    }
    if (wait_seq != 0 && pending == nullptr) {
      pending = std::make_shared<PendingStep>(timing);
      pending->sink = session.sink_;
      pending->cookie = cookie;
      pending->out = out;
    }
  }
  DeliverPushes(pushes);
  if (pending == nullptr) return true;
  if (wait_seq != 0) {
    pending->parts.fetch_add(1);
    journal_->OnDurable(wait_seq, [pending](absl::Status stored) {
      pending->EndPartAndNotify(StoreError(stored));
    });
  }
  // This call's own part: when it is the last, the answer is final now.
  return pending->EndPart(absl::OkStatus());
}

absl::Time CoordinatorImpl::ServeWaiters(Entry& e) {
  std::vector<std::shared_ptr<PendingStep>> answered;
  std::vector<std::shared_ptr<PendingStep>> to_store;
  SplitPushes pushes;
  uint64_t seq = 0;
  absl::Time next = absl::InfiniteFuture();
  {
    absl::MutexLock lock(&e.mu);
    if (e.sessions == nullptr || e.sessions->waiters.empty()) return next;
    EntrySessions& sessions = *e.sessions;
    const absl::Time now = clock_->Now();
    const absl::Time real_now = absl::Now();
    const bool shutting_down = shutting_down_.load();
    // Answers waiter `it` (its take is final) and removes it.
    auto answer = [&](std::map<uint64_t, EntrySessions::TakeWaiter>::iterator it)
                      ABSL_NO_THREAD_SAFETY_ANALYSIS {
      const SessionResult& out = *it->second.step->out;
      const bool needs_disk =
          journal_ != nullptr && (out.end_of_input || !out.take.ok() ||
                                  (!out.items.empty() && TooManyGrantsBehind(e)));
      Forget(it->second.session->waiting_, it->first);
      (needs_disk ? to_store : answered).push_back(sessions.Remove(it));
    };
    // In arrival order, until one has to wait (then so do the later ones).
    while (!sessions.waiters.empty() && !shutting_down) {
      auto it = sessions.waiters.begin();
      EntrySessions::TakeWaiter& w = it->second;
      if (TakeLocked(e, w.session->worker_, w.max_items, w.ahead, now, w.step->out, &pushes)) {
        break;
      }
      answer(it);
    }
    // Those whose wait is over (all of them when shutting down) get what
    // they have: nothing, OK.
    while (!sessions.deadlines.empty() &&
           (shutting_down || sessions.deadlines.begin()->first <= real_now)) {
      answer(sessions.waiters.find(sessions.deadlines.begin()->second));
    }
    seq = AfterChange(e);
    if (!sessions.waiters.empty()) {
      // The next wait to end, or the next lease deadline (an expiry may
      // free an item), checked at least every kMaxWaitSlice.
      const absl::Duration to_expiry = e.state->NextDeadline() - now;
      next = std::min(sessions.deadlines.begin()->first,
                      real_now + std::clamp(to_expiry, absl::Milliseconds(1), kMaxWaitSlice));
    }
  }
  DeliverPushes(pushes);
  for (const std::shared_ptr<PendingStep>& step : answered) step->EndPartAndNotify(absl::OkStatus());
  for (std::shared_ptr<PendingStep>& step : to_store) {
    journal_->OnDurable(seq, [step = std::move(step)](absl::Status stored) {
      step->EndPartAndNotify(StoreError(stored));
    });
  }
  return next;
}

void CoordinatorImpl::CancelSessionTakes(Session& session) {
  Entry& e = *session.entry_;
  std::vector<std::shared_ptr<PendingStep>> cancelled;
  {
    absl::MutexLock lock(&e.mu);
    if (e.sessions == nullptr) return;
    for (uint64_t id : session.waiting_) {
      auto it = e.sessions->waiters.find(id);
      if (it != e.sessions->waiters.end()) cancelled.push_back(e.sessions->Remove(it));
    }
    session.waiting_.clear();
  }
  for (const std::shared_ptr<PendingStep>& step : cancelled) {
    step->EndPartAndNotify(absl::OkStatus());
  }
}

void CoordinatorImpl::CloseSession(Session& session) {
  CancelSessionTakes(session);
  Entry& e = *session.entry_;
  std::shared_ptr<SessionSink> sink;
  {
    absl::MutexLock lock(&e.mu);
    if (session.sink_ == nullptr) return;
    sink = std::move(session.sink_);
    session.sink_ = nullptr;
    session.pushed_.clear();
    auto it = e.sessions->by_worker.find(session.worker_);
    if (it != e.sessions->by_worker.end()) {
      Forget(it->second, static_cast<Session*>(&session));
      if (it->second.empty()) e.sessions->by_worker.erase(it);
    }
    e.state->CloseSession(session.worker_, clock_->Now());
  }
  // `sink` (perhaps the transport's last reference) goes unlocked.
}

int64_t CoordinatorImpl::SessionsOpen(absl::string_view queue, absl::string_view worker) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return 0;
  absl::MutexLock lock(&(*entry)->mu);
  return (*entry)->state->SessionsOpen(worker);
}

void CoordinatorImpl::ShutdownSessions() {
  std::vector<std::shared_ptr<Entry>> entries;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, entry] : queues_) entries.push_back(entry);
  }
  std::vector<std::shared_ptr<PendingStep>> cancelled;
  std::vector<std::shared_ptr<SessionSink>> sinks;
  for (const std::shared_ptr<Entry>& entry : entries) {
    absl::MutexLock lock(&entry->mu);
    if (entry->sessions == nullptr) continue;
    for (auto& [id, waiter] : entry->sessions->waiters) {
      Forget(waiter.session->waiting_, id);
      cancelled.push_back(std::move(waiter.step));
    }
    entry->sessions->waiters.clear();
    entry->sessions->deadlines.clear();
    for (const auto& [worker, sessions] : entry->sessions->by_worker) {
      for (Session* session : sessions) sinks.push_back(session->sink_);
    }
  }
  for (const std::shared_ptr<PendingStep>& step : cancelled) {
    step->EndPartAndNotify(absl::OkStatus());
  }
  for (const std::shared_ptr<SessionSink>& sink : sinks) sink->CoordinatorShuttingDown();
}

}  // namespace shardq
