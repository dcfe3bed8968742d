#pragma once
// --tile auto: the tile size and process grid chosen before the first iteration from this
// machine's measured kernel speeds, task overhead and copy bandwidth
// (runtime::choose_tile_size, bellows/runtime/tile_size.hpp).

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/examples/app.hpp"
#include "bellows/examples/task_overhead.hpp"
#include "bellows/runtime/tile_size.hpp"

namespace bellows::examples {

/// Kernel time spent measuring one kernel at one tile size, at most (the first call, a warm-up,
/// not counted; at least 2 timed calls).
inline constexpr double kTileAutoSecondsPerKernel = 0.03;

/// A tile size and grid chosen by measuring. On rank 0 with the speeds it measured and the
/// model's predictions; on the other ranks the tile and grid alone (choice.tile, choice.grid).
struct MeasuredTileChoice {
  runtime::TileChoice choice;
  std::vector<runtime::TileCandidate> speeds;  ///< rank 0's, per candidate size
  std::vector<runtime::BlockCyclic2D> grids;   ///< the grids chosen among
  double copy_gbytes_per_s = 0.0;  ///< rank 0's memory copy bandwidth (the tiles' moves)
  TaskOverheadMeasurement overhead;  ///< rank 0's per-task overhead (measure_task_overhead)
  double measuring_seconds = 0.0;  ///< rank 0's wall time spent measuring, the probe included
};

/// Every rank times its CPU kernels on one core at every size of
/// runtime::tile_size_candidates(options.n), all ranks at once (GEMM; for Cholesky also TRSM,
/// its panel kernel, taken for POTRF and SYRK too), its memory copy bandwidth (what bringing a
/// task's tiles costs, TileProblem::seconds_per_tile_byte) and its per-task overhead
/// (measure_task_overhead at the smallest candidate); rank 0 chooses the tile and, unless
/// options.grid names one, the grid among runtime::process_grid_candidates(ranks) from its own
/// measurements and broadcasts them, so every rank returns the same. Collective over `comm`;
/// `ranks` x options.workers are the job's cores. Needs a candidate dividing options.n
/// (parse_app_options checks it).
[[nodiscard]] MeasuredTileChoice choose_tile_by_measuring(runtime::TileGraph graph,
                                                          const AppOptions& options,
                                                          MPI_Comm comm, int ranks);

/// --tile auto in an example's main: when options.tile_auto, measures and chooses
/// (choose_tile_by_measuring), sets options.tile and options.grid ("PxQ"), and on rank 0
/// prints why (unless quiet). Returns the choice, or nullopt when the tile was given.
std::optional<MeasuredTileChoice> apply_tile_auto(runtime::TileGraph graph, AppOptions& options,
                                                  MPI_Comm comm, int ranks, int rank);

/// One line: "tile auto: 1024 of 64 128 256 512 1024, grid 1x2 of 1x2 2x1 (predicted s, each
/// tile on its best grid: 64 0.912, ...; GEMM GFLOP/s: 64 21.5, ...; copies 20.3 GB/s; task
/// overhead 2.3 us (tile 64: 12.1 us a task, kernel 9.7 us, measured in 0.19 s); measured in
/// 1.56 s)".
[[nodiscard]] std::string describe_tile_choice(const MeasuredTileChoice& measured);

/// The report's "tile_auto": {"chosen", "grid" ("PxQ"), "candidates": [{"tile", "gemm_gflops",
/// "panel_gflops", "predicted_seconds", "grid", "tasks"}] (each tile on its best grid),
/// "predictions": [{"tile", "grid", "predicted_seconds", "imbalance", "communication_seconds"}]
/// (every tile on every grid), "grids", "task_overhead_us", "task_overhead": {"tile",
/// "seconds_per_task_us", "kernel_us", "measuring_seconds"},
/// "copy_gbytes_per_s", "measuring_seconds"}.
[[nodiscard]] nlohmann::json tile_choice_json(const MeasuredTileChoice& measured);

}  // namespace bellows::examples
