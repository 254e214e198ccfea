// Where a client finds its coordinator: the address spec every entry point
// takes (--address, SHARDQ_ADDRESS, WorkQueueOptions::address, Python's
// address=, a TF_CONFIG "shardq" job), parsed once here, and the resolver
// that says which coordinator to call now and which one after a failure.
//
// Three forms:
//   HOST:PORT, unix:PATH (or any other gRPC target)  one coordinator, as
//       given; gRPC reports what is wrong with it when it connects.
//   H1:P1,H2:P2,...  coordinators of one job of which one leads (issue 18);
//       a standby answers every call UNAVAILABLE "not leader: ..." naming
//       the leader in the trailing metadata kLeaderMetadataKey.
//   etcd://E1:P1[,E2:P2...]/JOB  the leader of JOB as etcd's election key
//       says (src/store/etcd_leader.h); E* are etcd's members.
#ifndef SHARDQ_CLIENT_COORDINATOR_ADDRESS_H_
#define SHARDQ_CLIENT_COORDINATOR_ADDRESS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardq {

// The trailing metadata in which a standby names the leader's address.
inline constexpr char kLeaderMetadataKey[] = "shardq-leader";

struct CoordinatorAddress {
  // The spec as given (whitespace trimmed), for messages.
  std::string spec;
  // One entry: a single coordinator; several: a list to find the leader
  // in. Empty for an etcd address.
  std::vector<std::string> coordinators;
  // Non-empty for an etcd address: etcd's members (HOST:PORT) and the job.
  std::vector<std::string> etcd_endpoints;
  std::string etcd_job;

  bool from_etcd() const { return !etcd_endpoints.empty(); }
  // One fixed coordinator: nothing to fail over to.
  bool single() const { return !from_etcd() && coordinators.size() == 1; }
  // What the client follows, for messages: "coordinator H:P",
  // "the leader among coordinators H1:P1,H2:P2", "the leader of job 'J'
  // as etcd at E1:P1,E2:P2 names it".
  std::string Describe() const;
};

// Parses the forms above. A spec without a comma that is not etcd:// is a
// single coordinator, taken verbatim (as before issue 18). INVALID_ARGUMENT
// naming the spec and the bad part: an empty spec; a list entry that is
// empty, not HOST:PORT / unix:PATH, has a port outside 1..65535, or
// repeats; an etcd:// spec with no endpoints, a bad endpoint, no "/JOB",
// an empty job, or a job that is not a valid etcd job name (a '/', spaces,
// over 200 characters).
absl::StatusOr<CoordinatorAddress> ParseCoordinatorAddress(absl::string_view spec);

// Chooses the coordinator to call. Thread-safe: calls of many threads
// share one resolver; a failure reported by one moves all of them on once.
class LeaderResolver {
 public:
  // Reads the leader's advertised address from etcd: NOT_FOUND when
  // nobody leads, UNAVAILABLE when etcd cannot be reached. Called without
  // any lock held; may block for etcd's call timeout.
  using LeaderLookup = std::function<absl::StatusOr<std::string>()>;

  // `lookup` is used (and must be set) for an etcd address only.
  LeaderResolver(CoordinatorAddress address, LeaderLookup lookup);

  // For an etcd address, a resolver that reads the election key through an
  // etcd client of `address.etcd_endpoints` (each member tried for at most
  // `etcd_call_timeout`). Makes no call yet. INVALID_ARGUMENT for an etcd
  // address without endpoints or job.
  static absl::StatusOr<std::unique_ptr<LeaderResolver>> Create(
      CoordinatorAddress address, absl::Duration etcd_call_timeout = absl::Seconds(2));

  // The coordinator to call now. For etcd, the leader last read, or (the
  // first time, and after Failed) read now. UNAVAILABLE naming etcd when
  // it cannot be read, or "nobody leads job 'J' yet" (an election is in
  // progress): both worth retrying, as a coordinator that is down is.
  // DATA_LOSS for an election record that does not parse, and
  // FAILED_PRECONDITION for a leader that advertises no address: retrying
  // would not help.
  absl::StatusOr<std::string> Current();

  // A call to `target` got no answer, or a "not leader" one, or its stream
  // broke. `leader_hint` is the kLeaderMetadataKey of the answer ("" when
  // none). A list moves to the hinted coordinator when it is one of the
  // list, else to the next one round-robin; etcd is read again by the next
  // Current(). Does nothing for a single coordinator, or when `target` is
  // no longer current (another call moved on already).
  void Failed(absl::string_view target, absl::string_view leader_hint);

  const CoordinatorAddress& address() const { return address_; }

 private:
  const CoordinatorAddress address_;
  const LeaderLookup lookup_;
  absl::Mutex mu_;
  // A list: the entry to call. etcd: the leader last read ("" = read).
  size_t index_ ABSL_GUARDED_BY(mu_) = 0;
  std::string etcd_leader_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardq

#endif  // SHARDQ_CLIENT_COORDINATOR_ADDRESS_H_
