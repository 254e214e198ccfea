// EtcdStore's recovery: reading a job's state, finding the contiguous
// prefix of commits, and deleting what lies after it (etcd_store.h).
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/etcd/etcd_store.pb.h"
#include "src/log/log.h"
#include "src/store/etcd_leader.h"
#include "src/store/etcd_store.h"
#include "src/store/etcd_store_keys.h"

namespace shardq {
namespace {

using etcd_store_keys::Checksum;
using etcd_store_keys::DeleteOp;
using etcd_store_keys::PutOp;
using etcd_store_keys::SeqKey;

// Reads every key in [start, end) at `revision` (0: the current one, which
// is then returned through `revision`), a page at a time.
absl::Status ReadRange(EtcdClient& client, const std::string& start, const std::string& end,
                       bool keys_only, int64_t* revision,
                       const std::function<absl::Status(const etcdserverpb::KeyValue&)>& each) {
  std::string from = start;
  while (true) {
    etcdserverpb::RangeRequest request;
    request.set_key(from);
    request.set_range_end(end);
    request.set_limit(256);
    request.set_revision(*revision);
    request.set_keys_only(keys_only);
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

// The 20-digit sequence number at the start of `text` ("<seq>" or
// "<seq>/..."), or false.
bool ParseSeq(absl::string_view text, uint64_t* seq) {
  return text.size() >= 20 && (text.size() == 20 || text[20] == '/' || text[20] == '.') &&
         absl::SimpleAtoi(text.substr(0, 20), seq);
}

struct Mark {
  std::string key;
  uint64_t first = 0;
  uint64_t last = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(const EtcdStoreOptions& options,
                                                           RecoveredState* recovered) {
  if (options.client == nullptr) return absl::InvalidArgumentError("etcd store: no client");
  if (!ValidEtcdJobName(options.job)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd store: job name '", options.job,
        "' must be 1-200 printable characters without '/' or spaces"));
  }
  if (options.commits_in_flight < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "etcd store: commits_in_flight is ", options.commits_in_flight, "; at least 1"));
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
  int64_t revision = 0;  // every read at the first read's revision

  // The commit base and the commit marks.
  uint64_t base = 0;
  bool has_base = false;
  absl::Status s = ReadRange(client, prefix + "b/", EtcdPrefixEnd(prefix + "b/"), true, &revision,
                             [&](const etcdserverpb::KeyValue& kv) {
                               uint64_t seq = 0;
                               if (!ParseSeq(kv.key().substr(prefix.size() + 2), &seq)) {
                                 return data_loss(kv.key(), "is not a commit base");
                               }
                               base = std::max(base, seq);
                               has_base = true;
                               return absl::OkStatus();
                             });
  if (!s.ok()) return s;
  std::vector<Mark> marks;  // in key order: by first sequence number
  s = ReadRange(client, prefix + "m/", EtcdPrefixEnd(prefix + "m/"), false, &revision,
                [&](const etcdserverpb::KeyValue& kv) {
                  Mark mark;
                  mark.key = kv.key();
                  etcdstore::CommitMark value;
                  if (!ParseSeq(kv.key().substr(prefix.size() + 2), &mark.first) ||
                      !value.ParseFromString(kv.value()) || value.last_seq() < mark.first) {
                    return data_loss(kv.key(), "is not a commit mark");
                  }
                  mark.last = value.last_seq();
                  marks.push_back(std::move(mark));
                  return absl::OkStatus();
                });
  if (!s.ok()) return s;

  // Snapshots.
  std::vector<std::pair<std::string, etcdstore::SnapshotMeta>> metas;
  s = ReadRange(client, prefix + "s/", EtcdPrefixEnd(prefix + "s/"), false, &revision,
                [&](const etcdserverpb::KeyValue& kv) {
                  etcdstore::SnapshotMeta meta;
                  if (!meta.ParseFromString(kv.value())) {
                    return data_loss(kv.key(), "does not parse");
                  }
                  metas.emplace_back(kv.key().substr(prefix.size() + 2), std::move(meta));
                  return absl::OkStatus();
                });
  if (!s.ok()) return s;
  uint64_t last_seq = 0;  // the last entry stored
  for (auto& [hex, meta] : metas) {
    const std::string chunk_prefix = absl::StrCat(prefix, "c/", hex, "/", SeqKey(meta.seq()), "/");
    std::string bytes;
    int64_t chunks = 0;
    s = ReadRange(client, chunk_prefix, EtcdPrefixEnd(chunk_prefix), false, &revision,
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
      return data_loss(meta_key,
                       absl::StrCat("snapshot of queue '", meta.queue(), "' does not parse"));
    }
    q.snapshot_seq = meta.seq();
    q.first_seq = meta.seq();
    last_seq = std::max<uint64_t>(last_seq, meta.seq());
  }
  // Every snapshot's chunk directory ("c/<q>/<seq>/"), to find those that
  // no snapshot reached.
  std::set<std::string> chunk_dirs;
  s = ReadRange(client, prefix + "c/", EtcdPrefixEnd(prefix + "c/"), true, &revision,
                [&](const etcdserverpb::KeyValue& kv) {
                  const size_t slash = kv.key().find('/', prefix.size() + 2);
                  if (slash != std::string::npos) chunk_dirs.insert(kv.key().substr(0, slash + 22));
                  return absl::OkStatus();
                });
  if (!s.ok()) return s;

  // Journal batches; a batch's parts follow it in key order.
  std::vector<std::pair<std::string, etcdstore::Batch>> batches;
  std::map<std::string, std::string> parts;
  s = ReadRange(client, prefix + "j/", EtcdPrefixEnd(prefix + "j/"), false, &revision,
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

  // The contiguous prefix: from the base, marks chained first to last. A
  // journal without base or marks predates them (one commit in flight:
  // no gaps); it is kept whole and given a base.
  Unacknowledged after;
  uint64_t end = UINT64_MAX;  // the prefix's last sequence number
  if (has_base || !marks.empty()) {
    uint64_t next = base + 1;
    for (const Mark& mark : marks) {
      if (mark.last <= base) continue;  // stored before the base moved
      if (mark.first > next) break;     // a gap: this commit and later ones never acknowledged
      if (mark.first < next) {
        return data_loss(mark.key, absl::StrCat("names entries ", mark.first, "..", mark.last,
                                                ", overlapping those stored up to ", next - 1));
      }
      next = mark.last + 1;
    }
    end = next - 1;
    after.marks = std::any_of(marks.begin(), marks.end(),
                              [&](const Mark& m) { return m.first > end; });
  }
  std::set<std::string> journal_after;
  for (const auto& [key, batch] : batches) {
    const std::string rest = key.substr(prefix.size() + 2);
    const std::string hex = rest.substr(0, rest.find('/'));
    uint64_t key_seq = 0;
    if (ParseSeq(rest.substr(hex.size() + 1), &key_seq) && key_seq > end) {
      journal_after.insert(hex);  // a commit after the gap: all its entries are
      continue;
    }
    QueueRead& q = queues[hex];
    for (int e = 0; e < batch.entries_size(); ++e) {
      const etcdstore::Entry& entry = batch.entries(e);
      last_seq = std::max<uint64_t>(last_seq, entry.seq());
      if (q.snapshot != nullptr && entry.seq() <= q.snapshot_seq) continue;
      std::string bytes = entry.update();
      for (int64_t i = 0; i < entry.parts(); ++i) {
        auto it = parts.find(absl::StrFormat("%s.p%04d.%06d", key, e, i));
        if (it == parts.end()) {
          return data_loss(key, absl::StrCat("misses part ", i, " of entry ", entry.seq()));
        }
        bytes.append(it->second);
      }
      journal::Update update;
      if (Checksum(bytes) != entry.crc32c() || !update.ParseFromString(bytes)) {
        return data_loss(key, absl::StrCat("entry ", entry.seq(),
                                           " fails its checksum or does not parse"));
      }
      q.first_seq = std::min<uint64_t>(q.first_seq, entry.seq());
      q.updates.push_back(std::move(update));
    }
  }
  for (const auto& [key, value] : parts) {  // also those of commits that never applied
    const std::string rest = key.substr(prefix.size() + 2);
    const std::string hex = rest.substr(0, rest.find('/'));
    uint64_t key_seq = 0;
    if (ParseSeq(rest.substr(hex.size() + 1), &key_seq) && key_seq > end) journal_after.insert(hex);
  }
  if (end == UINT64_MAX) {
    end = last_seq;
    after.write_base = last_seq > 0;
  }
  after.journal_queues.assign(journal_after.begin(), journal_after.end());
  for (const std::string& dir : chunk_dirs) {
    uint64_t seq = 0;
    const std::string rest = dir.substr(prefix.size() + 2);  // "<q>/<seq>/"
    const std::string hex = rest.substr(0, rest.find('/'));
    if (ParseSeq(rest.substr(hex.size() + 1), &seq) && seq > end) {
      after.chunk_dirs.push_back(dir);
    }
  }

  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [hex, q] : queues) {
    if (q.snapshot != nullptr || !q.updates.empty()) order.emplace_back(q.first_seq, hex);
  }
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
  std::unique_ptr<EtcdStore> store(new EtcdStore(options, end));
  if (!after.empty()) {
    if (absl::Status removed = store->RemoveUnacknowledged(after); !removed.ok()) {
      // A term lost meanwhile is not damage: the caller may stand by and
      // try again (UNAVAILABLE), as when etcd does not answer.
      if (store->lost_leadership()) return absl::UnavailableError(removed.message());
      return removed;
    }
  }
  store->StartWriters();
  return store;
}

absl::Status EtcdStore::RemoveUnacknowledged(const Unacknowledged& after) {
  const uint64_t end = durable_seq_.load();
  if (after.marks || !after.journal_queues.empty() || !after.chunk_dirs.empty()) {
    SHARDQ_LOG_WARN("{}: recovered the commits up to entry {}; deleting those stored after a gap "
                    "(never acknowledged): journal keys of {} queue(s), {} snapshot(s) in chunks",
                    Where(), end, after.journal_queues.size(), after.chunk_dirs.size());
  }
  std::vector<etcdserverpb::RequestOp> ops;
  auto flush = [&]() -> absl::Status {
    if (ops.empty()) return absl::OkStatus();
    absl::StatusOr<etcdserverpb::TxnResponse> r = GuardedTxn(std::move(ops));
    ops.clear();
    return r.status();
  };
  for (const std::string& hex : after.journal_queues) {
    const std::string journal = absl::StrCat(prefix_, "j/", hex, "/");
    ops.push_back(DeleteOp(journal + SeqKey(end + 1), EtcdPrefixEnd(journal)));
    if (ops.size() >= static_cast<size_t>(kMaxCommitOps)) {
      if (absl::Status s = flush(); !s.ok()) return s;
    }
  }
  for (const std::string& dir : after.chunk_dirs) {
    ops.push_back(DeleteOp(dir, EtcdPrefixEnd(dir)));
    if (ops.size() >= static_cast<size_t>(kMaxCommitOps)) {
      if (absl::Status s = flush(); !s.ok()) return s;
    }
  }
  if (absl::Status s = flush(); !s.ok()) return s;
  // Last, so that a try cut short here finds the same gap next time.
  if (after.marks) {
    ops.push_back(DeleteOp(absl::StrCat(prefix_, "m/", SeqKey(end + 1)),
                           EtcdPrefixEnd(prefix_ + "m/")));
  }
  if (after.write_base) ops.push_back(PutOp(absl::StrCat(prefix_, "b/", SeqKey(end)), ""));
  return flush();
}

}  // namespace shardq
