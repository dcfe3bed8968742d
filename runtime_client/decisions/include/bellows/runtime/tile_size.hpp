#pragma once
// The tile size and process grid of a dense factorisation or product, chosen from the
// machine's measured kernel speeds, task overhead and copy bandwidth instead of by hand.
//
// A tile size trades kernel speed (bigger tiles run BLAS closer to its peak) and per-task cost
// (fewer, bigger tasks) against parallelism (enough tiles for every core of every rank, a
// short critical path); a P x Q grid of the R ranks sets how the tiles spread over the ranks
// and how many each rank receives. The model predicts the time of one run of the task graph
// with tile b, T = ceil(N / b) tiles per side, on a P x Q block-cyclic grid of R = P x Q ranks
// of w workers (R x w cores):
//
//   task(kind)  = flops(kind, b) / speed(kind, b) + overhead + tiles(kind) x 8 b^2 x per_byte
//                 tiles(kind): the tiles the task reads and writes (GEMM 3, TRSM and SYRK 2,
//                 POTRF 1), brought from memory or a peer rather than a warm cache at
//                 per_byte seconds a byte
//   W           = the sum of task(kind) over the graph's tasks               (all the work)
//   imbalance   = owned / (U / R) x max(1, w / owned)
//                 U: the tiles whose owner runs the tasks that write them (GEMM: the T x T tiles
//                 of C; Cholesky: the T (T + 1) / 2 tiles of the lower triangle); owned: the
//                 most any rank of the grid holds (tile (m, n) on rank (m mod P, n mod Q)); a
//                 rank holding fewer than w leaves workers idle
//   D           = the critical path (GEMM: one tile of C's chain of T GEMMs; Cholesky: per
//                 panel POTRF -> TRSM -> SYRK, T times)
//   C           = the most bytes any rank receives from its peers x per_byte: each tile a
//                 task reads from another rank's tile is sent once to every rank that reads
//                 it (GEMM: A(i, k) along grid row i mod P, B(k, j) along grid column j mod Q;
//                 Cholesky: POTRF's tile down its grid column, TRSM's L(m, k) along grid row
//                 m mod P and down grid column m mod Q) and copied there once more
//   predicted   = W x imbalance / (R x w) + D + C
//
// W / P + D is Brent's bound on a greedy schedule (Graham 1969, Brent 1974); the imbalance
// factor adds what owner-computes over a 2D block-cyclic grid loses to too few tiles per rank.
// It is the trade-off PLASMA's and DPLASMA's NB and SLATE's tile size are tuned for: a tile
// big enough for the kernel, small enough to keep every core busy. The communication term is
// the per-rank volume of a 2D block-cyclic distribution (ScaLAPACK's PDGEMM and PDPOTRF send
// each panel along process rows and columns; the square grid minimises it).
//
// Pure: no MPI, threads, clock or I/O. The examples measure the speeds, the overhead and the
// copy bandwidth (bellows/examples/tile_auto.hpp).

#include <string>
#include <vector>

#include "bellows/runtime/block_cyclic.hpp"

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
  /// The process grids to choose among, each of `ranks` ranks, most preferred first (ties go
  /// to the earlier); empty: the most square grid alone (BlockCyclic2D::square_for).
  std::vector<BlockCyclic2D> grids;
  /// Predictions within this fraction of the best count as ties; the smallest tile among them
  /// wins (more parallelism for the same predicted time), whatever the candidates' order, and
  /// among its grids the earliest in `grids`.
  double tie_fraction = 0.02;
};

/// One candidate's predicted time on one grid, and its parts (seconds).
struct TilePrediction {
  int tile = 0;
  BlockCyclic2D grid;
  double tasks = 0.0;                  ///< tasks in the graph
  double work_seconds = 0.0;           ///< W: every task's kernel time and overhead
  double imbalance = 1.0;              ///< the busiest core's share over the mean
  double critical_path_seconds = 0.0;  ///< D
  double received_bytes = 0.0;         ///< the most tile bytes a rank receives from its peers
  double communication_seconds = 0.0;  ///< C: received_bytes x seconds_per_tile_byte
  double predicted_seconds = 0.0;      ///< W x imbalance / (R x w) + D + C
};

struct TileChoice {
  int tile = 0;
  BlockCyclic2D grid;
  /// Every candidate's on every grid: candidate by candidate in the order given, each on the
  /// problem's grids in their order.
  std::vector<TilePrediction> predictions;
};

/// What is wrong with the problem or the candidates ("" when nothing is), naming the field and
/// the candidate or grid: a matrix order, rank or worker count below 1, a negative or
/// non-finite overhead, seconds per byte or tie fraction, a grid whose size is not the rank
/// count or that is listed twice, no candidate, a tile below 1 or above n, a tile listed
/// twice, a GEMM speed that is not a positive finite number, a negative or non-finite panel
/// speed.
[[nodiscard]] std::string tile_problem_error(const TileProblem& problem,
                                             const std::vector<TileCandidate>& candidates);

/// The model's prediction for one candidate on one grid of problem.ranks ranks (the problem,
/// candidate and grid valid).
[[nodiscard]] TilePrediction predict_tile_time(const TileProblem& problem,
                                               const TileCandidate& candidate,
                                               const BlockCyclic2D& grid);
/// The same on the problem's first grid (the most square one when it names none).
[[nodiscard]] TilePrediction predict_tile_time(const TileProblem& problem,
                                               const TileCandidate& candidate);

/// The candidate and grid with the smallest predicted time (ties: TileProblem::tie_fraction).
/// Throws std::invalid_argument with "tile size: " and tile_problem_error's text on bad input.
[[nodiscard]] TileChoice choose_tile_size(const TileProblem& problem,
                                          const std::vector<TileCandidate>& candidates);

/// The tile sizes worth measuring for a matrix of order n: the multiples of 32 from `smallest`
/// to `largest` (and at most n) that divide n, smallest first; empty when none does.
[[nodiscard]] std::vector<int> tile_size_candidates(int n, int smallest = 64, int largest = 1024);

/// Every P x Q grid of `ranks` ranks (P x Q = ranks), the most square first, of two equally
/// square ones the one with fewer rows first: 12 -> 3x4, 4x3, 2x6, 6x2, 1x12, 12x1. The
/// first is BlockCyclic2D::square_for(ranks). Empty for ranks below 1.
[[nodiscard]] std::vector<BlockCyclic2D> process_grid_candidates(int ranks);

}  // namespace bellows::runtime
