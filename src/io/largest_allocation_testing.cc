#include "src/io/largest_allocation_testing.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace shardq::testing_util {
namespace {

std::atomic<size_t> g_largest{0};

// Called by the replacement operator new below.
void NoteAllocation(size_t size) {
  size_t seen = g_largest.load(std::memory_order_relaxed);
  while (size > seen && !g_largest.compare_exchange_weak(seen, size, std::memory_order_relaxed)) {
  }
}

}  // namespace

void ResetLargestAllocation() { g_largest.store(0, std::memory_order_relaxed); }

size_t LargestAllocation() { return g_largest.load(std::memory_order_relaxed); }

}  // namespace shardq::testing_util

// Plain malloc/free underneath, which GCC flags as a new/free mismatch once
// these are inlined into their callers. Sanitizer runtimes replace the array
// forms separately: route them here too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t size) {
  shardq::testing_util::NoteAllocation(size);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
