// The job the recovery tests' members run, as a run without failure computes it
// (recovery_references.hpp).

#include "recovery_references.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "bellows/examples/app.hpp"
#include "bellows/kernels/tile_kernels.hpp"

namespace bellows::testing::recovery {

namespace br = bellows::runtime;
namespace be = bellows::examples;

const be::TilePattern& bspgemm_pattern() {
  static const be::TilePattern pattern(kN / kTile, kN / kTile, kN / kTile, be::SparsityPattern::skewed,
                                       kBspgemmDensity, kSeed);
  return pattern;
}

namespace {

/// What the application does to A after iteration `iteration` (counted from 0): a new tile
/// per local tile, every element a * 0.75 + 0.125 * (iteration + 1); for the Cholesky job
/// a * 0.99 + 0.001 (0.99 A plus a multiple of the all-ones matrix stays positive definite).
double evolved(double a, int iteration, Job job) {
  return job == Job::cholesky ? a * 0.99 + 0.001 : a * 0.75 + 0.125 * (iteration + 1);
}

}  // namespace

void evolve(br::TiledMatrix& a, int iteration, Job job) {
  std::vector<std::pair<int, int>> local;
  a.for_each_local_tile([&](int m, int n, br::Tile&) { local.emplace_back(m, n); });
  for (const auto& [m, n] : local) {
    const br::Tile& old = *a.tile(m, n);
    auto t = std::make_shared<br::Tile>(old.rows(), old.cols());
    for (std::size_t e = 0; e < old.elements(); ++e) t->data()[e] = evolved(old.data()[e], iteration, job);
    a.set_tile(m, n, std::move(t));
  }
}

namespace {

std::shared_ptr<br::Tile> clone(const br::Tile& t) {
  auto copy = std::make_shared<br::Tile>(t.rows(), t.cols());
  std::copy(t.data(), t.data() + t.elements(), copy->data());
  return copy;
}

}  // namespace

/// A and L as a job without failure computes them: per iteration the tiled right-looking
/// factorization by the kernels of the Cholesky tasks, each tile updated in k order.
std::pair<std::vector<double>, std::vector<double>> cholesky_reference(int iterations, int order, int tile,
                                                                       unsigned seed) {
  const auto lower = [](int m, int k) { return m >= k; };
  br::TiledMatrix a(0, order, order, tile, br::BlockCyclic2D::square_for(1), 0, lower);
  br::TiledMatrix l(1, order, order, tile, br::BlockCyclic2D::square_for(1), 0, lower);
  be::fill_spd(a, seed);
  const int tiles = order / tile;
  for (int it = 0; it < iterations; ++it) {
    std::vector<std::vector<std::shared_ptr<br::Tile>>> w(static_cast<std::size_t>(tiles));
    for (int m = 0; m < tiles; ++m) {
      for (int n = 0; n <= m; ++n) w[static_cast<std::size_t>(m)].push_back(clone(*a.tile(m, n)));
    }
    const auto at = [&](int m, int n) -> br::Tile& { return *w[static_cast<std::size_t>(m)][static_cast<std::size_t>(n)]; };
    for (int k = 0; k < tiles; ++k) {
      bellows::kernels::potrf_lower(at(k, k));
      for (int m = k + 1; m < tiles; ++m) bellows::kernels::trsm_right_lower_trans(at(k, k), at(m, k));
      for (int m = k + 1; m < tiles; ++m) {
        bellows::kernels::syrk_lower_minus(at(m, k), at(m, m));
        for (int n = k + 1; n < m; ++n) bellows::kernels::gemm_nt_minus(at(m, k), at(n, k), at(m, n));
      }
    }
    for (int m = 0; m < tiles; ++m) {
      for (int n = 0; n <= m; ++n) l.set_tile(m, n, w[static_cast<std::size_t>(m)][static_cast<std::size_t>(n)]);
    }
    evolve(a, it, Job::cholesky);
  }
  return {a.gather_to_root(MPI_COMM_SELF), l.gather_to_root(MPI_COMM_SELF)};
}

namespace {

/// A and C of the bspgemm job as a run without failure computes them: each nonzero C tile
/// summed over its nonzero k's in increasing order, the first product with beta = 0, the
/// bspgemm tasks' kernel call.
std::pair<std::vector<double>, std::vector<double>> bspgemm_reference() {
  const be::TilePattern& pattern = bspgemm_pattern();
  const auto one_rank = br::BlockCyclic2D::square_for(1);
  br::TiledMatrix a(0, kN, kN, kTile, one_rank, 0, [&](int i, int k) { return pattern.a_nonzero(i, k); });
  br::TiledMatrix b(1, kN, kN, kTile, one_rank, 0, [&](int k, int j) { return pattern.b_nonzero(k, j); });
  br::TiledMatrix c(2, kN, kN, kTile, one_rank, 0, [&](int i, int j) { return pattern.c_nonzero(i, j); });
  be::fill_random(a, kSeed);
  be::fill_random(b, kSeed + 1);
  for (int it = 0; it < kIterations; ++it) {
    for (int i = 0; i < pattern.mt(); ++i) {
      for (int j = 0; j < pattern.nt(); ++j) {
        if (!pattern.c_nonzero(i, j)) continue;
        auto result = std::make_shared<br::Tile>(kTile, kTile);
        const auto ks = pattern.ks(i, j);
        for (const auto k : ks) {
          bellows::kernels::gemm_nn(*a.tile(i, k), *b.tile(k, j), k == ks.front() ? 0.0 : 1.0, *result);
        }
        c.set_tile(i, j, std::move(result));
      }
    }
    evolve(a, it, Job::bspgemm);
  }
  return {a.gather_to_root(MPI_COMM_SELF), c.gather_to_root(MPI_COMM_SELF)};
}

}  // namespace

/// The GEMM job: the same tile kernels in the same order (each C tile summed over k from 0).
std::pair<std::vector<double>, std::vector<double>> reference(Job job) {
  if (job == Job::cholesky) return cholesky_reference(kIterations);
  if (job == Job::bspgemm) return bspgemm_reference();
  br::TiledMatrix a(0, kN, kN, kTile, br::BlockCyclic2D::square_for(1), 0);
  br::TiledMatrix b(1, kN, kN, kTile, br::BlockCyclic2D::square_for(1), 0);
  br::TiledMatrix c(2, kN, kN, kTile, br::BlockCyclic2D::square_for(1), 0);
  be::fill_random(a, kSeed);
  be::fill_random(b, kSeed + 1);
  const int tiles = kN / kTile;
  for (int it = 0; it < kIterations; ++it) {
    for (int j = 0; j < tiles; ++j) {
      for (int i = 0; i < tiles; ++i) {
        auto result = std::make_shared<br::Tile>(kTile, kTile);
        for (int k = 0; k < tiles; ++k) {
          bellows::kernels::gemm_nn(*a.tile(i, k), *b.tile(k, j), k == 0 ? 0.0 : 1.0, *result);
        }
        c.set_tile(i, j, std::move(result));
      }
    }
    evolve(a, it, Job::gemm);
  }
  return {a.gather_to_root(MPI_COMM_SELF), c.gather_to_root(MPI_COMM_SELF)};
}

std::size_t differing(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) return std::max(x.size(), y.size());
  std::size_t count = 0;
  for (std::size_t i = 0; i < x.size(); ++i) count += std::memcmp(&x[i], &y[i], sizeof(double)) != 0 ? 1 : 0;
  return count;
}

bool names_phase_and_ranks(const std::string& text) {
  const bool phase = text.rfind("agree_on_lost:", 0) == 0 || text.rfind("rebuild_without:", 0) == 0 ||
                     text.rfind("recover:", 0) == 0;
  return phase && text.find("rank") != std::string::npos && text.find('{') != std::string::npos;
}

}  // namespace bellows::testing::recovery
