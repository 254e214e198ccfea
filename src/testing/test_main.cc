// The main() of every C++ test binary (shardq_cc_test): runs the tests with
// a temporary directory of their own, so that nothing they write is left
// behind in the shared /tmp.
//
// Before the tests run, a fresh directory is made under the one the
// environment names (TEST_TMPDIR, else TMPDIR, else /tmp) and TEST_TMPDIR
// is pointed at it, so testing::TempDir() and every process a test starts
// (coordinators, etcd members) write there. When every test passed it is
// removed; after a failure it is kept and its path printed, for a look at
// what the failing test wrote. SHARDQ_KEEP_TEST_TMPDIR=1 keeps it always.
// A test binary re-run inside it (a death test's child) nests its own
// directory in it, which goes with it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace {

std::string BaseDir() {
  for (const char* name : {"TEST_TMPDIR", "TMPDIR"}) {
    const char* dir = std::getenv(name);
    if (dir != nullptr && dir[0] != '\0') return dir;
  }
  return "/tmp";
}

// Short: tests put socket paths under it (at most 107 bytes).
std::string Pattern(const char* argv0) {
  std::string name = std::filesystem::path(argv0 != nullptr ? argv0 : "test").filename();
  if (name.size() > 32) name.resize(32);
  std::string base = BaseDir();
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return base + "/shardq-" + name + "-XXXXXX";
}

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  std::string dir = Pattern(argc > 0 ? argv[0] : nullptr);
  if (::mkdtemp(dir.data()) == nullptr) {
    std::perror(("test_main: cannot make " + dir + "; tests use " + BaseDir()).c_str());
    return RUN_ALL_TESTS();
  }
  ::setenv("TEST_TMPDIR", dir.c_str(), /*overwrite=*/1);
  const int result = RUN_ALL_TESTS();
  const char* keep = std::getenv("SHARDQ_KEEP_TEST_TMPDIR");
  if (result != 0 || (keep != nullptr && std::string(keep) == "1")) {
    std::fprintf(stderr, "test_main: the tests' files are kept in %s\n", dir.c_str());
    return result;
  }
  std::error_code error;
  std::filesystem::remove_all(dir, error);
  if (error) {
    std::fprintf(stderr, "test_main: could not remove %s: %s\n", dir.c_str(),
                 error.message().c_str());
  }
  return result;
}
