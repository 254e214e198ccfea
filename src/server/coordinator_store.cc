// CoordinatorImpl's state store side: opening and recovering a store,
// attaching it to each queue, snapshots, durability waits and checkpoints.
// The calls that hand out and take back work are in coordinator_impl.cc.
#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "src/log/log.h"
#include "src/server/coordinator_impl.h"
#include "src/server/process_memory.h"

namespace shardq {

absl::StatusOr<std::unique_ptr<CoordinatorImpl>> CoordinatorImpl::Create(
    const CoordinatorOptions& options) {
  if (options.state_dir.empty()) {
    return std::make_unique<CoordinatorImpl>(options.clock);
  }
  const absl::Time start = absl::Now();
  RecoveredState recovered;
  absl::StatusOr<std::unique_ptr<Journal>> journal = Journal::Open(options.state_dir, &recovered);
  if (!journal.ok()) return journal.status();
  absl::StatusOr<std::unique_ptr<CoordinatorImpl>> coordinator =
      CreateWithStore(options, *std::move(journal), std::move(recovered),
                      absl::StrCat("state dir '", options.state_dir, "'"));
  if (coordinator.ok()) (*coordinator)->recovery_.took = absl::Now() - start;
  return coordinator;
}

absl::StatusOr<std::unique_ptr<CoordinatorImpl>> CoordinatorImpl::CreateWithStore(
    const CoordinatorOptions& options, std::unique_ptr<StateStore> store,
    RecoveredState recovered, absl::string_view store_name) {
  const absl::Time start = absl::Now();
  Recovery recovery;
  for (const RecoveredState::Queue& q : recovered.queues) {
    ++recovery.queues;
    recovery.updates_replayed += static_cast<int64_t>(q.updates.size());
  }
  std::unique_ptr<CoordinatorImpl> coordinator(new CoordinatorImpl(
      options.clock, std::move(store), std::max<int64_t>(1, options.snapshot_every),
      std::max<int64_t>(1, options.snapshot_bytes_per_update)));
  coordinator->grants_wait_for_store_ = options.grants_wait_for_store;
  if (absl::Status s = coordinator->Recover(std::move(recovered)); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(store_name, ": ", s.message()));
  }
  recovery.took = absl::Now() - start;
  coordinator->recovery_ = recovery;
  return coordinator;
}

absl::Status CoordinatorImpl::Recover(RecoveredState recovered) {
  const absl::Time now = clock_->Now();
  for (RecoveredState::Queue& q : recovered.queues) {
    std::unique_ptr<QueueState> state;
    size_t first_update = 0;
    int64_t snapshot_bytes = 0;
    if (q.snapshot != nullptr) {
      snapshot_bytes = static_cast<int64_t>(q.snapshot->ByteSizeLong());
      absl::StatusOr<std::unique_ptr<QueueState>> s = QueueState::FromSnapshot(*q.snapshot, now);
      if (!s.ok()) return s.status();
      state = *std::move(s);
    } else {
      if (q.updates.empty()) continue;
      absl::StatusOr<std::unique_ptr<QueueState>> s = QueueState::FromCreation(q.updates[0]);
      if (!s.ok()) return s.status();
      state = *std::move(s);
      first_update = 1;
    }
    for (size_t i = first_update; i < q.updates.size(); ++i) {
      if (absl::Status s = state->Apply(q.updates[i]); !s.ok()) return s;
    }
    // Every lease gets a fresh period: live workers keep theirs by
    // heartbeating through the outage; dead workers' leases expire.
    state->ResetDeadlines(now);
    // Grants answered before the crash may be missing from the journal;
    // their ids must not be handed out again.
    state->SkipLeaseIdsAfterRecovery();
    auto entry = std::make_shared<Entry>();
    entry->name = q.name;
    {
      absl::MutexLock lock(&entry->mu);
      entry->state = std::move(state);
      entry->last_seq = recovered.last_seq;
      entry->since_snapshot = static_cast<int64_t>(q.updates.size());
      entry->snapshot_bytes = snapshot_bytes;
      AttachJournal(*entry);
    }
    absl::MutexLock lock(&mu_);
    queues_[q.name] = std::move(entry);
  }
  return absl::OkStatus();
}

void CoordinatorImpl::AttachJournal(Entry& e) {
  // In memory, updates are made only for an observer.
  if (journal_ == nullptr && observer_.load() == nullptr) return;
  Entry* entry = &e;
  // Runs inside QueueState calls, i.e. with e.mu held.
  e.state->set_update_sink([this, entry](const journal::Update& update)
                               ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (journal_ != nullptr) {
      entry->last_seq = journal_->Append(entry->name, update);
      ++entry->since_snapshot;
    }
    if (Observer* o = observer_.load()) o->OnUpdate(entry->name, update);
  });
}

uint64_t CoordinatorImpl::AfterChange(Entry& e) {
  if (journal_ == nullptr) return 0;
  if (!e.snapshot_running && e.since_snapshot >= snapshot_every_ &&
      e.since_snapshot >= e.snapshot_bytes / snapshot_bytes_per_update_) {
    // Only the copy is made under e.mu; SnapshotLoop serialises it.
    SnapshotTask task{&e, e.last_seq, e.state->Clone()};
    e.snapshot_running = true;
    e.since_snapshot = 0;
    absl::MutexLock lock(&snapshot_mu_);
    snapshot_tasks_.push_back(std::move(task));
    snapshot_changed_.SignalAll();
  }
  return e.last_seq;
}

void CoordinatorImpl::SnapshotLoop() {
  while (true) {
    SnapshotTask task;
    {
      absl::MutexLock lock(&snapshot_mu_);
      while (snapshot_tasks_.empty() && !snapshot_stop_) snapshot_changed_.Wait(&snapshot_mu_);
      if (snapshot_tasks_.empty()) return;  // stopping, nothing left
      task = std::move(snapshot_tasks_.front());
      snapshot_tasks_.pop_front();
      snapshot_busy_ = true;
    }
    // Entries live as long as the coordinator, which stops this thread
    // before it destroys them. The snapshot's journal entry comes after
    // updates appended meanwhile; it covers those up to task.seq only.
    // Written in parts: completions wait behind one part at most.
    const int64_t bytes = static_cast<int64_t>(
        journal_->WriteSnapshot(task.entry->name, task.seq, task.state->ToSnapshot()));
    task.state.reset();
    ReleaseFreeMemory();  // what the copy and its serialised form took
    {
      absl::MutexLock lock(&task.entry->mu);
      task.entry->snapshot_bytes = bytes;
      task.entry->snapshot_running = false;
    }
    absl::MutexLock lock(&snapshot_mu_);
    snapshot_busy_ = false;
    snapshot_changed_.SignalAll();
  }
}

void CoordinatorImpl::WaitForSnapshots() {
  absl::MutexLock lock(&snapshot_mu_);
  while (!snapshot_tasks_.empty() || snapshot_busy_) snapshot_changed_.Wait(&snapshot_mu_);
}

void CoordinatorImpl::StopSnapshots() {
  {
    absl::MutexLock lock(&snapshot_mu_);
    snapshot_stop_ = true;
    snapshot_changed_.SignalAll();
  }
  if (snapshot_thread_.joinable()) snapshot_thread_.join();
}

absl::Status CoordinatorImpl::Durable(uint64_t seq) {
  if (journal_ == nullptr || seq == 0) return absl::OkStatus();
  return StoreError(journal_->WaitDurable(seq));
}

std::optional<StoreTotals> CoordinatorImpl::journal_totals() const {
  if (journal_ == nullptr) return std::nullopt;
  return journal_->totals();
}

absl::Status CoordinatorImpl::Writable() const {
  if (journal_ == nullptr) return absl::OkStatus();
  return StoreError(journal_->status());
}

absl::Status CoordinatorImpl::StoreError(const absl::Status& journal_error) {
  if (journal_error.ok()) return journal_error;
  // UNAVAILABLE: clients retry it with backoff, and a restarted coordinator
  // (`shardq serve` stops on this error) recovers what was stored.
  return absl::UnavailableError(absl::StrCat(
      "coordinator cannot store state: ", journal_error.message(),
      "; it accepts no further change"));
}

absl::StatusOr<journal::Checkpoint> CoordinatorImpl::ExportCheckpoint(absl::string_view queue) {
  absl::StatusOr<std::shared_ptr<Entry>> entry = Find(queue);
  if (!entry.ok()) return entry.status();
  absl::MutexLock lock(&(*entry)->mu);
  return (*entry)->state->ToCheckpoint();
}

absl::StatusOr<QueueInfo> CoordinatorImpl::AddedQueueInfo(Entry& e) {
  uint64_t seq;
  QueueInfo info;
  {
    absl::MutexLock lock(&e.mu);
    seq = e.last_seq;
    info = Describe(*e.state, true);
  }
  if (absl::Status s = Durable(seq); !s.ok()) return s;
  return info;
}

absl::StatusOr<QueueInfo> CoordinatorImpl::RestoreCheckpoint(
    const journal::Checkpoint& checkpoint, const std::string& name) {
  absl::StatusOr<journal::Update> update =
      QueueState::RestoreUpdate(checkpoint, name, clock_->Now());
  if (!update.ok()) return update.status();
  if (absl::Status s = Writable(); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<Entry>> added = AddQueue(*update, true);
  if (!added.ok()) return added.status();
  absl::StatusOr<QueueInfo> info = AddedQueueInfo(**added);
  if (!info.ok()) return info.status();
  SHARDQ_LOG_INFO("queue '{}' restored from a checkpoint: {} item(s) per epoch", info->name,
                  info->num_items);
  return info;
}

absl::Status CoordinatorImpl::Flush() {
  if (journal_ == nullptr) return absl::OkStatus();
  WaitForSnapshots();
  return journal_->Flush();
}

}  // namespace shardq
