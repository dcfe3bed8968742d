#include "bellows/runtime/tile_size.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <utility>

namespace bellows::runtime {
namespace {

bool positive_finite(double x) noexcept { return std::isfinite(x) && x > 0.0; }

std::string candidate_name(std::size_t index, const TileCandidate& candidate) {
  return "candidate " + std::to_string(index) + " (tile " + std::to_string(candidate.tile) + ")";
}

/// Seconds of one task of `flops` at `gflops` that reads and writes `tiles` tiles of `tile_bytes`,
/// its overhead included.
double task_seconds(const TileProblem& problem, double flops, double gflops, double tiles,
                    double tile_bytes) noexcept {
  return flops / (gflops * 1e9) + problem.task_overhead_seconds +
         tiles * tile_bytes * problem.seconds_per_tile_byte;
}

std::string grid_name(const BlockCyclic2D& grid) {
  return std::to_string(grid.rows) + "x" + std::to_string(grid.cols);
}

/// The problem's grids: its own, or the most square one for its ranks.
std::vector<BlockCyclic2D> grids_of(const TileProblem& problem) {
  if (!problem.grids.empty()) return problem.grids;
  return {BlockCyclic2D::square_for(problem.ranks)};
}

/// How many of 0, 1, ..., count - 1 are `residue` modulo `modulus`.
long count_with_residue(long count, long modulus, long residue) noexcept {
  return count / modulus + (residue < count % modulus ? 1 : 0);
}

/// The tiles the busiest rank of `grid` owns among the ones whose tasks it runs (GEMM: all
/// T x T; Cholesky: the lower triangle m >= n).
double most_owned_tiles(TileGraph graph, long t, const BlockCyclic2D& grid) {
  const long p = grid.rows, q = grid.cols;
  if (graph == TileGraph::gemm) {
    // Rank (r, c) owns the rows of residue r times the columns of residue c: the first of each
    // hold the most.
    return static_cast<double>(count_with_residue(t, p, 0) * count_with_residue(t, q, 0));
  }
  std::vector<long> owned(static_cast<std::size_t>(p * q), 0);
  for (long m = 0; m < t; ++m) {
    for (long n = 0; n <= m; ++n) ++owned[static_cast<std::size_t>((m % p) * q + n % q)];
  }
  return static_cast<double>(*std::max_element(owned.begin(), owned.end()));
}

/// The most tiles a rank of `grid` receives from its peers in one run of the graph, each tile
/// sent once to every other rank that runs a task reading it.
double most_received_tiles(TileGraph graph, long t, const BlockCyclic2D& grid) {
  const long p = grid.rows, q = grid.cols;
  std::vector<long> received(static_cast<std::size_t>(p * q), 0);
  const auto at = [&](long row, long col) -> long& {
    return received[static_cast<std::size_t>(row * q + col)];
  };
  if (graph == TileGraph::gemm) {
    // A(i, k) lives on (i mod P, k mod Q) and is read by the owners of C(i, j), every j: the
    // ranks of grid row i mod P whose column holds a column of C. B(k, j) likewise down grid
    // column j mod Q.
    for (long r = 0; r < p; ++r) {
      for (long c = 0; c < q; ++c) {
        const long rows = count_with_residue(t, p, r), cols = count_with_residue(t, q, c);
        if (cols > 0) at(r, c) += rows * (t - cols);  // A tiles of its rows held elsewhere
        if (rows > 0) at(r, c) += cols * (t - rows);  // B tiles of its columns held elsewhere
      }
    }
  } else {
    // POTRF(k)'s tile (k, k) goes to TRSM(m, k), m > k: ranks (m mod P, k mod Q). TRSM(m, k)'s
    // L(m, k) goes to SYRK(m, k) and GEMM(m, n, k), k < n < m: ranks (m mod P, n mod Q), and to
    // GEMM(i, m, k), i > m: ranks (i mod P, m mod Q). Each rank once, its owner not.
    std::vector<char> reads(static_cast<std::size_t>(p * q));
    const auto send = [&](long owner) {
      for (std::size_t rank = 0; rank < reads.size(); ++rank) {
        if (reads[rank] && static_cast<long>(rank) != owner) ++received[rank];
      }
    };
    for (long k = 0; k < t; ++k) {
      std::fill(reads.begin(), reads.end(), 0);
      for (long m = k + 1; m < std::min(t, k + 1 + p); ++m) {
        reads[static_cast<std::size_t>((m % p) * q + k % q)] = 1;
      }
      send((k % p) * q + k % q);
      for (long m = k + 1; m < t; ++m) {
        std::fill(reads.begin(), reads.end(), 0);
        for (long n = k + 1; n < std::min(m + 1, k + 1 + q); ++n) {
          reads[static_cast<std::size_t>((m % p) * q + n % q)] = 1;
        }
        for (long i = m + 1; i < std::min(t, m + 1 + p); ++i) {
          reads[static_cast<std::size_t>((i % p) * q + m % q)] = 1;
        }
        send((m % p) * q + k % q);
      }
    }
  }
  return static_cast<double>(*std::max_element(received.begin(), received.end()));
}

}  // namespace

std::string tile_problem_error(const TileProblem& problem,
                               const std::vector<TileCandidate>& candidates) {
  if (problem.n < 1) return "matrix order must be at least 1, got " + std::to_string(problem.n);
  if (problem.ranks < 1) return "ranks must be at least 1, got " + std::to_string(problem.ranks);
  if (problem.workers_per_rank < 1) {
    return "workers per rank must be at least 1, got " + std::to_string(problem.workers_per_rank);
  }
  if (!std::isfinite(problem.task_overhead_seconds) || problem.task_overhead_seconds < 0.0) {
    return "task overhead must be a finite number of seconds of at least 0, got " +
           std::to_string(problem.task_overhead_seconds);
  }
  if (!std::isfinite(problem.seconds_per_tile_byte) || problem.seconds_per_tile_byte < 0.0) {
    return "seconds per tile byte must be a finite number of at least 0, got " +
           std::to_string(problem.seconds_per_tile_byte);
  }
  if (!std::isfinite(problem.tie_fraction) || problem.tie_fraction < 0.0) {
    return "tie fraction must be a finite number of at least 0, got " +
           std::to_string(problem.tie_fraction);
  }
  std::set<std::pair<int, int>> grids;
  for (std::size_t i = 0; i < problem.grids.size(); ++i) {
    const auto& g = problem.grids[i];
    const std::string name = "grid " + std::to_string(i) + " (" + grid_name(g) + ")";
    if (g.rows < 1 || g.cols < 1 || static_cast<long>(g.rows) * g.cols != problem.ranks) {
      return name + ": rows x columns must be the " + std::to_string(problem.ranks) + " ranks";
    }
    if (!grids.insert({g.rows, g.cols}).second) return name + ": grid listed twice";
  }
  if (candidates.empty()) return "no candidate tile size";
  std::set<int> seen;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const auto& c = candidates[i];
    if (c.tile < 1 || c.tile > problem.n) {
      return candidate_name(i, c) + ": tile must be from 1 to the matrix order " +
             std::to_string(problem.n);
    }
    if (!seen.insert(c.tile).second) return candidate_name(i, c) + ": tile listed twice";
    if (!positive_finite(c.gemm_gflops)) {
      return candidate_name(i, c) + ": GEMM speed must be a positive finite GFLOP/s, got " +
             std::to_string(c.gemm_gflops);
    }
    if (!std::isfinite(c.panel_gflops) || c.panel_gflops < 0.0) {
      return candidate_name(i, c) + ": panel speed must be a finite GFLOP/s of at least 0, got " +
             std::to_string(c.panel_gflops);
    }
  }
  return "";
}

TilePrediction predict_tile_time(const TileProblem& problem, const TileCandidate& candidate,
                                 const BlockCyclic2D& grid) {
  const double b = candidate.tile;
  const long tiles_per_side = (problem.n + candidate.tile - 1) / candidate.tile;
  const double t = static_cast<double>(tiles_per_side);
  const double b3 = b * b * b;
  const double bytes = b * b * 8.0;
  const double gemm = task_seconds(problem, 2.0 * b3, candidate.gemm_gflops, 3.0, bytes);
  TilePrediction p;
  p.tile = candidate.tile;
  p.grid = grid;
  double owned_tiles = 0.0;
  if (problem.graph == TileGraph::gemm) {
    p.tasks = t * t * t;
    p.work_seconds = p.tasks * gemm;
    owned_tiles = t * t;
    p.critical_path_seconds = t * gemm;
  } else {
    const double panel_gflops =
        candidate.panel_gflops > 0.0 ? candidate.panel_gflops : candidate.gemm_gflops;
    const double potrf = task_seconds(problem, b3 / 3.0, panel_gflops, 1.0, bytes);
    const double trsm = task_seconds(problem, b3, panel_gflops, 2.0, bytes);
    const double syrk = task_seconds(problem, b3, panel_gflops, 2.0, bytes);
    const double below = t * (t - 1.0) / 2.0;                 // TRSMs, and SYRKs
    const double updates = t * (t - 1.0) * (t - 2.0) / 6.0;   // GEMMs
    p.tasks = t + 2.0 * below + updates;
    p.work_seconds = t * potrf + below * (trsm + syrk) + updates * gemm;
    owned_tiles = t * (t + 1.0) / 2.0;
    p.critical_path_seconds = t * potrf + (t - 1.0) * (trsm + syrk);
  }
  const double ranks = problem.ranks, workers = problem.workers_per_rank;
  const double busiest_rank_tiles = most_owned_tiles(problem.graph, tiles_per_side, grid);
  p.imbalance = busiest_rank_tiles / (owned_tiles / ranks) *
                std::max(1.0, workers / busiest_rank_tiles);
  p.received_bytes = most_received_tiles(problem.graph, tiles_per_side, grid) * bytes;
  p.communication_seconds = p.received_bytes * problem.seconds_per_tile_byte;
  p.predicted_seconds = p.work_seconds * p.imbalance / (ranks * workers) +
                        p.critical_path_seconds + p.communication_seconds;
  return p;
}

TilePrediction predict_tile_time(const TileProblem& problem, const TileCandidate& candidate) {
  return predict_tile_time(problem, candidate, grids_of(problem).front());
}

TileChoice choose_tile_size(const TileProblem& problem,
                            const std::vector<TileCandidate>& candidates) {
  if (const auto error = tile_problem_error(problem, candidates); !error.empty()) {
    throw std::invalid_argument("tile size: " + error);
  }
  const auto grids = grids_of(problem);
  TileChoice choice;
  double best = INFINITY;
  for (const auto& c : candidates) {
    for (const auto& grid : grids) {
      choice.predictions.push_back(predict_tile_time(problem, c, grid));
      best = std::min(best, choice.predictions.back().predicted_seconds);
    }
  }
  // Within the tie margin: the smallest tile, and of its grids the first in the problem's order
  // (the predictions hold them in that order, so the first found of a tile stays).
  const double within = best * (1.0 + problem.tie_fraction);
  for (const auto& p : choice.predictions) {
    if (p.predicted_seconds <= within && (choice.tile == 0 || p.tile < choice.tile)) {
      choice.tile = p.tile;
      choice.grid = p.grid;
    }
  }
  return choice;
}

std::vector<int> tile_size_candidates(int n, int smallest, int largest) {
  std::vector<int> sizes;
  const int first = std::max(32, (smallest + 31) / 32 * 32);
  for (int b = first; b <= std::min(largest, n); b += 32) {
    if (n % b == 0) sizes.push_back(b);
  }
  return sizes;
}

std::vector<BlockCyclic2D> process_grid_candidates(int ranks) {
  std::vector<BlockCyclic2D> grids;
  for (int rows = 1; rows <= ranks; ++rows) {
    if (ranks % rows == 0) grids.push_back(BlockCyclic2D{rows, ranks / rows});
  }
  std::stable_sort(grids.begin(), grids.end(), [](const BlockCyclic2D& a, const BlockCyclic2D& b) {
    return std::abs(a.rows - a.cols) < std::abs(b.rows - b.cols);
  });
  return grids;
}

}  // namespace bellows::runtime
