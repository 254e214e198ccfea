// One thread that serves every waiting session take of a coordinator, so
// that a take which must wait costs an entry in its queue's waiter list
// and no thread, timer or heartbeat of its own.
//
// Keys are opaque (the coordinator's queues). `serve(key)` runs on the
// hub's thread, without any hub lock held, when the key was poked
// (something changed that may let its waiters proceed) or when the time it
// asked for came; it returns the next time it wants to run without a poke
// (absl::InfiniteFuture(): not before the next poke). Thread-safe; Poke
// and WakeBy may be called with the caller's locks held (the hub's lock is
// a leaf).
#ifndef SHARDQ_SERVER_WAIT_HUB_H_
#define SHARDQ_SERVER_WAIT_HUB_H_

#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "src/core/process.h"

namespace shardq {

class WaitHub {
 public:
  using Serve = std::function<absl::Time(void* key)>;
  // Starts the thread.
  explicit WaitHub(Serve serve);
  // Stops and joins the thread (abandons it in a fork()ed child).
  ~WaitHub();
  WaitHub(const WaitHub&) = delete;
  WaitHub& operator=(const WaitHub&) = delete;

  // Runs serve(key) soon.
  void Poke(void* key);
  // Runs serve(key) at `when` at the latest (an earlier wake stays).
  void WakeBy(void* key, absl::Time when);

 private:
  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || rescan_ || !poked_.empty();
  }

  const Serve serve_;
  absl::Mutex mu_;
  absl::CondVar changed_;  // signalled by whatever HasWork() reads
  absl::flat_hash_set<void*> poked_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<void*, absl::Time> wake_ ABSL_GUARDED_BY(mu_);
  bool rescan_ ABSL_GUARDED_BY(mu_) = false;  // wake_ got an earlier time
  absl::Time sleeping_until_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
  OwnerProcess owner_;
};

}  // namespace shardq

#endif  // SHARDQ_SERVER_WAIT_HUB_H_
