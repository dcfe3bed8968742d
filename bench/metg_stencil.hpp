#pragma once
// The task graph and the busy loop of the METG benchmark (bench/metg.cpp), shared by its
// libbellows and hand-written MPI versions so that both run exactly the same work.
//
// METG, "minimum effective task granularity", is Task Bench's measure of a runtime's task
// overhead (Slaughter et al., "Task Bench: A Parameterized Benchmark for Evaluating Parallel
// Runtime Performance", SC 2020, section 4): the smallest task duration at which the useful
// compute time still fills 50 % of the cores' wall time.
//
// The graph is Task Bench's one-dimensional stencil: `width` columns, `steps` timesteps,
// task (t, x) for t > 0 reads the outputs of tasks (t-1, x-1), (t-1, x), (t-1, x+1), clipped
// at the edges (columns 0 and width-1 read two, the others three; nothing wraps around). Each
// task's output is a 16-byte tile: the value it computed and its timestep. Rank r owns the
// contiguous block of width/ranks columns starting at r * width/ranks.

#include <algorithm>
#include <cstdint>

namespace bellows::bench {

/// The shape of one stencil graph and its block distribution over ranks.
struct StencilShape {
  int width = 0;  ///< columns (tasks per timestep); a multiple of `ranks`
  int steps = 0;  ///< timesteps
  int ranks = 1;

  [[nodiscard]] int columns_per_rank() const noexcept { return width / ranks; }
  [[nodiscard]] int owner(int column) const noexcept { return column / columns_per_rank(); }
  [[nodiscard]] int first_column(int rank) const noexcept { return rank * columns_per_rank(); }
  /// The columns of timestep t-1 that task (t, column) reads, for t > 0: [first, last].
  [[nodiscard]] int first_dependency(int column) const noexcept { return std::max(column - 1, 0); }
  [[nodiscard]] int last_dependency(int column) const noexcept {
    return std::min(column + 1, width - 1);
  }
  [[nodiscard]] std::int64_t tasks() const noexcept {
    return static_cast<std::int64_t>(width) * steps;
  }
};

/// A task's output: 16 bytes, the tile passed to the tasks of the next timestep.
struct StencilOutput {
  double value = 0.0;
  double step = 0.0;
};

/// The compute-bound kernel: one dependent chain of multiply-adds, `iterations` long, with no
/// memory traffic. Its result depends on every iteration, so the compiler cannot drop any.
[[nodiscard]] inline double busy_loop(double seed, std::int64_t iterations) noexcept {
  double x = seed;
  for (std::int64_t i = 0; i < iterations; ++i) x = x * 0.999999 + 1e-7;
  return x;
}

/// The seed of task (0, column): its column.
[[nodiscard]] inline double first_seed(int column) noexcept { return static_cast<double>(column); }

/// The seed of a later task: the mean of the values it reads, summed in column order (the same
/// order in both versions, so that their results are bit-identical).
template <typename ValueOfColumn>
[[nodiscard]] double stencil_seed(const StencilShape& shape, int column, ValueOfColumn&& value_of) {
  double sum = 0.0;
  const int first = shape.first_dependency(column);
  const int last = shape.last_dependency(column);
  for (int c = first; c <= last; ++c) sum += value_of(c);
  return sum / static_cast<double>(last - first + 1);
}

}  // namespace bellows::bench
