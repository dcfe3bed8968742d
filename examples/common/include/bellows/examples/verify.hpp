#pragma once
// Checks of the examples' results against OpenBLAS/LAPACK, on whole matrices gathered to
// one rank. Inputs are rebuilt from their generators (app.hpp), so only results travel.

#include <vector>

namespace bellows::examples {

/// max |C - A*B| / max |A*B| for column-major C (m x n), where A (m x k) and B (k x n)
/// hold random_entry(seed, i, j) and random_entry(seed + 1, i, j).
double gemm_max_relative_error(const std::vector<double>& c, int m, int n, int k, unsigned seed);

/// Scaled residual ||A - L L^T||_F / (||A||_F * n * eps) for column-major lower L (n x n),
/// where A holds spd_entry(seed, n, i, j).
double cholesky_scaled_residual(const std::vector<double>& l, int n, unsigned seed);

}  // namespace bellows::examples
