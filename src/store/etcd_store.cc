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
#include "src/io/crc32c.h"
#include "src/log/log.h"
#include "src/store/etcd_leader.h"

namespace shardq {
namespace {

std::string SeqKey(uint64_t seq) { return absl::StrFormat("%020u", seq); }

uint32_t Checksum(absl::string_view bytes) { return MaskCrc(Crc32c(bytes)); }

etcdserverpb::RequestOp PutOp(std::string key, std::string value) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(std::move(key));
  op.mutable_request_put()->set_value(std::move(value));
  return op;
}

etcdserverpb::RequestOp DeleteOp(std::string key, std::string end) {
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(std::move(key));
  op.mutable_request_delete_range()->set_range_end(std::move(end));
  return op;
}

// Reads every key in [start, end) at `revision` (0: the current one, which
// is then returned through `revision`), a page at a time.
absl::Status ReadRange(EtcdClient& client, const std::string& start, const std::string& end,
                       int64_t* revision,
                       const std::function<absl::Status(const etcdserverpb::KeyValue&)>& each) {
  std::string from = start;
  while (true) {
    etcdserverpb::RangeRequest request;
    request.set_key(from);
    request.set_range_end(end);
    request.set_limit(256);
    request.set_revision(*revision);
    absl::StatusOr<etcdserverpb::RangeResponse> page = client.Range(request);
    if (!page.ok()) return page.status();
    if (*revision == 0) *revision = page->header().revision();
    for (const etcdserverpb::KeyValue& kv : page->kvs()) {
      if (absl::Status s = each(kv); !s.ok()) return s;
    }
    if (!page->more() || page->kvs_size() == 0) return absl::OkStatus();
    from = page->kvs(page->kvs_size() - 1).key();
    from.push_back('\0');
  }
}

}  // namespace

std::string EtcdStore::JobPrefix(absl::string_view job) { return EtcdJobPrefix(job); }

EtcdStore::EtcdStore(EtcdStoreOptions options, uint64_t last_seq)
    : options_(std::move(options)),
      prefix_(JobPrefix(options_.job)),
      next_seq_(last_seq + 1),
      durable_seq_(last_seq) {
  writer_ = std::thread([this] { WriterLoop(); });
}

std::string EtcdStore::Where() const {
  return absl::StrCat(options_.client->Describe(), ", job '", options_.job, "'");
}

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(const EtcdStoreOptions& options,
                                                           RecoveredState* recovered) {
  if (options.client == nullptr) return absl::InvalidArgumentError("etcd store: no client");
  if (!ValidEtcdJobName(options.job)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd store: job name '", options.job,
        "' must be 1-200 printable characters without '/' or spaces"));
  }
  EtcdClient& client = *options.client;
  const std::string prefix = JobPrefix(options.job);
  const std::string where = absl::StrCat(client.Describe(), ", job '", options.job, "'");
  auto data_loss = [&](const std::string& key, absl::string_view why) {
    return absl::DataLossError(absl::StrCat(where, ": key '", key, "' ", why));
  };
  struct QueueRead {
    std::unique_ptr<journal::QueueSnapshot> snapshot;
    uint64_t snapshot_seq = 0;
    uint64_t first_seq = UINT64_MAX;
    std::vector<journal::Update> updates;
  };
  std::map<std::string, QueueRead> queues;  // by hex name
  uint64_t last_seq = 0;
  int64_t revision = 0;  // every read at the first read's revision

  // Snapshots.
  std::vector<std::pair<std::string, etcdstore::SnapshotMeta>> metas;
  absl::Status s = ReadRange(
      client, prefix + "s/", EtcdPrefixEnd(prefix + "s/"), &revision,
      [&](const etcdserverpb::KeyValue& kv) {
        etcdstore::SnapshotMeta meta;
        if (!meta.ParseFromString(kv.value())) return data_loss(kv.key(), "does not parse");
        metas.emplace_back(kv.key().substr(prefix.size() + 2), std::move(meta));
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  for (auto& [hex, meta] : metas) {
    const std::string chunk_prefix = absl::StrCat(prefix, "c/", hex, "/", SeqKey(meta.seq()), "/");
    std::string bytes;
    int64_t chunks = 0;
    s = ReadRange(client, chunk_prefix, EtcdPrefixEnd(chunk_prefix), &revision,
                  [&](const etcdserverpb::KeyValue& kv) {
                    ++chunks;
                    bytes.append(kv.value());
                    return absl::OkStatus();
                  });
    if (!s.ok()) return s;
    const std::string meta_key = absl::StrCat(prefix, "s/", hex);
    if (chunks != meta.chunks() || static_cast<int64_t>(bytes.size()) != meta.bytes() ||
        Checksum(bytes) != meta.crc32c()) {
      return data_loss(meta_key, absl::StrCat("names a snapshot of queue '", meta.queue(),
                                              "' at ", meta.seq(), " of ", meta.chunks(),
                                              " chunk(s), ", meta.bytes(), " bytes; found ",
                                              chunks, " chunk(s), ", bytes.size(),
                                              " bytes (or a bad checksum)"));
    }
    QueueRead& q = queues[hex];
    q.snapshot = std::make_unique<journal::QueueSnapshot>();
    if (!q.snapshot->ParseFromString(bytes)) {
      return data_loss(meta_key, absl::StrCat("snapshot of queue '", meta.queue(), "' does not parse"));
    }
    q.snapshot_seq = meta.seq();
    q.first_seq = meta.seq();
    last_seq = std::max<uint64_t>(last_seq, meta.seq());
  }

  // Journal batches; a batch's parts follow it in key order.
  std::vector<std::pair<std::string, etcdstore::Batch>> batches;
  std::map<std::string, std::string> parts;
  s = ReadRange(client, prefix + "j/", EtcdPrefixEnd(prefix + "j/"), &revision,
                [&](const etcdserverpb::KeyValue& kv) {
                  if (absl::StrContains(kv.key(), ".p")) {
                    parts[kv.key()] = kv.value();
                    return absl::OkStatus();
                  }
                  etcdstore::Batch batch;
                  if (!batch.ParseFromString(kv.value())) {
                    return data_loss(kv.key(), "does not parse");
                  }
                  batches.emplace_back(kv.key(), std::move(batch));
                  return absl::OkStatus();
                });
  if (!s.ok()) return s;
  for (const auto& [key, batch] : batches) {
    const std::string rest = key.substr(prefix.size() + 2);
    const std::string hex = rest.substr(0, rest.find('/'));
    QueueRead& q = queues[hex];
    for (int e = 0; e < batch.entries_size(); ++e) {
      const etcdstore::Entry& entry = batch.entries(e);
      last_seq = std::max<uint64_t>(last_seq, entry.seq());
      if (q.snapshot != nullptr && entry.seq() <= q.snapshot_seq) continue;
      std::string bytes = entry.update();
      for (int64_t i = 0; i < entry.parts(); ++i) {
        auto it = parts.find(absl::StrFormat("%s.p%04d.%06d", key, e, i));
        if (it == parts.end()) return data_loss(key, absl::StrCat("misses part ", i, " of entry ", entry.seq()));
        bytes.append(it->second);
      }
      journal::Update update;
      if (Checksum(bytes) != entry.crc32c() || !update.ParseFromString(bytes)) {
        return data_loss(key, absl::StrCat("entry ", entry.seq(), " fails its checksum or does not parse"));
      }
      q.first_seq = std::min<uint64_t>(q.first_seq, entry.seq());
      q.updates.push_back(std::move(update));
    }
  }

  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [hex, q] : queues) order.emplace_back(q.first_seq, hex);
  std::sort(order.begin(), order.end());
  for (const auto& [first, hex] : order) {
    QueueRead& q = queues[hex];
    RecoveredState::Queue out;
    out.name = absl::HexStringToBytes(hex);
    out.snapshot = std::move(q.snapshot);
    out.snapshot_seq = q.snapshot_seq;
    out.updates = std::move(q.updates);
    recovered->queues.push_back(std::move(out));
  }
  recovered->last_seq = last_seq;
  return std::unique_ptr<EtcdStore>(new EtcdStore(options, last_seq));
}

EtcdStore::~EtcdStore() {
  Flush().IgnoreError();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  writer_.join();
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
  if (!failed_.load()) {
    pending_.push_back(std::move(p));
    changed_.SignalAll();
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
  if (!failed_.load()) {
    pending_.push_back(std::move(p));
    changed_.SignalAll();
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
  if (!failed_.load()) {
    pending_.push_back(std::move(p));
    changed_.SignalAll();
  }
  return bytes.size();
}

absl::Status EtcdStore::WaitDurable(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  while (durable_seq_.load() < seq && error_.ok()) changed_.Wait(&mu_);
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
  changed_.SignalAll();
  SHARDQ_LOG_ERROR("{}", error_.ToString());
}

void EtcdStore::WriterLoop() {
  while (true) {
    std::vector<Pending> batch;
    {
      absl::MutexLock lock(&mu_);
      while (pending_.empty() && !stopping_) changed_.Wait(&mu_);
      if (pending_.empty()) return;
      // Take entries in order while the commit stays within etcd's limits:
      // one put per queue, five operations per snapshot, one snapshot per
      // queue (a transaction may not put one key twice).
      size_t bytes = 0;
      int ops = 0;
      std::vector<std::string> queues;
      std::vector<std::string> snapshotted;
      while (!pending_.empty()) {
        const Pending& p = pending_.front();
        const bool new_queue = std::find(queues.begin(), queues.end(), p.queue) == queues.end();
        const int more_ops = p.snapshot ? 5 : (new_queue ? 1 : 0);
        const size_t more_bytes =
            p.snapshot || p.payload.size() > kInlineEntryBytes ? 200 : p.payload.size() + 32;
        const bool again = p.snapshot && std::find(snapshotted.begin(), snapshotted.end(),
                                                   p.queue) != snapshotted.end();
        if (!batch.empty() &&
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
        batch.push_back(std::move(pending_.front()));
        pending_.pop_front();
      }
    }
    absl::Status committed = Commit(batch);
    std::vector<Callback> ready;
    {
      absl::MutexLock lock(&mu_);
      if (committed.ok()) {
        ++totals_.commits;
        for (const Pending& p : batch) {
          ++totals_.entries;
          totals_.bytes += p.snapshot ? p.snapshot_bytes : static_cast<int64_t>(p.payload.size());
          if (p.snapshot) ++totals_.snapshots;
        }
        durable_seq_.store(batch.back().seq);
      } else {
        FailLocked(committed);
      }
      const uint64_t durable = durable_seq_.load();
      auto covered = std::partition(callbacks_.begin(), callbacks_.end(), [&](const Callback& c) {
        return c.seq > durable && error_.ok();
      });
      for (auto it = covered; it != callbacks_.end(); ++it) ready.push_back(std::move(*it));
      callbacks_.erase(covered, callbacks_.end());
      changed_.SignalAll();
    }
    const uint64_t durable = durable_seq_.load();
    for (Callback& c : ready) c.done(c.seq <= durable ? absl::OkStatus() : committed);
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
  const absl::Time give_up = absl::Now() + options_.retry_for;
  while (true) {
    absl::StatusOr<etcdserverpb::TxnResponse> response = options_.client->Txn(request);
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

absl::Status EtcdStore::Commit(std::vector<Pending>& batch) {
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
  for (const Pending* p : snapshots) {
    const std::string hex = absl::BytesToHexString(p->queue);
    if (!p->chunks_written) {
      if (absl::Status s = WriteChunks(p->queue, p->snapshot_seq, p->payload); !s.ok()) return s;
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
  if (!snapshots.empty()) {
    // Forget the revisions the snapshot made unnecessary. Best effort.
    absl::Status compacted = options_.client->Compact(r->header().revision());
    if (!compacted.ok() && compacted.code() != absl::StatusCode::kOutOfRange) {
      SHARDQ_LOG_WARN("{}: compaction after a snapshot failed: {}", Where(), compacted.ToString());
    }
  }
  return absl::OkStatus();
}

}  // namespace shardq
