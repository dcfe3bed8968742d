#pragma once
// Check of the block-sparse product against OpenBLAS on the whole matrix gathered to one
// rank, in the style of bellows/examples/verify.hpp: inputs are rebuilt from their
// generators, so only the result travels.

#include <vector>

#include "bspgemm_tasks.hpp"

namespace bellows::examples {

/// max |C - A*B| / max |A*B| for column-major C (m x n), where A (m x k) and B (k x n)
/// hold random_entry(seed, i, j) and random_entry(seed + 1, i, j) inside the nonzero
/// tiles of `pattern` (tiles of `tile` x `tile`) and zero elsewhere. When A*B is zero
/// everywhere, returns max |C|.
double bspgemm_max_relative_error(const std::vector<double>& c, const TilePattern& pattern, int m,
                                  int n, int k, int tile, unsigned seed);

}  // namespace bellows::examples
