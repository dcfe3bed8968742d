// The block-sparse GEMM's tile patterns and task graph, checked without MPI: patterns
// are reproducible from their seed, hit the density asked for, the skewed one is
// skewed and the banded one stays in its band; chains of tasks are consistent on both
// ends and the modeled work adds up.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bspgemm_tasks.hpp"
#include "ptg_check.hpp"

namespace br = bellows::runtime;
namespace be = bellows::examples;
using be::SparsityPattern;
using be::TilePattern;

namespace {

constexpr SparsityPattern kAllPatterns[] = {SparsityPattern::random, SparsityPattern::banded,
                                            SparsityPattern::skewed};

bool same_tiles(const TilePattern& x, const TilePattern& y) {
  for (int i = 0; i < x.mt(); ++i) {
    for (int k = 0; k < x.kt(); ++k) {
      if (x.a_nonzero(i, k) != y.a_nonzero(i, k)) return false;
    }
  }
  for (int k = 0; k < x.kt(); ++k) {
    for (int j = 0; j < x.nt(); ++j) {
      if (x.b_nonzero(k, j) != y.b_nonzero(k, j)) return false;
    }
  }
  return true;
}

/// Nonzero tiles per row of A and per column of B.
std::vector<int> a_row_counts(const TilePattern& p) {
  std::vector<int> out(static_cast<std::size_t>(p.mt()), 0);
  for (int i = 0; i < p.mt(); ++i) {
    for (int k = 0; k < p.kt(); ++k) out[static_cast<std::size_t>(i)] += p.a_nonzero(i, k);
  }
  return out;
}
std::vector<int> b_col_counts(const TilePattern& p) {
  std::vector<int> out(static_cast<std::size_t>(p.nt()), 0);
  for (int k = 0; k < p.kt(); ++k) {
    for (int j = 0; j < p.nt(); ++j) out[static_cast<std::size_t>(j)] += p.b_nonzero(k, j);
  }
  return out;
}

double max_over_mean(const std::vector<int>& v) {
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  return *std::max_element(v.begin(), v.end()) / mean;
}

/// The documented distance of tile (r, c) to the diagonal of an R x C tile grid.
std::int64_t diagonal_distance(int r, int c, int rows, int cols) {
  return std::llabs((2LL * r + 1) * cols - (2LL * c + 1) * rows);
}

/// Matrices and task class over one pattern, on rank 0 of a grid (only shapes and
/// owners matter here: no tile is touched).
struct Graph {
  TilePattern pattern;
  br::TiledMatrix a, b, c;
  be::BspgemmTasks tasks;
  Graph(int m, int n, int k, int tile, br::BlockCyclic2D grid, SparsityPattern kind,
        double density, unsigned seed)
      : pattern((m + tile - 1) / tile, (k + tile - 1) / tile, (n + tile - 1) / tile, kind, density,
                seed),
        a(0, m, k, tile, grid, 0, [this](int i, int kk) { return pattern.a_nonzero(i, kk); }),
        b(1, k, n, tile, grid, 0, [this](int kk, int j) { return pattern.b_nonzero(kk, j); }),
        c(2, m, n, tile, grid, 0, [this](int i, int j) { return pattern.c_nonzero(i, j); }),
        tasks(0, pattern, a, b, c) {}
};

}  // namespace

TEST(TilePattern, ParsesItsNames) {
  for (auto kind : kAllPatterns) {
    SparsityPattern parsed = SparsityPattern::random;
    EXPECT_TRUE(be::parse_sparsity_pattern(be::to_string(kind), parsed));
    EXPECT_EQ(parsed, kind);
  }
  SparsityPattern untouched = SparsityPattern::banded;
  EXPECT_FALSE(be::parse_sparsity_pattern("diagonal", untouched));
  EXPECT_FALSE(be::parse_sparsity_pattern("", untouched));
  EXPECT_EQ(untouched, SparsityPattern::banded);
}

TEST(TilePattern, RefusesBadArguments) {
  EXPECT_THROW(TilePattern(4, 4, 4, SparsityPattern::random, 0.0, 1), std::invalid_argument);
  EXPECT_THROW(TilePattern(4, 4, 4, SparsityPattern::random, 1.5, 1), std::invalid_argument);
  EXPECT_THROW(TilePattern(0, 4, 4, SparsityPattern::random, 0.5, 1), std::invalid_argument);
}

TEST(TilePattern, SameSeedSamePattern) {
  for (auto kind : kAllPatterns) {
    const TilePattern x(30, 20, 25, kind, 0.4, 7), y(30, 20, 25, kind, 0.4, 7);
    EXPECT_TRUE(same_tiles(x, y)) << be::to_string(kind);
    EXPECT_EQ(x.products(), y.products()) << be::to_string(kind);
  }
  // The seed matters (for banded only where ties are broken, so not asserted there).
  for (auto kind : {SparsityPattern::random, SparsityPattern::skewed}) {
    const TilePattern x(30, 20, 25, kind, 0.4, 7), y(30, 20, 25, kind, 0.4, 8);
    EXPECT_FALSE(same_tiles(x, y)) << be::to_string(kind);
  }
}

TEST(TilePattern, DensityIsMetOnALargeGrid) {
  for (auto kind : kAllPatterns) {
    for (double density : {0.1, 0.5, 0.9}) {
      const TilePattern p(200, 150, 180, kind, density, 3);
      const double a = static_cast<double>(p.a_nonzeros()) / (200.0 * 150.0);
      const double b = static_cast<double>(p.b_nonzeros()) / (150.0 * 180.0);
      EXPECT_NEAR(a, density, 0.02) << be::to_string(kind) << " A, density " << density;
      EXPECT_NEAR(b, density, 0.02) << be::to_string(kind) << " B, density " << density;
    }
  }
}

TEST(TilePattern, DensityOneFillsEverything) {
  for (auto kind : kAllPatterns) {
    const TilePattern p(6, 5, 4, kind, 1.0, 11);
    EXPECT_EQ(p.a_nonzeros(), 30U) << be::to_string(kind);
    EXPECT_EQ(p.b_nonzeros(), 20U) << be::to_string(kind);
    EXPECT_EQ(p.products(), 6U * 4U * 5U) << be::to_string(kind);
  }
}

TEST(TilePattern, SkewedHasAFewHeavyRowsAndColumns) {
  const TilePattern p(400, 400, 400, SparsityPattern::skewed, 0.1, 5);
  const auto rows = a_row_counts(p);
  const auto cols = b_col_counts(p);
  EXPECT_GE(max_over_mean(rows), 5.0);
  EXPECT_GE(max_over_mean(cols), 5.0);
  // The random pattern of the same density is not.
  const TilePattern flat(400, 400, 400, SparsityPattern::random, 0.1, 5);
  EXPECT_LT(max_over_mean(a_row_counts(flat)), 1.6);
  EXPECT_LT(max_over_mean(b_col_counts(flat)), 1.6);
}

TEST(TilePattern, SkewedHeavyRowsAreSpreadBySeed) {
  // A seeded permutation places the heavy rows: not simply the first ones, and not the
  // same ones for another seed.
  const auto heavy_rows = [](unsigned seed) {
    const TilePattern p(400, 400, 400, SparsityPattern::skewed, 0.1, seed);
    const auto rows = a_row_counts(p);
    const double mean = std::accumulate(rows.begin(), rows.end(), 0.0) / 400.0;
    std::vector<int> heavy;
    for (int r = 0; r < 400; ++r) {
      if (rows[static_cast<std::size_t>(r)] > 3.0 * mean) heavy.push_back(r);
    }
    return heavy;
  };
  const auto five = heavy_rows(5), six = heavy_rows(6);
  ASSERT_FALSE(five.empty());
  std::vector<int> top(five.size());
  std::iota(top.begin(), top.end(), 0);
  EXPECT_NE(five, top);
  EXPECT_NE(five, six);
}

TEST(TilePattern, BandedStaysInItsBand) {
  for (const auto& [mt, kt, nt] : {std::tuple{40, 40, 40}, std::tuple{30, 50, 20}}) {
    for (double density : {0.05, 0.3, 0.7}) {
      const TilePattern p(mt, kt, nt, SparsityPattern::banded, density, 9);
      const auto check = [&](const char* name, int rows, int cols, std::int64_t band,
                             auto nonzero) {
        for (int r = 0; r < rows; ++r) {
          for (int c = 0; c < cols; ++c) {
            const auto d = diagonal_distance(r, c, rows, cols);
            if (nonzero(r, c)) {
              EXPECT_LE(d, band) << name << "(" << r << "," << c << ") outside the band";
            } else {
              EXPECT_GE(d, band) << name << "(" << r << "," << c << ") missing inside the band";
            }
          }
        }
      };
      check("A", mt, kt, p.a_band_width(), [&](int r, int c) { return p.a_nonzero(r, c); });
      check("B", kt, nt, p.b_band_width(), [&](int r, int c) { return p.b_nonzero(r, c); });
      // On a square grid the diagonal itself (distance 0) is always there.
      if (mt == kt) {
        for (int i = 0; i < mt; ++i) EXPECT_TRUE(p.a_nonzero(i, i)) << "A(" << i << "," << i << ")";
      }
    }
  }
}

TEST(TilePattern, ProductListsAreTheNonzeroPairs) {
  const TilePattern p(9, 11, 7, SparsityPattern::random, 0.45, 21);
  std::size_t total = 0;
  for (int i = 0; i < p.mt(); ++i) {
    for (int j = 0; j < p.nt(); ++j) {
      std::vector<std::int32_t> expected;
      for (int k = 0; k < p.kt(); ++k) {
        if (p.a_nonzero(i, k) && p.b_nonzero(k, j)) expected.push_back(k);
        const int pos = p.position(i, j, k);
        if (p.a_nonzero(i, k) && p.b_nonzero(k, j)) {
          EXPECT_EQ(pos, static_cast<int>(expected.size()) - 1);
        } else {
          EXPECT_EQ(pos, -1);
        }
      }
      const auto ks = p.ks(i, j);
      EXPECT_EQ(std::vector<std::int32_t>(ks.begin(), ks.end()), expected);
      EXPECT_EQ(p.c_nonzero(i, j), !expected.empty());
      total += expected.size();
    }
  }
  EXPECT_EQ(p.products(), total);
}

TEST(BspgemmPtg, ChainsAreConsistentOnBothEnds) {
  for (auto kind : kAllPatterns) {
    // 2x2 grid, uneven last tiles (450 = 4 * 100 + 50, 330 = 3 * 100 + 30).
    Graph s(450, 330, 450, 100, br::BlockCyclic2D{2, 2}, kind, 0.5, 4);
    const auto r = bellows::testing::check_ptg({&s.tasks}, 4);
    std::string errors;
    for (std::size_t e = 0; e < r.errors.size() && e < 5; ++e) errors += r.errors[e] + "\n";
    EXPECT_TRUE(r.errors.empty()) << be::to_string(kind) << ":\n" << errors;
    EXPECT_EQ(r.total_tasks, s.pattern.products());
    EXPECT_EQ(r.topologically_ordered, r.total_tasks);
    EXPECT_TRUE(r.moving_read_write_flows.empty());

    // One write-back per C tile that receives a product, none elsewhere.
    std::size_t nonzero_c = 0;
    for (int i = 0; i < s.pattern.mt(); ++i) {
      for (int j = 0; j < s.pattern.nt(); ++j) {
        const auto it = r.write_backs.find({2, i, j});
        const int writes = it == r.write_backs.end() ? 0 : it->second;
        EXPECT_EQ(writes, s.pattern.c_nonzero(i, j) ? 1 : 0) << "C(" << i << "," << j << ")";
        nonzero_c += s.pattern.c_nonzero(i, j);
      }
    }
    EXPECT_EQ(r.write_backs.size(), nonzero_c);

    // The first task of a chain starts from scratch, the others from the previous k.
    s.tasks.for_each_task([&](const br::TaskKey& key) {
      const auto [i, j, k] = key.index;
      std::vector<br::InputSource> in;
      s.tasks.inputs(key, in);
      ASSERT_EQ(in.size(), 3U);
      EXPECT_EQ(in[0].tile, s.a.index(i, k));
      EXPECT_EQ(in[1].tile, s.b.index(k, j));
      EXPECT_TRUE(s.a.kept(i, k));
      EXPECT_TRUE(s.b.kept(k, j));
      const auto ks = s.pattern.ks(i, j);
      if (k == ks.front()) {
        EXPECT_EQ(in[2].kind, br::InputSource::Kind::scratch);
        EXPECT_EQ(r.predecessor_inputs.at(key), 0);
      } else {
        ASSERT_EQ(in[2].kind, br::InputSource::Kind::task);
        EXPECT_LT(in[2].producer.index[2], k);
        EXPECT_EQ(in[2].producer.index[0], i);
        EXPECT_EQ(in[2].producer.index[1], j);
      }
      EXPECT_EQ(r.owner.at(key), s.c.owner(i, j));
      EXPECT_DOUBLE_EQ(s.tasks.flops(key), 2.0 * s.c.rows_of_tile(i) * s.c.cols_of_tile(j) *
                                               s.a.cols_of_tile(k));
    });
  }
}

TEST(BspgemmPtg, FullDensityIsTheDenseGraph) {
  Graph s(300, 300, 300, 64, br::BlockCyclic2D{1, 2}, SparsityPattern::random, 1.0, 42);
  const auto r = bellows::testing::check_ptg({&s.tasks}, 2);
  EXPECT_TRUE(r.errors.empty());
  EXPECT_EQ(r.tasks_per_class.at("BSPGEMM"), 125U);
  EXPECT_DOUBLE_EQ(s.tasks.total_flops(), 2.0 * 300 * 300 * 300);
}

TEST(BspgemmPtg, RefusesAPatternTheMatricesDoNotKeep) {
  const TilePattern p(3, 3, 3, SparsityPattern::random, 1.0, 1);
  const br::BlockCyclic2D grid{1, 1};
  const br::TiledMatrix a(0, 30, 30, 10, grid, 0, [](int i, int k) { return i != k; });
  const br::TiledMatrix b(1, 30, 30, 10, grid, 0), c(2, 30, 30, 10, grid, 0);
  EXPECT_THROW(be::BspgemmTasks(0, p, a, b, c), std::invalid_argument);
  const TilePattern wrong_shape(4, 3, 3, SparsityPattern::random, 1.0, 1);
  EXPECT_THROW(be::BspgemmTasks(0, wrong_shape, b, b, c), std::invalid_argument);
}

TEST(BspgemmModel, WorkBoundsAddUp) {
  Graph s(640, 640, 640, 64, br::BlockCyclic2D{2, 2}, SparsityPattern::skewed, 0.5, 42);
  const double gflops = 4.0;
  const auto one = s.tasks.modeled_work(4, gflops, 1);
  EXPECT_NEAR(one.work_seconds, s.tasks.total_flops() / (gflops * 1e9), 1e-12);
  EXPECT_GT(one.critical_path_seconds, 0.0);
  EXPECT_LE(one.critical_path_seconds, one.work_seconds);
  EXPECT_DOUBLE_EQ(one.balanced_bound_seconds,
                   std::max(one.work_seconds / 4.0, one.critical_path_seconds));
  EXPECT_GE(one.max_rank_work_seconds, one.work_seconds / 4.0);
  EXPECT_GE(one.max_rank_work_seconds, one.critical_path_seconds);

  // The longest chain, recomputed: tasks of one C tile times their modeled seconds.
  double longest = 0.0;
  for (int i = 0; i < s.pattern.mt(); ++i) {
    for (int j = 0; j < s.pattern.nt(); ++j) {
      longest = std::max(longest, 2.0 * 64 * 64 * 64 * static_cast<double>(s.pattern.ks(i, j).size()) /
                                      (gflops * 1e9));
    }
  }
  EXPECT_NEAR(one.critical_path_seconds, longest, 1e-12);

  // Two lanes halve the per-rank figures but not the chain.
  const auto two = s.tasks.modeled_work(4, gflops, 2);
  EXPECT_DOUBLE_EQ(two.work_seconds, one.work_seconds);
  EXPECT_DOUBLE_EQ(two.critical_path_seconds, one.critical_path_seconds);
  EXPECT_DOUBLE_EQ(two.max_rank_work_seconds, one.max_rank_work_seconds / 2.0);
  EXPECT_THROW((void)s.tasks.modeled_work(0, gflops, 1), std::invalid_argument);
}
