#pragma once
// What one task costs besides its kernel, measured on the rank's own worker: the tile-size
// model's per-task overhead (runtime::TileProblem::task_overhead_seconds).

#include "bellows/examples/app.hpp"

namespace bellows::examples {

/// The probe's graphs: GEMM tasks (the class most tasks of GEMM and Cholesky belong to) of
/// kTaskOverheadSmallSide^3 and kTaskOverheadLargeSide^3 tasks. Their difference leaves out
/// what an iteration costs whatever its tasks (barriers, the start of its workers).
inline constexpr int kTaskOverheadSmallSide = 4;
inline constexpr int kTaskOverheadLargeSide = 8;
/// Iterations of each graph, one graph after the other: at least kTaskOverheadMinRuns, more
/// while the graph's iterations so far took less than kTaskOverheadRunSeconds in all, at most
/// kTaskOverheadMaxRuns; the fastest of each graph counts.
inline constexpr int kTaskOverheadMinRuns = 2;
inline constexpr int kTaskOverheadMaxRuns = 10;
inline constexpr double kTaskOverheadRunSeconds = 0.25;

struct TaskOverheadMeasurement {
  int tile = 0;                       ///< the probe's tile order
  double seconds_per_task = 0.0;      ///< a task's share of an iteration, in the engine
  double kernel_seconds = 0.0;        ///< its kernel alone (the measured speed at the tile)
  /// seconds_per_task - kernel_seconds, at least 0. The probe's tiles are small (the
  /// smallest candidate) and few (3 x 64, 6 MiB at tile 64), so they mostly stay in the
  /// caches and this is the engine's part: the model charges the bytes of a task's tiles
  /// apart, at the copy bandwidth.
  double overhead_seconds = 0.0;
  double measuring_seconds = 0.0;     ///< wall time of the whole probe
};

/// Runs GEMM tasks of `tile` through a libbellows runtime of its own on MPI_COMM_SELF (one CPU
/// worker, the options' communication settings, no same-host transport: nothing leaves the
/// rank): the fastest iteration of each of two graph sizes, their difference per task, less the
/// kernel alone (2 tile^3 flops at `gemm_gflops`). Local to the calling rank; about 0.1-0.3 s
/// at tile 64 (at most 2 x kTaskOverheadMaxRuns iterations of at most 512 tasks, and no more
/// once a graph's iterations took kTaskOverheadRunSeconds).
[[nodiscard]] TaskOverheadMeasurement measure_task_overhead(int tile, double gemm_gflops,
                                                            const AppOptions& options);

}  // namespace bellows::examples
