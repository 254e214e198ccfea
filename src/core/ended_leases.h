// The leases a queue remembers after they ended (expired, released,
// completed, failed): the most recent `kept` of them, so that a late
// completion still counts and a repeated one is told apart from a bogus
// one (see QueueState::Complete).
//
// Compact, because a durable coordinator copies the table under the
// queue's mutex for every snapshot (QueueState::Clone): an ended lease is
// a fixed-size value that names its worker by an index into a table of
// names kept once, so a copy allocates nothing per lease. A snapshot
// stores it as packed columns (journal::EndedLeases, snapshot format 3),
// about 12 bytes a lease instead of a message with the worker's name.
//
// Pure: no I/O, no clock. Not thread-safe (QueueState's mutex guards it).
#ifndef SHARDQ_CORE_ENDED_LEASES_H_
#define SHARDQ_CORE_ENDED_LEASES_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/shardq/journal.pb.h"

namespace shardq {

// How a remembered lease ended (the values of journal::LeaseRecord.ended
// and of journal::EndedLeases.ended's bytes).
enum class LeaseEnd : int {
  kExpired = 0,
  kReleased = 1,
  kCompleted = 2,
  kDuplicate = 3,
  kFailed = 4
};

class EndedLeases {
 public:
  struct Lease {
    int64_t epoch = 0;
    int64_t index = 0;
    uint32_t worker = 0;  // see worker(); 0: any worker (older snapshots)
    LeaseEnd how = LeaseEnd::kExpired;
  };

  // Remembers at most `kept` leases (> 0); the oldest are forgotten first.
  explicit EndedLeases(size_t kept) : kept_(kept) {}

  // Remembers that `lease_id` ended `how`. An id already remembered keeps
  // its place in the order and takes the new values. `worker` empty: any
  // worker.
  void Remember(uint64_t lease_id, int64_t epoch, int64_t index, absl::string_view worker,
                LeaseEnd how);

  // The remembered lease, or nullptr when it is not (never ended, or
  // forgotten). Valid until the next Remember.
  Lease* Find(uint64_t lease_id);
  const Lease* Find(uint64_t lease_id) const;

  // The name of `lease`'s worker; empty for any worker.
  const std::string& worker(const Lease& lease) const { return names_[lease.worker]; }

  size_t size() const { return order_.size(); }

  // Appends the leases, oldest first, with only the names they use.
  // Equal tables (the same leases in the same order) give equal protos.
  void ToProto(journal::EndedLeases* out) const;

  // Remembers the leases of `proto` after those already here. DATA_LOSS
  // naming `what` when its columns differ in length, a worker index or an
  // end is out of range, or `valid_ref` refuses a lease's (epoch, index).
  absl::Status AddFromProto(const journal::EndedLeases& proto,
                            const std::function<bool(int64_t, int64_t)>& valid_ref,
                            absl::string_view what);

  // How many worker names are kept (those of remembered leases), for tests
  // of bounded memory.
  size_t names() const { return ids_.size(); }

 private:
  // The index of `worker`'s name, counting one more lease that uses it.
  uint32_t Intern(absl::string_view worker);
  // One lease fewer uses name `id`; the last one frees it for reuse.
  void Release(uint32_t id);

  size_t kept_;
  absl::flat_hash_map<uint64_t, Lease> leases_;
  std::deque<uint64_t> order_;  // oldest first
  // Worker names by index (index 0 is "": any worker), how many remembered
  // leases use each, the indexes free for reuse, and each name's index. A
  // name no remembered lease uses is dropped, so a job whose workers come
  // and go under new names keeps at most `kept` names.
  std::vector<std::string> names_{std::string()};
  std::vector<uint32_t> uses_{0};
  std::vector<uint32_t> free_;
  absl::flat_hash_map<std::string, uint32_t> ids_;
};

}  // namespace shardq

#endif  // SHARDQ_CORE_ENDED_LEASES_H_
