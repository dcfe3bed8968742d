#include "bellows/runtime/tile_size.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>

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

TilePrediction predict_tile_time(const TileProblem& problem, const TileCandidate& candidate) {
  const double b = candidate.tile;
  const double t = std::ceil(static_cast<double>(problem.n) / b);  // tiles per side
  const double b3 = b * b * b;
  const double bytes = b * b * 8.0;
  const double gemm = task_seconds(problem, 2.0 * b3, candidate.gemm_gflops, 3.0, bytes);
  TilePrediction p;
  p.tile = candidate.tile;
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
  const double busiest_rank_tiles = std::ceil(owned_tiles / ranks);
  p.imbalance = busiest_rank_tiles / (owned_tiles / ranks) *
                std::max(1.0, workers / busiest_rank_tiles);
  p.predicted_seconds = p.work_seconds * p.imbalance / (ranks * workers) + p.critical_path_seconds;
  return p;
}

TileChoice choose_tile_size(const TileProblem& problem,
                            const std::vector<TileCandidate>& candidates) {
  if (const auto error = tile_problem_error(problem, candidates); !error.empty()) {
    throw std::invalid_argument("tile size: " + error);
  }
  TileChoice choice;
  double best = INFINITY;
  for (const auto& c : candidates) {
    choice.predictions.push_back(predict_tile_time(problem, c));
    best = std::min(best, choice.predictions.back().predicted_seconds);
  }
  const double within = best * (1.0 + problem.tie_fraction);
  for (const auto& p : choice.predictions) {
    if (p.predicted_seconds <= within && (choice.tile == 0 || p.tile < choice.tile)) {
      choice.tile = p.tile;
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

}  // namespace bellows::runtime
