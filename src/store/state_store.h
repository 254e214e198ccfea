// Where a durable coordinator keeps its state: an ordered stream of updates
// per coordinator (every queue's), group-committed, plus per-queue
// snapshots that let recovery skip the updates they include.
//
// Two implementations: Journal (SQLite in a state directory, journal.h) and
// EtcdStore (an etcd cluster shared by standby coordinators, etcd_store.h).
// CoordinatorImpl holds a StateStore and knows nothing of either.
//
// The contract every implementation keeps:
//  * Append and AppendSnapshot do no I/O and never block; each append gets
//    the next sequence number (one stream for every queue).
//  * The stream is ordered: an entry is durable only once every entry
//    appended before it is, so a caller may append without waiting (lease
//    grants) and rely on any later wait to cover it.
//  * A failed commit is final: nothing more is written, appends are
//    dropped, every wait returns the error (status()). Only a new store,
//    which recovers what was stored, clears it. The coordinator answers
//    nothing that depends on an entry it could not store.
//  * Recovery (each implementation's Open) yields a RecoveredState.
//
// Implementations are thread-safe.
#ifndef SHARDQ_STORE_STATE_STORE_H_
#define SHARDQ_STORE_STATE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/shardq/journal.pb.h"

namespace shardq {

// What a store holds, in the order recovery must apply it.
struct RecoveredState {
  struct Queue {
    std::string name;
    // Set when the queue has a snapshot; updates then start after it.
    std::unique_ptr<journal::QueueSnapshot> snapshot;
    uint64_t snapshot_seq = 0;  // the last update the snapshot includes
    std::vector<journal::Update> updates;  // in journal order
    // The lowest sequence of the queue's stored entries, those its snapshot
    // covers included (0: none, or a store that does not say).
    uint64_t first_entry_seq = 0;
  };
  std::vector<Queue> queues;  // in order of first appearance
  uint64_t last_seq = 0;
};

// What a store's commits stored so far, for metrics: entries / commits is
// how many appends share one commit.
struct StoreTotals {
  int64_t commits = 0;
  int64_t entries = 0;    // updates and snapshots
  int64_t bytes = 0;      // their serialized size
  int64_t snapshots = 0;
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // Queues `update` of `queue` for the next commit; returns its sequence
  // number. No I/O.
  virtual uint64_t Append(const std::string& queue, const journal::Update& update) = 0;

  // Queues a snapshot of `queue` that includes every update of that queue
  // with sequence <= `seq`; once committed, recovery skips those updates
  // and the store may delete them. No I/O. Returns the snapshot's size in
  // bytes as stored.
  virtual size_t AppendSnapshot(const std::string& queue, uint64_t seq,
                                const journal::QueueSnapshot& snapshot) = 0;

  // AppendSnapshot for a large snapshot, without holding up the stream: the
  // snapshot is written in parts, each in a commit of its own, before the
  // entry that completes it, so completions waiting for durability wait
  // behind one part at most. Blocks; returns the snapshot's size in bytes.
  virtual size_t WriteSnapshot(const std::string& queue, uint64_t seq,
                               const journal::QueueSnapshot& snapshot) = 0;

  // Blocks until every append up to `seq` is durable; the store's error
  // otherwise (see status()).
  virtual absl::Status WaitDurable(uint64_t seq) = 0;

  // Calls `done` once every append up to `seq` is durable, with OK, or with
  // the error that keeps it from being stored. Never blocks and never
  // writes on the caller's thread. `done` runs on the thread whose commit
  // made `seq` durable (the caller's only when already durable); it must be
  // quick and must not call the store. Callbacks of different commits may
  // run concurrently.
  virtual void OnDurable(uint64_t seq, std::function<void(absl::Status)> done) = 0;

  // Commits everything appended so far and waits for it.
  virtual absl::Status Flush() = 0;

  virtual StoreTotals totals() const = 0;

  // OK, or the error of the commit that failed (final, see above).
  // Lock-free while OK.
  virtual absl::Status status() const = 0;

  // Every append up to this sequence number is durable. Lock-free.
  virtual uint64_t durable_seq() const = 0;
};

}  // namespace shardq

#endif  // SHARDQ_STORE_STATE_STORE_H_
