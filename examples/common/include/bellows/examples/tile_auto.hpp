#pragma once
// --tile auto: the tile size chosen before the first iteration from this machine's measured
// kernel speeds (runtime::choose_tile_size, bellows/runtime/tile_size.hpp).

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/tile_size.hpp"

namespace bellows::examples {

/// What one task is taken to cost besides its kernel (scheduling, activations, the tile
/// transfers of a task between ranks of one host), in the tile-size model. Not measured.
inline constexpr double kTileAutoTaskOverheadSeconds = 20e-6;

/// Kernel time spent measuring one kernel at one tile size, at most (the first call, a warm-up,
/// not counted; at least 2 timed calls).
inline constexpr double kTileAutoSecondsPerKernel = 0.03;

/// A tile size chosen by measuring. On rank 0 with the speeds it measured and the model's
/// predictions; on the other ranks the tile alone (choice.tile).
struct MeasuredTileChoice {
  runtime::TileChoice choice;
  std::vector<runtime::TileCandidate> speeds;  ///< rank 0's, per candidate size
  double copy_gbytes_per_s = 0.0;  ///< rank 0's memory copy bandwidth (the tiles' moves)
  double measuring_seconds = 0.0;  ///< rank 0's wall time spent measuring
};

/// Every rank times its CPU kernels on one core at every size of
/// runtime::tile_size_candidates(options.n), all ranks at once (GEMM; for Cholesky also TRSM,
/// its panel kernel, taken for POTRF and SYRK too) and its memory copy bandwidth (what bringing a task's tiles
/// costs, TileProblem::seconds_per_tile_byte); rank 0 chooses from its own speeds and broadcasts the tile,
/// so every rank returns the same. Collective over `comm`; `ranks` x options.workers are the
/// job's cores. Needs a candidate dividing options.n (parse_app_options checks it).
[[nodiscard]] MeasuredTileChoice choose_tile_by_measuring(runtime::TileGraph graph,
                                                          const AppOptions& options,
                                                          MPI_Comm comm, int ranks);

/// --tile auto in an example's main: when options.tile_auto, measures and chooses
/// (choose_tile_by_measuring), sets options.tile, and on rank 0 prints why (unless quiet).
/// Returns the choice, or nullopt when the tile was given.
std::optional<MeasuredTileChoice> apply_tile_auto(runtime::TileGraph graph, AppOptions& options,
                                                  MPI_Comm comm, int ranks, int rank);

/// One line: "tile auto: 1024 of 64 128 256 512 1024 (predicted s: 64 0.912, ...; GEMM GFLOP/s:
/// 64 21.5, ...; measured in 0.41 s)".
[[nodiscard]] std::string describe_tile_choice(const MeasuredTileChoice& measured);

/// The report's "tile_auto": {"chosen", "candidates": [{"tile", "gemm_gflops", "panel_gflops",
/// "predicted_seconds", "tasks"}], "task_overhead_us", "copy_gbytes_per_s", "measuring_seconds"}.
[[nodiscard]] nlohmann::json tile_choice_json(const MeasuredTileChoice& measured);

}  // namespace bellows::examples
