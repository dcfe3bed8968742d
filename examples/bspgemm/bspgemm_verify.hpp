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
/// everywhere, returns max |C|. `inner_widths` (thin_slab_widths; empty: all full): in k
/// slab s only the first inner_widths[s] columns of A and rows of B are nonzero.
double bspgemm_max_relative_error(const std::vector<double>& c, const TilePattern& pattern, int m,
                                  int n, int k, int tile, unsigned seed,
                                  const std::vector<int>& inner_widths = {});

/// Zeroes the entries of the local tiles of A (columns) and B (rows) beyond the inner width
/// of their k slab.
void zero_thin_padding(runtime::TiledMatrix& a, runtime::TiledMatrix& b,
                       const std::vector<int>& inner_widths);

}  // namespace bellows::examples
