// Worker speed models of the straggler benchmark, shared by the simulator
// and the real-process worker so that both (and the Python peers, through
// `straggler_sim --print-slowdowns`) give worker i the same speed.
//
// A worker's speed is given as its slowdown: the factor by which its
// per-record time exceeds the nominal one (1 = nominal, 4 = 4x slower), so
// its speed is 1 / slowdown.
//
//   uniform    every worker 1x.
//   two-slow   worker 0 is 4x slower, worker 1 2x slower, the rest 1x.
//   lognormal  slowdown_i = exp(sigma * z_i), z_i standard normal from
//              Box–Muller over our SplitMix64 (src/core/rng.h) seeded with
//              Mix64(seed): deterministic, identical on every machine.
// Pure and thread-compatible.
#ifndef SHARDQ_BENCH_STRAGGLER_SPEED_MODEL_H_
#define SHARDQ_BENCH_STRAGGLER_SPEED_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardq::straggler {

enum class SpeedModel { kUniform, kTwoSlow, kLognormal };

// "uniform", "two-slow" or "lognormal"; INVALID_ARGUMENT naming the value
// otherwise.
absl::StatusOr<SpeedModel> ParseSpeedModel(absl::string_view name);
std::string SpeedModelName(SpeedModel model);

// The slowdown of workers 0..num_workers-1 (see above). `sigma` is used by
// kLognormal only.
std::vector<double> Slowdowns(SpeedModel model, int64_t num_workers,
                              uint64_t seed, double sigma = 0.3);

// Standard normal deviates from SplitMix64(Mix64(seed)) by Box–Muller:
// u1 in (0, 1], u2 in [0, 1), each from the top 53 bits of one draw;
// z = sqrt(-2 ln u1) * cos(2 pi u2), then sqrt(-2 ln u1) * sin(2 pi u2).
std::vector<double> StandardNormals(uint64_t seed, int64_t count);

}  // namespace shardq::straggler

#endif  // SHARDQ_BENCH_STRAGGLER_SPEED_MODEL_H_
