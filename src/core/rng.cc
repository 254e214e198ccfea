#include "shardq/internal/rng.h"

#include <cstddef>
#include <numeric>
#include <utility>

namespace shardq {

uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::Next() {
  state_ += 0x9E3779B97F4A7C15ULL;
  return Mix64(state_);
}

uint64_t SplitMix64::UniformBelow(uint64_t bound) {
  // (2^64 - bound) mod bound, computed in 64-bit arithmetic.
  const uint64_t threshold = (0 - bound) % bound;
  while (true) {
    uint64_t r = Next();
    if (r >= threshold) return r % bound;
  }
}

void FisherYatesShuffle(SplitMix64& rng, std::vector<int64_t>& order) {
  for (size_t i = order.size(); i > 1; --i) {
    size_t j = static_cast<size_t>(rng.UniformBelow(i));
    std::swap(order[i - 1], order[j]);
  }
}

std::vector<int64_t> EpochOrder(uint64_t seed, int64_t epoch,
                                int64_t num_items, bool shuffle) {
  std::vector<int64_t> order(static_cast<size_t>(num_items));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!shuffle) return order;
  SplitMix64 rng(Mix64(seed ^ Mix64(static_cast<uint64_t>(epoch) + 1)));
  FisherYatesShuffle(rng, order);
  return order;
}

}  // namespace shardq
