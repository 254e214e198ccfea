// A process forked from one that made queues: a WorkQueue it inherited
// refuses takes (its items taken ahead are the parent's), the embedded
// coordinator refuses the queues the fork copied (the copy would hand every
// item out again), and a queue the child makes under a new name works.
// Not in the TSan set: fork() of a process with threads under TSan.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "shardq/work_queue.h"

namespace shardq {
namespace {

std::vector<std::string> Files(const std::string& tag, int files) {
  std::vector<std::string> paths;
  for (int f = 0; f < files; ++f) {
    std::string path = absl::StrCat(testing::TempDir(), "/fork-", tag, "-", getpid(), "-", f,
                                    ".txt");
    std::ofstream(path) << "line " << f << "\n";
    paths.push_back(path);
  }
  return paths;
}

WorkQueueOptions Options(const std::string& name, std::vector<std::string> works) {
  WorkQueueOptions o;
  o.name = absl::StrCat(name, "-", getpid());
  o.works = std::move(works);
  o.shuffle = false;
  return o;
}

// Runs `child` in a fork child: its exit status, 0 when every check there
// held. The child reports what failed on stderr.
int InChild(const std::function<bool()>& child) {
  const pid_t pid = fork();
  if (pid == 0) _exit(child() ? 0 : 1);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool RefusedAsInherited(const absl::Status& s, const std::string& says, const char* what) {
  if (absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), says)) return true;
  fprintf(stderr, "%s: expected FAILED_PRECONDITION with '%s', got %s\n", what, says.c_str(),
          s.ToString().c_str());
  return false;
}

TEST(ForkedChild, RefusesTheQueuesItsParentMadeAndReadsItsOwn) {
  const std::vector<std::string> works = Files("parent", 4);
  WorkQueueOptions options = Options("fork-parent", works);
  absl::StatusOr<std::unique_ptr<WorkQueue>> queue = WorkQueue::Create(options);
  ASSERT_TRUE(queue.ok()) << queue.status();
  absl::StatusOr<WorkItem> first = (*queue)->Take();  // one more is taken ahead
  ASSERT_TRUE(first.ok()) << first.status();

  const int status = InChild([&] {
    bool ok = RefusedAsInherited((*queue)->Take().status(), "is a fork of it",
                                 "take on the inherited WorkQueue");
    ok = RefusedAsInherited((*queue)->Complete(*first), "is a fork of it",
                            "complete on the inherited WorkQueue") && ok;
    ok = RefusedAsInherited((*queue)->CheckOpen(), "is a fork of it",
                            "CheckOpen of the inherited WorkQueue") && ok;
    // The parent's queue by name: the copy in this process is refused.
    absl::StatusOr<std::unique_ptr<WorkQueue>> again = WorkQueue::Create(options);
    absl::Status again_status = again.ok() ? (*again)->Take().status() : again.status();
    ok = RefusedAsInherited(again_status, "embedded coordinator of process",
                            "a new WorkQueue of the parent's queue") && ok;
    // A queue of its own: read whole.
    absl::StatusOr<std::unique_ptr<WorkQueue>> own =
        WorkQueue::Create(Options("fork-child-own", Files("child", 2)));
    if (!own.ok()) {
      fprintf(stderr, "own queue: %s\n", own.status().ToString().c_str());
      return false;
    }
    int taken = 0;
    for (absl::StatusOr<WorkItem> item = (*own)->Take(); item.ok(); item = (*own)->Take()) {
      ok = (*own)->Complete(*item).ok() && ok;
      ++taken;
    }
    if (taken != 2) {
      fprintf(stderr, "own queue: %d items taken, expected 2\n", taken);
      ok = false;
    }
    return ok;
  });
  EXPECT_EQ(status, 0);

  // The parent reads every item once, the one taken ahead included.
  ASSERT_TRUE((*queue)->Complete(*first).ok());
  std::set<std::string> got = {first->item};
  for (absl::StatusOr<WorkItem> item = (*queue)->Take(); item.ok(); item = (*queue)->Take()) {
    EXPECT_TRUE(got.insert(item->item).second) << item->item << " twice";
    ASSERT_TRUE((*queue)->Complete(*item).ok());
  }
  EXPECT_EQ(got, std::set<std::string>(works.begin(), works.end()));
  absl::StatusOr<QueueStats> stats = (*queue)->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->completed, 4);
}

}  // namespace
}  // namespace shardq
