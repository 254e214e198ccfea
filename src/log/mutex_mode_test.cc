#include "src/log/mutex_mode.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace shardq {
namespace {

enum class Setup { kNone, kProduction, kProductionKeepingTheCheck };

// In a fork child: `setup`, then two mutexes taken in one order and then in
// the other (a lock-order inversion). True when that aborted the child
// (absl's deadlock detector is on there).
bool InversionAborts(Setup setup) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (setup == Setup::kProductionKeepingTheCheck) {
      setenv("SHARDQ_MUTEX_DEADLOCK_CHECK", "1", 1);
    } else {
      unsetenv("SHARDQ_MUTEX_DEADLOCK_CHECK");
    }
    if (setup != Setup::kNone) UseProductionMutexMode();
    absl::Mutex a, b;
    a.Lock();
    b.Lock();
    b.Unlock();
    a.Unlock();
    b.Lock();
    a.Lock();
    a.Unlock();
    b.Unlock();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

TEST(MutexMode, ProductionModeTurnsTheDeadlockCheckOffUnlessAskedToKeepIt) {
  if (!InversionAborts(Setup::kNone)) {
    GTEST_SKIP() << "this abseil was built with NDEBUG: its deadlock check is off already";
  }
  EXPECT_FALSE(InversionAborts(Setup::kProduction));
  EXPECT_TRUE(InversionAborts(Setup::kProductionKeepingTheCheck));
}

}  // namespace
}  // namespace shardq
