// Options of a shardq WorkQueue. Plain struct: defaults live here, and each
// field says what it trades off.
#ifndef SHARDQ_OPTIONS_H_
#define SHARDQ_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace shardq {

struct WorkQueueOptions {
  // Work names: file paths (text lines, TFRecord) or table URIs. Must not be
  // empty. Each is prefixed with `prefix` before use.
  std::vector<std::string> works;

  // How many times every item is handed out: >= 1, or kRepeatEpochs.
  int64_t num_epochs = 1;
  // num_epochs = kRepeatEpochs: repeat until the job stops, i.e. as many
  // epochs as the coordinator accepts for the plan: 10^8, or fewer for a
  // plan of more than ~88,000 items (2^43 hand-outs in all). Python's
  // num_epochs=None.
  static constexpr int64_t kRepeatEpochs = -1;

  // Re-shuffle the item order at every epoch. The order of epoch e is a pure
  // function of (seed, e, slice plan): identical on every run and machine.
  bool shuffle = true;

  // Seed of the shuffle. Unset: the queue draws one when it is created and
  // reports it in stats, so that a run can be repeated exactly.
  std::optional<uint64_t> seed;

  // String put before every work name (e.g. a data directory with a
  // trailing '/'). Item strings contain the prefixed name.
  std::string prefix;

  // Total number of slices to cut the works into, by size, never crossing a
  // work. Unset: one item per work. More slices balance better (10x the
  // number of workers or more) at the cost of more coordinator requests.
  std::optional<int64_t> num_slices;

  // How many items one worker may hold (lease) at the same time. More lets a
  // worker interleave reads across items; each held item is one more item a
  // dead worker delays.
  int64_t num_clients = 1;

  // Queue name; every worker naming the same queue shares it.
  std::string name = "work_queue";

  // How long a taken item stays leased without a heartbeat. The client
  // renews held leases in the background, so this bounds only how long the
  // item of a dead worker waits before someone else gets it.
  absl::Duration lease_timeout = absl::Seconds(30);

  // How often held leases are renewed and progress reported; also how soon
  // a split proposal reaches this worker. Capped at lease_timeout / 3.
  absl::Duration heartbeat_interval = absl::Seconds(1);

  // How many granted items a worker keeps ready beyond the ones it reads,
  // so that it never waits a round trip for its next item (the completion
  // of one item and the take of the next then travel together). Ready items
  // do not count against num_clients, which bounds the items a worker
  // reads at once: the coordinator lets it hold num_clients + take_ahead
  // (at most 64 more). One not started yet is given back whole when the
  // coordinator rebalances the tail, and ready items are released when the
  // WorkQueue closes. 0: take each item when it is asked for. Items are
  // handed out in the coordinator's order with or without it, so a
  // pipeline's record order stays a function of its seeds.
  int64_t take_ahead = 1;

  // Tail rebalancing: when a worker finds nothing left to take, the
  // coordinator may split an item another worker is still reading; that
  // worker stops at the split point and the rest becomes a new item. On by
  // default; set when the queue is created.
  bool split = true;
  // Smallest range split off, in item units (bytes; rows for tables).
  int64_t split_min_residual = 1;

  // Coordinator address ("host:port"). Empty: taken from the environment
  // (SHARDQ_ADDRESS, TF_CONFIG's "shardq" job, torchrun's MASTER_ADDR with
  // SHARDQ_PORT); if none is set the queue lives inside this process (the
  // embedded default) and workers are the threads that create WorkQueue
  // objects with the same name.
  std::string address;

  // Token for a coordinator started with --token-file. Empty: SHARDQ_TOKEN.
  std::string token;

  // PEM file of the CA that signed the coordinator's TLS certificate.
  // Non-empty: connect with TLS. Empty: SHARDQ_TLS_CA, else plaintext.
  std::string tls_ca_file;

  // How long to wait for the coordinator's first answer; a wrong address or
  // a TLS mismatch then fails with UNAVAILABLE naming the address and the
  // last connection error ("waiting for the coordinator ..." goes to stderr
  // meanwhile). Once it has answered, calls ride through its restarts.
  absl::Duration connect_timeout = absl::Seconds(60);

  // Name of this worker in stats and leases. Empty: from the environment
  // (TF_CONFIG task "worker-3", torchrun "rank-3"), else made unique from
  // the host, the process id and a counter.
  std::string worker_id;
};

}  // namespace shardq

#endif  // SHARDQ_OPTIONS_H_
