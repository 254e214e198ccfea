// FUZZ_CHECK: the property checks of the fuzz targets. Unlike assert() it
// stays on in Release builds (the corpus replay tests are built with
// NDEBUG), and it aborts so that libFuzzer records the input as a crash.
#ifndef SHARDQ_FUZZ_FUZZ_CHECK_H_
#define SHARDQ_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond, what)                                            \
  do {                                                                    \
    if (!(cond)) {                                                        \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, \
                   __LINE__, #cond, std::string(what).c_str());           \
      std::abort();                                                       \
    }                                                                     \
  } while (0)

#endif  // SHARDQ_FUZZ_FUZZ_CHECK_H_
