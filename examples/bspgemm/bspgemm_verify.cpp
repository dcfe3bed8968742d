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
                                  int n, int k, int tile, unsigned seed) {
  const auto a = dense(m, k, tile, seed, [&](int ti, int tk) { return pattern.a_nonzero(ti, tk); });
  const auto b =
      dense(k, n, tile, seed + 1, [&](int tk, int tj) { return pattern.b_nonzero(tk, tj); });
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

}  // namespace bellows::examples
