// Keeps a coordinator process's resident memory close to what its queues
// hold. A coordinator allocates in bursts (a plan's item strings when a
// queue is created, a copy of a queue's state and its serialised form for
// each snapshot) between long-lived state; glibc's allocator keeps what
// such bursts free, so without these the resident set of a 1,000,000-slice
// queue settles at several times its live data.
//
// Thread-safe. Both are no-ops where the C library is not glibc.
#ifndef SHARDQ_SERVER_PROCESS_MEMORY_H_
#define SHARDQ_SERVER_PROCESS_MEMORY_H_

namespace shardq {

// Fixes glibc's mmap threshold at 128 KiB (by default it grows to the
// largest block freed so far, up to 32 MiB), so that large buffers are
// mapped and unmapped rather than kept in the heap once freed. For a
// serving process (`shardq serve`), once, at its start; a library embedding
// a coordinator leaves the host's allocator alone.
void TuneAllocatorForServing();

// Returns free heap pages to the OS (malloc_trim). The coordinator calls it
// after each snapshot, outside every queue's mutex.
void ReleaseFreeMemory();

}  // namespace shardq

#endif  // SHARDQ_SERVER_PROCESS_MEMORY_H_
