#include "bellows/examples/verify.hpp"

#include <cblas.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "bellows/examples/app.hpp"

namespace bellows::examples {

double gemm_max_relative_error(const std::vector<double>& c, int m, int n, int k, unsigned seed) {
  std::vector<double> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n),
      ref(static_cast<std::size_t>(m) * n);
  for (long j = 0; j < k; ++j) {
    for (long i = 0; i < m; ++i) a[static_cast<std::size_t>(j * m + i)] = random_entry(seed, i, j);
  }
  for (long j = 0; j < n; ++j) {
    for (long i = 0; i < k; ++i) b[static_cast<std::size_t>(j * k + i)] = random_entry(seed + 1, i, j);
  }
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a.data(), m, b.data(), k,
              0.0, ref.data(), m);
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(c[i] - ref[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return scale > 0.0 ? diff / scale : diff;
}

double cholesky_scaled_residual(const std::vector<double>& l, int n, unsigned seed) {
  std::vector<double> r(static_cast<std::size_t>(n) * n, 0.0);
  double norm_a = 0.0;
  for (long j = 0; j < n; ++j) {
    for (long i = j; i < n; ++i) {
      const double v = spd_entry(seed, n, i, j);
      r[static_cast<std::size_t>(j * n + i)] = v;
      norm_a += (i == j ? 1.0 : 2.0) * v * v;
    }
  }
  cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, n, n, -1.0, l.data(), n, 1.0, r.data(), n);
  double norm_r = 0.0;
  for (long j = 0; j < n; ++j) {
    for (long i = j; i < n; ++i) {
      const double v = r[static_cast<std::size_t>(j * n + i)];
      norm_r += (i == j ? 1.0 : 2.0) * v * v;
    }
  }
  return std::sqrt(norm_r) / (std::sqrt(norm_a) * n * DBL_EPSILON);
}

}  // namespace bellows::examples
