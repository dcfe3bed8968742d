#include "bspgemm_verify.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "bellows/examples/app.hpp"

namespace bellows::examples {
namespace {

/// Column-major rows x cols matrix of random_entry(seed, i, j) inside nonzero tiles.
template <typename Nonzero>
std::vector<double> dense(int rows, int cols, int tile, unsigned seed, Nonzero nonzero) {
  std::vector<double> out(static_cast<std::size_t>(rows) * cols, 0.0);
  for (long j = 0; j < cols; ++j) {
    for (long i = 0; i < rows; ++i) {
      if (nonzero(static_cast<int>(i / tile), static_cast<int>(j / tile))) {
        out[static_cast<std::size_t>(j * rows + i)] = random_entry(seed, i, j);
      }
    }
  }
  return out;
}

}  // namespace

double bspgemm_max_relative_error(const std::vector<double>& c, const TilePattern& pattern, int m,
                                  int n, int k, int tile, unsigned seed,
                                  const std::vector<int>& inner_widths) {
  auto a = dense(m, k, tile, seed, [&](int ti, int tk) { return pattern.a_nonzero(ti, tk); });
  auto b = dense(k, n, tile, seed + 1, [&](int tk, int tj) { return pattern.b_nonzero(tk, tj); });
  for (std::size_t s = 0; s < inner_widths.size(); ++s) {
    for (long kk = static_cast<long>(s) * tile + inner_widths[s];
         kk < std::min<long>(static_cast<long>(s + 1) * tile, k); ++kk) {
      for (long i = 0; i < m; ++i) a[static_cast<std::size_t>(kk * m + i)] = 0.0;
      for (long j = 0; j < n; ++j) b[static_cast<std::size_t>(j * k + kk)] = 0.0;
    }
  }
  std::vector<double> ref(static_cast<std::size_t>(m) * n);
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a.data(), m, b.data(), k,
              0.0, ref.data(), m);
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(c[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0.0 ? diff / scale : diff;
}

void zero_thin_padding(runtime::TiledMatrix& a, runtime::TiledMatrix& b,
                       const std::vector<int>& inner_widths) {
  if (inner_widths.empty()) return;
  a.for_each_local_tile([&](int, int tk, runtime::Tile& t) {
    for (int j = inner_widths[static_cast<std::size_t>(tk)]; j < t.cols(); ++j) {
      for (int i = 0; i < t.rows(); ++i) t.at(i, j) = 0.0;
    }
  });
  b.for_each_local_tile([&](int tk, int, runtime::Tile& t) {
    for (int j = 0; j < t.cols(); ++j) {
      for (int i = inner_widths[static_cast<std::size_t>(tk)]; i < t.rows(); ++i) t.at(i, j) = 0.0;
    }
  });
}

}  // namespace bellows::examples
