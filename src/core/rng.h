// The PRNG moved to shardq/internal/rng.h (the pipeline's public templates
// use it); this header keeps the older include path working.
#ifndef SHARDQ_CORE_RNG_FORWARD_H_
#define SHARDQ_CORE_RNG_FORWARD_H_

#include "shardq/internal/rng.h"  // IWYU pragma: export

#endif  // SHARDQ_CORE_RNG_FORWARD_H_
