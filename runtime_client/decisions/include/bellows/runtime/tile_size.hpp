#pragma once
// The tile size of a dense factorisation or product, chosen from the machine's measured kernel
// speeds instead of by hand.
//
// A tile size trades kernel speed (bigger tiles run BLAS closer to its peak) and per-task cost
// (fewer, bigger tasks) against parallelism (enough tiles for every core of every rank, a
// short critical path). The model predicts the time of one run of the task graph with tile b,
// T = ceil(N / b) tiles per side, R ranks of w workers (P = R x w cores):
//
//   task(kind)  = flops(kind, b) / speed(kind, b) + overhead + tiles(kind) x 8 b^2 x per_byte
//                 tiles(kind): the tiles the task reads and writes (GEMM 3, TRSM and SYRK 2,
//                 POTRF 1), brought from memory or a peer rather than a warm cache at
//                 per_byte seconds a byte
//   W           = the sum of task(kind) over the graph's tasks               (all the work)
//   imbalance   = ceil(U / R) / (U / R) x max(1, w / ceil(U / R))
//                 U: the tiles whose owner runs the tasks that write them (GEMM: the T x T tiles
//                 of C; Cholesky: the T (T + 1) / 2 tiles of the lower triangle); the busiest
//                 rank holds ceil(U / R) of them, and a rank holding fewer than w leaves workers
//                 idle
//   D           = the critical path (GEMM: one tile of C's chain of T GEMMs; Cholesky: per
//                 panel POTRF -> TRSM -> SYRK, T times)
//   predicted   = W x imbalance / P + D
//
// W / P + D is Brent's bound on a greedy schedule (Graham 1969, Brent 1974); the imbalance
// factor adds what owner-computes over a 2D block-cyclic grid loses to too few tiles per rank.
// It is the trade-off PLASMA's and DPLASMA's NB and SLATE's tile size are tuned for: a tile
// big enough for the kernel, small enough to keep every core busy.
//
// Pure: no MPI, threads, clock or I/O. The examples measure the speeds
// (bellows/examples/tile_auto.hpp).

#include <string>
#include <vector>

namespace bellows::runtime {

/// The shape of the task graph the tile size is for.
enum class TileGraph { gemm, cholesky };

/// What one core was measured to do at one tile size.
struct TileCandidate {
  int tile = 0;              ///< tile order b
  double gemm_gflops = 0.0;  ///< one core's GEMM of b x b tiles, GFLOP/s
  /// One core's POTRF, TRSM and SYRK of b x b tiles, GFLOP/s (Cholesky's panel tasks);
  /// 0: taken to run at gemm_gflops.
  double panel_gflops = 0.0;
};

struct TileProblem {
  TileGraph graph = TileGraph::gemm;
  int n = 0;  ///< matrix order
  int ranks = 1;
  int workers_per_rank = 1;
  double task_overhead_seconds = 0.0;  ///< fixed cost of one task (scheduling, activations)
  /// Seconds to bring one byte of a task's tiles from memory or a peer (1 / the copy
  /// bandwidth); 0: moving tiles is free.
  double seconds_per_tile_byte = 0.0;
  /// Predictions within this fraction of the best count as ties; the smallest tile among them
  /// wins (more parallelism for the same predicted time), whatever the candidates' order.
  double tie_fraction = 0.02;
};

/// One candidate's predicted time and its parts (seconds).
struct TilePrediction {
  int tile = 0;
  double tasks = 0.0;                  ///< tasks in the graph
  double work_seconds = 0.0;           ///< W: every task's kernel time and overhead
  double imbalance = 1.0;              ///< the busiest core's share over the mean
  double critical_path_seconds = 0.0;  ///< D
  double predicted_seconds = 0.0;      ///< W x imbalance / P + D
};

struct TileChoice {
  int tile = 0;
  std::vector<TilePrediction> predictions;  ///< every candidate's, in the order given
};

/// What is wrong with the problem or the candidates ("" when nothing is), naming the field and
/// the candidate: a matrix order, rank or worker count below 1, a negative or non-finite
/// overhead, seconds per byte or tie fraction, no candidate, a tile below 1 or above n, a tile listed twice, a
/// GEMM speed that is not a positive finite number, a negative or non-finite panel speed.
[[nodiscard]] std::string tile_problem_error(const TileProblem& problem,
                                             const std::vector<TileCandidate>& candidates);

/// The model's prediction for one candidate (the problem and candidate valid).
[[nodiscard]] TilePrediction predict_tile_time(const TileProblem& problem,
                                               const TileCandidate& candidate);

/// The candidate with the smallest predicted time (ties: TileProblem::tie_fraction).
/// Throws std::invalid_argument with "tile size: " and tile_problem_error's text on bad input.
[[nodiscard]] TileChoice choose_tile_size(const TileProblem& problem,
                                          const std::vector<TileCandidate>& candidates);

/// The tile sizes worth measuring for a matrix of order n: the multiples of 32 from `smallest`
/// to `largest` (and at most n) that divide n, smallest first; empty when none does.
[[nodiscard]] std::vector<int> tile_size_candidates(int n, int smallest = 64, int largest = 1024);

}  // namespace bellows::runtime
