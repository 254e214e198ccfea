#include "src/server/wait_hub.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace shardq {

WaitHub::WaitHub(Serve serve) : serve_(std::move(serve)) {
  thread_ = std::thread([this] {
    NameThisThread("wait-hub");
    Loop();
  });
}

WaitHub::~WaitHub() {
  if (!owner_.current()) {
    AbandonThread(thread_);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    changed_.Signal();
  }
  thread_.join();
}

void WaitHub::Poke(void* key) {
  absl::MutexLock lock(&mu_);
  poked_.insert(key);
  changed_.Signal();
}

void WaitHub::WakeBy(void* key, absl::Time when) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = wake_.try_emplace(key, when);
  if (!inserted) {
    if (it->second <= when) return;
    it->second = when;
  }
  if (when < sleeping_until_) {
    rescan_ = true;
    changed_.Signal();
  }
}

void WaitHub::Loop() {
  std::vector<void*> due;
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time now = absl::Now();
    absl::Time earliest = absl::InfiniteFuture();
    due.clear();
    for (auto it = wake_.begin(); it != wake_.end();) {
      if (it->second <= now) {
        due.push_back(it->first);
        wake_.erase(it++);
      } else {
        earliest = std::min(earliest, it->second);
        ++it;
      }
    }
    for (void* key : poked_) {
      if (std::find(due.begin(), due.end(), key) == due.end()) due.push_back(key);
    }
    poked_.clear();
    rescan_ = false;
    if (due.empty()) {
      sleeping_until_ = earliest;
      // A CondVar rather than Await(Condition): every change that ends the
      // sleep signals it, and ThreadSanitizer can follow a CondVar (see
      // src/pipeline/tsan_absl_mutex_shim.cc).
      while (!HasWork() && absl::Now() < earliest) changed_.WaitWithDeadline(&mu_, earliest);
      sleeping_until_ = absl::InfiniteFuture();
      continue;
    }
    for (void* key : due) {
      mu_.Unlock();
      const absl::Time next = serve_(key);
      mu_.Lock();
      if (next == absl::InfiniteFuture()) continue;
      auto [it, inserted] = wake_.try_emplace(key, next);
      if (!inserted) it->second = std::min(it->second, next);
    }
  }
}

}  // namespace shardq
