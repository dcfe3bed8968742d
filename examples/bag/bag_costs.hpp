#pragma once
// The bag example's irregular parameter sweep: task i's work, in flops, drawn from a
// heavy-tailed law (log-normal or Pareto) from the seed and i alone, so that every rank, and
// a check on rank 0, knows any task's cost without being told.

#include <cstdint>
#include <string>
#include <string_view>

namespace bellows::examples {

enum class CostLaw { lognormal, pareto };

/// "lognormal" or "pareto"; false for anything else.
[[nodiscard]] bool parse_cost_law(std::string_view text, CostLaw& out) noexcept;
[[nodiscard]] std::string_view to_string(CostLaw law) noexcept;

class SweepCosts {
 public:
  /// `mean_flops` per task on average; `shape` is the log-normal's sigma or Pareto's alpha
  /// (0: the default, 1.5 for either). Throws std::invalid_argument naming the value when
  /// mean_flops is not positive, sigma is not positive, or alpha is not above 1 (the mean
  /// would be infinite).
  SweepCosts(CostLaw law, double mean_flops, double shape, unsigned seed);

  /// Task `index`'s work in flops.
  [[nodiscard]] double flops(std::int64_t index) const noexcept;
  /// The digest task `index` returns when it runs: depends on the seed and the index alone,
  /// so that the sum over a run's tasks is known in advance.
  [[nodiscard]] std::uint64_t digest(std::int64_t index) const noexcept;
  [[nodiscard]] CostLaw law() const noexcept { return law_; }
  [[nodiscard]] double shape() const noexcept { return shape_; }

 private:
  CostLaw law_;
  double mean_flops_;
  double shape_;
  unsigned seed_;
};

/// Runs `flops` of real work (a dependent multiply-add chain, 2 flops a step) and returns
/// its value, which depends on `index`.
[[nodiscard]] double sweep_compute(double flops, std::int64_t index) noexcept;

}  // namespace bellows::examples
