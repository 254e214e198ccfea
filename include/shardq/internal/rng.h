// The specified PRNG and shuffle behind every epoch order. Implemented here
// (not std::shuffle / std::uniform_int_distribution, whose output differs
// between standard libraries) so that an order is identical on every machine.
//
//   SplitMix64 (Steele, Lea, Flood 2014): state += 0x9E3779B97F4A7C15, then
//   the output mix z = (z ^ z>>30) * 0xBF58476D1CE4E5B9; (z ^ z>>27) *
//   0x94D049BB133111EB; z ^ z>>31.
//   UniformBelow(n): rejection sampling, unbiased: draws r until
//   r >= (2^64 - n) mod n, returns r mod n.
//   Fisher–Yates: for i = n-1 down to 1, swap(a[i], a[UniformBelow(i+1)]).
//   Epoch stream: SplitMix64 seeded with Mix(seed ^ Mix(epoch + 1)).
// Pure and thread-compatible.
#ifndef SHARDQ_CORE_RNG_H_
#define SHARDQ_CORE_RNG_H_

#include <cstdint>
#include <vector>

namespace shardq {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next();
  // Uniform in [0, bound); bound must be > 0.
  uint64_t UniformBelow(uint64_t bound);

 private:
  uint64_t state_;
};

// The SplitMix64 output function (a bijective 64-bit mix).
uint64_t Mix64(uint64_t x);

// Shuffles `order` in place with Fisher–Yates driven by `rng`.
void FisherYatesShuffle(SplitMix64& rng, std::vector<int64_t>& order);

// The order in which epoch `epoch` hands out items 0..num_items-1: identity
// when !shuffle, else a Fisher–Yates permutation of the epoch stream.
std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch,
                                int64_t num_items, bool shuffle);

}  // namespace shardq

#endif  // SHARDQ_CORE_RNG_H_
