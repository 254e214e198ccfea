#include "src/store/etcd_store.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/etcd/etcd_store.pb.h"
#include "src/core/process.h"
#include "src/log/log.h"
#include "src/store/etcd_leader.h"
#include "src/store/etcd_store_keys.h"

namespace shardq {

using etcd_store_keys::Checksum;
using etcd_store_keys::DeleteOp;
using etcd_store_keys::PutOp;
using etcd_store_keys::SeqKey;

std::string EtcdStore::JobPrefix(absl::string_view job) { return EtcdJobPrefix(job); }

EtcdStore::EtcdStore(EtcdStoreOptions options, uint64_t durable_seq)
    : options_(std::move(options)),
      prefix_(JobPrefix(options_.job)),
      next_seq_(durable_seq + 1),
      durable_seq_(durable_seq) {}

void EtcdStore::StartWriters() {
  for (int i = 0; i < options_.commits_in_flight; ++i) {
    writers_.emplace_back([this] {
      NameThisThread("etcd-commit");
      WriterLoop();
    });
  }
}

std::string EtcdStore::Where() const {
  return absl::StrCat(options_.client->Describe(), ", job '", options_.job, "'");
}

EtcdStore::~EtcdStore() {
  Flush().IgnoreError();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& writer : writers_) writer.join();
  std::vector<Callback> left;
  {
    absl::MutexLock lock(&mu_);
    left.swap(callbacks_);
  }
  for (Callback& c : left) {
    c.done(absl::UnavailableError(absl::StrCat(Where(), ": the store was closed")));
  }
}

uint64_t EtcdStore::Append(const std::string& queue, const journal::Update& update) {
  Pending p;
  p.queue = queue;
  update.SerializeToString(&p.payload);
  p.crc = Checksum(p.payload);
  absl::MutexLock lock(&mu_);
  p.seq = next_seq_++;
  p.appended = absl::Now();
  if (!failed_.load()) {
    pending_.push_back(std::move(p));
  }
  return next_seq_ - 1;
}

size_t EtcdStore::AppendSnapshot(const std::string& queue, uint64_t seq,
                                 const journal::QueueSnapshot& snapshot) {
  Pending p;
  p.queue = queue;
  p.snapshot = true;
  p.snapshot_seq = seq;
  snapshot.SerializeToString(&p.payload);
  p.snapshot_bytes = static_cast<int64_t>(p.payload.size());
  p.crc = Checksum(p.payload);
  const size_t bytes = p.payload.size();
  absl::MutexLock lock(&mu_);
  p.seq = next_seq_++;
  p.appended = absl::Now();
  if (!failed_.load()) {
    pending_.push_back(std::move(p));
  }
  return bytes;
}

size_t EtcdStore::WriteSnapshot(const std::string& queue, uint64_t seq,
                                const journal::QueueSnapshot& snapshot) {
  std::string bytes;
  snapshot.SerializeToString(&bytes);
  if (failed_.load()) return bytes.size();
  // The chunks go in transactions of their own, beside the writer's
  // commits; the meta entry that makes them reachable is ordered.
  if (absl::Status s = WriteChunks(queue, seq, bytes); !s.ok()) {
    absl::MutexLock lock(&mu_);
    FailLocked(s);
    return bytes.size();
  }
  Pending p;
  p.queue = queue;
  p.snapshot = true;
  p.chunks_written = true;
  p.snapshot_seq = seq;
  p.snapshot_bytes = static_cast<int64_t>(bytes.size());
  p.crc = Checksum(bytes);
  absl::MutexLock lock(&mu_);
  p.seq = next_seq_++;
  p.appended = absl::Now();
  if (!failed_.load()) {
    pending_.push_back(std::move(p));
  }
  return bytes.size();
}

absl::Status EtcdStore::WaitDurable(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  auto settled = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return durable_seq_.load() >= seq || !error_.ok();
  };
  mu_.Await(absl::Condition(&settled));
  if (durable_seq_.load() >= seq) return absl::OkStatus();
  return error_;
}

void EtcdStore::OnDurable(uint64_t seq, std::function<void(absl::Status)> done) {
  absl::Status now;
  {
    absl::MutexLock lock(&mu_);
    if (durable_seq_.load() < seq) {
      if (error_.ok()) {
        callbacks_.push_back(Callback{seq, std::move(done)});
        return;
      }
      now = error_;
    }
  }
  done(now);
}

absl::Status EtcdStore::Flush() {
  uint64_t target;
  {
    absl::MutexLock lock(&mu_);
    target = next_seq_ - 1;
  }
  return WaitDurable(target);
}

StoreTotals EtcdStore::totals() const {
  absl::MutexLock lock(&mu_);
  return totals_;
}

absl::Status EtcdStore::status() const {
  if (!failed_.load()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return error_;
}

uint64_t EtcdStore::durable_seq() const { return durable_seq_.load(); }

void EtcdStore::FailLocked(absl::Status error) {
  if (!error_.ok()) return;
  error_ = std::move(error);
  failed_.store(true);
  pending_.clear();
  SHARDQ_LOG_ERROR("{}", error_.ToString());
}

bool EtcdStore::WriterMayGoLocked() const {
  if (pending_.empty()) return stopping_;
  if (snapshot_in_flight_) return false;
  // Beside a commit in flight, another goes only when more than one
  // commit's worth waits: smaller ones cost etcd about as much each, and
  // would be acknowledged after the one in flight anyway.
  if (options_.max_gather > absl::ZeroDuration() && !in_flight_.empty()) {
    return FittingEntriesLocked() < pending_.size();
  }
  return true;
}

size_t EtcdStore::FittingEntriesLocked() const {
  // Entries in order while the commit stays within etcd's limits: three
  // operations for the commit mark (or base), one put per queue, five
  // operations per snapshot, one snapshot per queue (a transaction may not
  // put one key twice).
  size_t bytes = 0;
  int ops = 3;
  std::vector<absl::string_view> queues;
  std::vector<absl::string_view> snapshotted;
  size_t n = 0;
  for (; n < pending_.size(); ++n) {
    const Pending& p = pending_[n];
    const bool new_queue = std::find(queues.begin(), queues.end(), p.queue) == queues.end();
    const int more_ops = p.snapshot ? 5 : (new_queue ? 1 : 0);
    const size_t more_bytes =
        p.snapshot || p.payload.size() > kInlineEntryBytes ? 200 : p.payload.size() + 32;
    const bool again = p.snapshot && std::find(snapshotted.begin(), snapshotted.end(),
                                               p.queue) != snapshotted.end();
    if (n > 0 &&
        (again || ops + more_ops > kMaxCommitOps || bytes + more_bytes > kMaxCommitBytes)) {
      break;
    }
    ops += more_ops;
    bytes += more_bytes;
    if (p.snapshot) {
      snapshotted.push_back(p.queue);
    } else if (new_queue) {
      queues.push_back(p.queue);
    }
  }
  return n;
}

std::vector<EtcdStore::Pending> EtcdStore::TakeBatchLocked() {
  const size_t n = FittingEntriesLocked();
  std::vector<Pending> batch;
  batch.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    batch.push_back(std::move(pending_.front()));
    pending_.pop_front();
  }
  return batch;
}

std::vector<EtcdStore::Callback> EtcdStore::FinishLocked(uint64_t last_seq,
                                                         const absl::Status& committed,
                                                         const std::vector<Pending>& batch) {
  for (InFlight& f : in_flight_) {
    if (f.last_seq == last_seq) f.done = true;
  }
  if (committed.ok()) {
    ++totals_.commits;
    for (const Pending& p : batch) {
      ++totals_.entries;
      totals_.bytes += p.snapshot ? p.snapshot_bytes : static_cast<int64_t>(p.payload.size());
      if (p.snapshot) ++totals_.snapshots;
    }
  } else {
    FailLocked(committed);
  }
  // Acknowledged strictly in order, and nothing once a commit failed.
  while (!in_flight_.empty() && in_flight_.front().done) {
    if (error_.ok()) durable_seq_.store(in_flight_.front().last_seq);
    in_flight_.pop_front();
  }
  const uint64_t durable = durable_seq_.load();
  auto covered = std::partition(callbacks_.begin(), callbacks_.end(), [&](const Callback& c) {
    return c.seq > durable && error_.ok();
  });
  std::vector<Callback> ready;
  for (auto it = covered; it != callbacks_.end(); ++it) ready.push_back(std::move(*it));
  callbacks_.erase(covered, callbacks_.end());
  return ready;
}

void EtcdStore::WriterLoop() {
  while (true) {
    std::vector<Pending> batch;
    bool snapshot = false;
    absl::Status refused;  // set when the batch must not be committed
    {
      absl::MutexLock lock(&mu_);
      // Waits on conditions, not a CondVar: an append wakes no writer
      // unless it lets one go (a CondVar woke every free writer for each).
      while (true) {
        if (stopping_ && pending_.empty()) return;
        if (!WriterMayGoLocked()) {
          mu_.Await(absl::Condition(this, &EtcdStore::WriterMayGoLocked));
          continue;
        }
        if (options_.max_gather <= absl::ZeroDuration() || !in_flight_.empty() || stopping_ ||
            pending_.size() >= gather_entries_) {
          break;
        }
        // Gathering: one round of callers' entries, or until the oldest
        // has waited gather_for_.
        const absl::Time until = pending_.front().appended + gather_for_;
        if (absl::Now() >= until) break;
        auto round = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stopping_ || pending_.empty() || snapshot_in_flight_ ||
                 !in_flight_.empty() || pending_.size() >= gather_entries_;
        };
        mu_.AwaitWithDeadline(absl::Condition(&round), until);
      }
      batch = TakeBatchLocked();
      in_flight_.push_back(InFlight{batch.back().seq, false});
      snapshot = std::any_of(batch.begin(), batch.end(),
                             [](const Pending& p) { return p.snapshot; });
      if (snapshot) {
        // A snapshot deletes what it covers and moves the commit base: it
        // goes once every earlier commit is stored, alone.
        snapshot_in_flight_ = true;
        const uint64_t last = batch.back().seq;
        auto first_in_line = [this, last]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return in_flight_.front().last_seq == last || !error_.ok();
        };
        mu_.Await(absl::Condition(&first_in_line));
        refused = error_;
      }
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<int64_t> committed = refused.ok() ? Commit(batch) : refused;
    const absl::Duration took = absl::Now() - start;
    std::vector<Callback> ready;
    absl::Status error;
    {
      absl::MutexLock lock(&mu_);
      if (committed.ok() && !snapshot) {
        gather_entries_ = batch.size() + pending_.size();
        gather_for_ = std::min(options_.max_gather, took * 3 / 2);
      }
      ready = FinishLocked(batch.back().seq, committed.status(), batch);
      if (snapshot) snapshot_in_flight_ = false;
      error = error_;
    }
    const uint64_t durable = durable_seq_.load();
    for (Callback& c : ready) c.done(c.seq <= durable ? absl::OkStatus() : error);
    if (committed.ok() && *committed > 0) {
      // Forget the revisions the snapshot made unnecessary. Best effort.
      absl::Status compacted = options_.client->Compact(*committed);
      if (!compacted.ok() && compacted.code() != absl::StatusCode::kOutOfRange) {
        SHARDQ_LOG_WARN("{}: compaction after a snapshot failed: {}", Where(),
                        compacted.ToString());
      }
    }
  }
}
absl::StatusOr<etcdserverpb::TxnResponse> EtcdStore::GuardedTxn(
    std::vector<etcdserverpb::RequestOp> ops) {
  etcdserverpb::TxnRequest request;
  if (!options_.guard_key.empty()) {
    etcdserverpb::Compare* guard = request.add_compare();
    guard->set_key(options_.guard_key);
    guard->set_target(etcdserverpb::Compare::CREATE);
    guard->set_result(etcdserverpb::Compare::EQUAL);
    guard->set_create_revision(options_.guard_create_revision);
  }
  for (etcdserverpb::RequestOp& op : ops) *request.add_success() = std::move(op);
  const EtcdStoreOptions::SendTxn send = [this](const etcdserverpb::TxnRequest& r) {
    return options_.client->Txn(r);
  };
  const absl::Time give_up = absl::Now() + options_.retry_for;
  while (true) {
    absl::StatusOr<etcdserverpb::TxnResponse> response =
        options_.txn_hook ? options_.txn_hook(request, send) : send(request);
    if (response.ok()) {
      if (!response->succeeded()) {
        lost_leadership_.store(true);
        return absl::FailedPreconditionError(absl::StrCat(
            "not leader: ", Where(), ": the election key '", options_.guard_key,
            "' is no longer this coordinator's (it held the one created at revision ",
            options_.guard_create_revision, "); a deposed leader stores nothing"));
      }
      return response;
    }
    if (response.status().code() != absl::StatusCode::kUnavailable || absl::Now() >= give_up) {
      return absl::Status(response.status().code(),
                          absl::StrCat("job '", options_.job, "': ", response.status().message()));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
}

absl::Status EtcdStore::WriteChunks(const std::string& queue, uint64_t seq,
                                    const std::string& bytes) {
  const std::string hex = absl::BytesToHexString(queue);
  const size_t chunks = std::max<size_t>(1, (bytes.size() + kChunkBytes - 1) / kChunkBytes);
  for (size_t i = 0; i < chunks; ++i) {
    std::vector<etcdserverpb::RequestOp> ops;
    ops.push_back(PutOp(absl::StrFormat("%sc/%s/%s/%06d", prefix_, hex, SeqKey(seq), i),
                        bytes.substr(i * kChunkBytes, kChunkBytes)));
    if (absl::StatusOr<etcdserverpb::TxnResponse> r = GuardedTxn(std::move(ops)); !r.ok()) {
      return r.status();
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> EtcdStore::Commit(std::vector<Pending>& batch) {
  // One journal key per queue: its updates of this commit, keyed by the last.
  struct Group {
    std::string key;
    etcdstore::Batch batch;
  };
  std::vector<std::pair<std::string, Group>> groups;  // by queue, in first-seen order
  std::vector<const Pending*> snapshots;
  // A snapshot taken on the snapshot thread can reach the writer in the
  // same batch as updates it already covers. Those updates are not written:
  // the snapshot holds them, and the transaction deletes the queue's
  // journal keys up to its seq (a put inside that range would be refused by
  // etcd as a duplicate key).
  std::map<std::string, uint64_t> covered_up_to;
  for (const Pending& p : batch) {
    if (!p.snapshot) continue;
    snapshots.push_back(&p);
    uint64_t& covered = covered_up_to[p.queue];
    covered = std::max(covered, p.snapshot_seq);
  }
  auto is_covered = [&](const Pending& p) {
    auto it = covered_up_to.find(p.queue);
    return it != covered_up_to.end() && p.seq <= it->second;
  };
  for (const Pending& p : batch) {
    if (p.snapshot || is_covered(p)) continue;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == p.queue; });
    if (it == groups.end()) {
      groups.emplace_back(p.queue, Group{});
      it = groups.end() - 1;
    }
    it->second.key = absl::StrCat(prefix_, "j/", absl::BytesToHexString(p.queue), "/", SeqKey(p.seq));
  }
  std::vector<etcdserverpb::RequestOp> ops;
  for (const Pending& p : batch) {
    if (p.snapshot || is_covered(p)) continue;
    Group& g = std::find_if(groups.begin(), groups.end(),
                            [&](const auto& x) { return x.first == p.queue; })->second;
    etcdstore::Entry* entry = g.batch.add_entries();
    entry->set_seq(p.seq);
    entry->set_crc32c(p.crc);
    if (p.payload.size() <= kInlineEntryBytes) {
      entry->set_update(p.payload);
      continue;
    }
    // In parts, each in a guarded transaction of its own, before the batch.
    const int e = g.batch.entries_size() - 1;
    const size_t parts = (p.payload.size() + kChunkBytes - 1) / kChunkBytes;
    entry->set_parts(static_cast<int64_t>(parts));
    for (size_t i = 0; i < parts; ++i) {
      std::vector<etcdserverpb::RequestOp> part;
      part.push_back(PutOp(absl::StrFormat("%s.p%04d.%06d", g.key, e, i),
                           p.payload.substr(i * kChunkBytes, kChunkBytes)));
      if (absl::StatusOr<etcdserverpb::TxnResponse> r = GuardedTxn(std::move(part)); !r.ok()) {
        return r.status();
      }
    }
  }
  for (auto& [queue, g] : groups) ops.push_back(PutOp(g.key, g.batch.SerializeAsString()));
  const uint64_t first = batch.front().seq;
  const uint64_t last = batch.back().seq;
  if (snapshots.empty()) {
    etcdstore::CommitMark mark;
    mark.set_last_seq(last);
    ops.push_back(PutOp(absl::StrCat(prefix_, "m/", SeqKey(first)), mark.SerializeAsString()));
  } else {
    // Every earlier commit is stored (WriterLoop): the base moves here and
    // their marks go.
    ops.push_back(PutOp(absl::StrCat(prefix_, "b/", SeqKey(last)), ""));
    ops.push_back(DeleteOp(prefix_ + "b/", absl::StrCat(prefix_, "b/", SeqKey(last))));
    ops.push_back(DeleteOp(prefix_ + "m/", absl::StrCat(prefix_, "m/", SeqKey(last + 1))));
  }
  for (const Pending* p : snapshots) {
    const std::string hex = absl::BytesToHexString(p->queue);
    if (!p->chunks_written) {
      if (absl::Status s = WriteChunks(p->queue, p->snapshot_seq, p->payload); !s.ok()) {
        return s;
      }
    }
    etcdstore::SnapshotMeta meta;
    meta.set_queue(p->queue);
    meta.set_seq(p->snapshot_seq);
    meta.set_chunks(std::max<int64_t>(
        1, (p->snapshot_bytes + static_cast<int64_t>(kChunkBytes) - 1) /
               static_cast<int64_t>(kChunkBytes)));
    meta.set_bytes(p->snapshot_bytes);
    meta.set_crc32c(p->crc);
    ops.push_back(PutOp(absl::StrCat(prefix_, "s/", hex), meta.SerializeAsString()));
    // What the snapshot covers: the queue's journal keys up to its seq and
    // its older snapshots' chunks.
    ops.push_back(DeleteOp(absl::StrCat(prefix_, "j/", hex, "/"),
                           absl::StrCat(prefix_, "j/", hex, "/", SeqKey(p->snapshot_seq + 1))));
    ops.push_back(DeleteOp(absl::StrCat(prefix_, "c/", hex, "/"),
                           absl::StrCat(prefix_, "c/", hex, "/", SeqKey(p->snapshot_seq))));
  }
  absl::StatusOr<etcdserverpb::TxnResponse> r = GuardedTxn(std::move(ops));
  if (!r.ok()) return r.status();
  return snapshots.empty() ? int64_t{0} : r->header().revision();
}

}  // namespace shardq
