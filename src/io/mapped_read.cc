#include "src/io/mapped_read.h"

#include <signal.h>

#include <atomic>
#include <cstring>

#include "absl/synchronization/mutex.h"

namespace shardq {
namespace {

using mapped_read_internal::Guard;

thread_local Guard* t_guard = nullptr;
// Set while this thread's SIGBUS is handed on to the chained handler: a
// handler that hands it back to us (it saved ours as its predecessor) gets
// the default action instead of a loop. (A chained handler that jumps out
// leaves it set; the next guarded call on the thread clears it.)
thread_local bool t_chaining = false;

// The handler ours replaced, kept for the life of the process: a handler
// may read it at any time, so a copy replaced by a later install is never
// freed (each links to the one before it).
struct Chained {
  struct sigaction action;
  const Chained* replaced;
};
std::atomic<const Chained*> g_chained{nullptr};

void DefaultAction(const siginfo_t* info) {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
  // A fault runs its access again on return and dies of it; a sent signal
  // has no access to run again.
  if (info == nullptr || info->si_code <= 0) raise(SIGBUS);
}

void OnSigbus(int signo, siginfo_t* info, void* context) {
  Guard* const guard = t_guard;
  if (guard != nullptr && info != nullptr && info->si_code > 0) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
    if (address >= guard->lo && address < guard->hi) {
      t_guard = nullptr;
      siglongjmp(guard->env, 1);
    }
  }
  const Chained* const link = g_chained.load(std::memory_order_acquire);
  if (link == nullptr || t_chaining) {
    DefaultAction(info);
    return;
  }
  const struct sigaction* const chained = &link->action;
  if ((chained->sa_flags & SA_SIGINFO) != 0) {
    if (chained->sa_sigaction == nullptr) {
      DefaultAction(info);
      return;
    }
    t_chaining = true;
    chained->sa_sigaction(signo, info, context);
    t_chaining = false;
    return;
  }
  if (chained->sa_handler == SIG_IGN && info != nullptr && info->si_code <= 0) {
    return;  // a sent SIGBUS that was ignored before us stays ignored
  }
  if (chained->sa_handler == SIG_DFL || chained->sa_handler == SIG_IGN) {
    DefaultAction(info);
    return;
  }
  t_chaining = true;
  chained->sa_handler(signo);
  t_chaining = false;
}

}  // namespace

namespace mapped_read_internal {

void Enter(Guard* guard) {
  guard->outer = t_guard;
  t_chaining = false;
  t_guard = guard;
}

void Leave(Guard* guard) { t_guard = guard->outer; }

}  // namespace mapped_read_internal

void InstallMappedReadGuard() {
  static absl::Mutex mu(absl::kConstInit);
  absl::MutexLock lock(&mu);
  struct sigaction current;
  if (sigaction(SIGBUS, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == &OnSigbus) {
    return;
  }
  g_chained.store(new Chained{current, g_chained.load(std::memory_order_relaxed)},
                  std::memory_order_release);
  struct sigaction ours;
  std::memset(&ours, 0, sizeof ours);
  sigemptyset(&ours.sa_mask);
  ours.sa_sigaction = &OnSigbus;
  ours.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigaction(SIGBUS, &ours, nullptr);
}

bool GuardedCopy(const char* src, size_t n, char* dst) {
  return RunMappedGuarded(src, n, [&] { std::memcpy(dst, src, n); });
}

bool GuardedFindNewline(const char* src, size_t n, const char** found) {
  return RunMappedGuarded(src, n, [&] {
    *found = static_cast<const char*>(std::memchr(src, '\n', n));
  });
}

}  // namespace shardq
