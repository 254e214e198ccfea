// Test support: the largest single operator new request since the last
// reset, so that tests can show a corrupt length is never allocated.
//
// Linking largest_allocation_testing.cc replaces the global operator new and
// delete of the whole binary (plain malloc/free underneath); link it only into
// test binaries, one per binary.
#ifndef SHARDQ_SRC_IO_LARGEST_ALLOCATION_TESTING_H_
#define SHARDQ_SRC_IO_LARGEST_ALLOCATION_TESTING_H_

#include <cstddef>

namespace shardq::testing_util {

// Forgets the requests seen so far.
void ResetLargestAllocation();

// The largest request (bytes) since the last ResetLargestAllocation().
size_t LargestAllocation();

}  // namespace shardq::testing_util

#endif  // SHARDQ_SRC_IO_LARGEST_ALLOCATION_TESTING_H_
