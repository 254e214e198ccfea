#include "bench/straggler/speed_model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "src/core/rng.h"

namespace shardq::straggler {

absl::StatusOr<SpeedModel> ParseSpeedModel(absl::string_view name) {
  if (name == "uniform") return SpeedModel::kUniform;
  if (name == "two-slow") return SpeedModel::kTwoSlow;
  if (name == "lognormal") return SpeedModel::kLognormal;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown speed model '", name, "' (expected uniform, two-slow or lognormal)"));
}

std::string SpeedModelName(SpeedModel model) {
  switch (model) {
    case SpeedModel::kUniform: return "uniform";
    case SpeedModel::kTwoSlow: return "two-slow";
    case SpeedModel::kLognormal: return "lognormal";
  }
  return "?";
}

std::vector<double> StandardNormals(uint64_t seed, int64_t count) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double kTwoToMinus53 = 1.0 / 9007199254740992.0;
  SplitMix64 rng(Mix64(seed));
  std::vector<double> out;
  out.reserve(static_cast<size_t>(count));
  while (static_cast<int64_t>(out.size()) < count) {
    const double u1 = static_cast<double>((rng.Next() >> 11) + 1) * kTwoToMinus53;
    const double u2 = static_cast<double>(rng.Next() >> 11) * kTwoToMinus53;
    const double radius = std::sqrt(-2.0 * std::log(u1));
    out.push_back(radius * std::cos(kTwoPi * u2));
    if (static_cast<int64_t>(out.size()) < count) {
      out.push_back(radius * std::sin(kTwoPi * u2));
    }
  }
  return out;
}

std::vector<double> Slowdowns(SpeedModel model, int64_t num_workers,
                              uint64_t seed, double sigma) {
  std::vector<double> slowdowns(static_cast<size_t>(num_workers), 1.0);
  switch (model) {
    case SpeedModel::kUniform:
      break;
    case SpeedModel::kTwoSlow:
      if (num_workers > 0) slowdowns[0] = 4.0;
      if (num_workers > 1) slowdowns[1] = 2.0;
      break;
    case SpeedModel::kLognormal: {
      const std::vector<double> z = StandardNormals(seed, num_workers);
      for (int64_t i = 0; i < num_workers; ++i) slowdowns[i] = std::exp(sigma * z[i]);
      break;
    }
  }
  return slowdowns;
}

}  // namespace shardq::straggler
