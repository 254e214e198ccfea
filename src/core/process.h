// Objects with background threads may be inherited by a fork()ed child
// (PyTorch's DataLoader forks its workers): the child has the objects but
// not their threads. Such an object remembers the process that made it and,
// when destroyed elsewhere, abandons its threads instead of joining threads
// that do not exist there (which would abort the child).
#ifndef SHARDQ_CORE_PROCESS_H_
#define SHARDQ_CORE_PROCESS_H_

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <thread>
#include <utility>

namespace shardq {

namespace process_internal {
// Forks this process has gone through: bumped in the child of every fork()
// (a pthread_atfork handler, registered by the first ForkGeneration()
// call), so telling a fork child from its parent costs a load, not a
// getpid() system call (checked per record by readers: CheckOpen).
inline std::atomic<uint64_t> forks{0};
inline void CountFork() { forks.fetch_add(1, std::memory_order_relaxed); }
inline uint64_t ForkGeneration() {
  static const bool registered = ::pthread_atfork(nullptr, nullptr, &CountFork) == 0;
  (void)registered;
  return forks.load(std::memory_order_relaxed);
}
}  // namespace process_internal

class OwnerProcess {
 public:
  OwnerProcess() : pid_(::getpid()), generation_(process_internal::ForkGeneration()) {}
  // False in a child that inherited the object through fork().
  bool current() const { return process_internal::ForkGeneration() == generation_; }
  // The process that made the object.
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
  uint64_t generation_;
};

// Leaks the std::thread object (never joined or destroyed): the thread it
// names does not exist in this process.
inline void AbandonThread(std::thread& thread) {
  if (thread.joinable()) new std::thread(std::move(thread));  // NOLINT: intentional leak
}

// Names the calling thread "sq:<name>", cut to the 15 bytes Linux keeps, so
// that `top -H`, `ps -L`, perf and gdb tell shardq's threads apart (and
// from the host process's, in a Python trainer). Best effort: a failure
// changes nothing else.
inline void NameThisThread(std::string_view name) {
  char buf[16] = "sq:";
  const size_t n = std::min(name.size(), sizeof buf - 4);
  std::memcpy(buf + 3, name.data(), n);
  buf[3 + n] = '\0';
  pthread_setname_np(pthread_self(), buf);
}

}  // namespace shardq

#endif  // SHARDQ_CORE_PROCESS_H_
