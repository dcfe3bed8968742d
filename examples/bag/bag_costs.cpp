#include "bag_costs.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>
#include <string>

namespace bellows::examples {
namespace {

std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform value in (0, 1) from a hash.
double open_unit(std::uint64_t h) noexcept {
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace

bool parse_cost_law(std::string_view text, CostLaw& out) noexcept {
  if (text == "lognormal") {
    out = CostLaw::lognormal;
    return true;
  }
  if (text == "pareto") {
    out = CostLaw::pareto;
    return true;
  }
  return false;
}

std::string_view to_string(CostLaw law) noexcept {
  return law == CostLaw::lognormal ? "lognormal" : "pareto";
}

SweepCosts::SweepCosts(CostLaw law, double mean_flops, double shape, unsigned seed)
    : law_(law), mean_flops_(mean_flops), shape_(shape > 0.0 ? shape : 1.5), seed_(seed) {
  if (!(mean_flops > 0.0) || !std::isfinite(mean_flops)) {
    throw std::invalid_argument("the mean task work must be positive, got " +
                                std::to_string(mean_flops) + " flops");
  }
  if (!std::isfinite(shape) || shape < 0.0 || (law == CostLaw::pareto && shape_ <= 1.0)) {
    throw std::invalid_argument(law == CostLaw::pareto
                                    ? "--cost-shape (Pareto's alpha) must be above 1, got " +
                                          std::to_string(shape)
                                    : "--cost-shape (the log-normal's sigma) must be positive, got " +
                                          std::to_string(shape));
  }
}

double SweepCosts::flops(std::int64_t index) const noexcept {
  const std::uint64_t h = mix(mix(seed_ * 0x100000001b3ULL) ^ static_cast<std::uint64_t>(index));
  const double u = open_unit(h);
  if (law_ == CostLaw::pareto) {
    // x_m / u^(1/alpha), with x_m so that the mean is mean_flops.
    const double scale = mean_flops_ * (shape_ - 1.0) / shape_;
    return scale / std::pow(u, 1.0 / shape_);
  }
  // exp(mu + sigma z), z standard normal (Box-Muller), mu so that the mean is mean_flops.
  const double v = open_unit(mix(h));
  const double z = std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * v);
  const double mu = std::log(mean_flops_) - 0.5 * shape_ * shape_;
  return std::exp(mu + shape_ * z);
}

std::uint64_t SweepCosts::digest(std::int64_t index) const noexcept {
  return mix(mix(static_cast<std::uint64_t>(seed_) ^ 0x5157ULL) + static_cast<std::uint64_t>(index));
}

double sweep_compute(double flops, std::int64_t index) noexcept {
  const auto steps = static_cast<std::int64_t>(flops / 2.0);
  double x = 1.0 + static_cast<double>(index % 97) * 1e-3;
  for (std::int64_t s = 0; s < steps; ++s) x = x * 0.999999 + 1e-6;
  return x;
}

}  // namespace bellows::examples
