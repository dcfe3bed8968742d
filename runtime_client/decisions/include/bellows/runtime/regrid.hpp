#pragma once
// Where the tiles of a job go at a resize: onto the block-cyclic grid that a job started at
// the new size would have, with the grid's positions given to the ranks so that as many
// tiles as possible stay where they are.
//
// Why a grid and not a balance of loads: in a dataflow over 2D block-cyclic tiles (GEMM,
// Cholesky) a rank reads the row and column panels of the tiles it writes. A rank that
// takes tiles chosen only to even out work takes them from every row and every column and
// ends up reading most of the matrix each iteration; measured after a 6 -> 4 shrink at
// 1000 GFLOP/s per rank, each rank received about 2x the bytes per iteration of a job
// started on 4 ranks, and ran at 0.56-0.62 of its speed. On the grid of the new size, every
// rank reads what it would read in a job started at that size.
//
// Nothing here sends a message or reads a clock: the engine (engine_mapping.cpp) gives the
// tiles' holders and carries out the moves; every rank computes the same answer from the
// same holders.

#include <cstddef>
#include <span>
#include <vector>

#include "bellows/runtime/block_cyclic.hpp"

namespace bellows::runtime {

/// One collection's tiles as regrid() sees them.
struct TileHolders {
  int tile_rows = 0;
  int tile_cols = 0;
  /// Per slot n * tile_rows + m: the rank that holds tile (m, n) now, or -1 for a tile the
  /// collection does not keep (it has no data and does not move).
  std::vector<int> holders;
};

/// The layout after a resize.
struct Regrid {
  BlockCyclic2D grid;          ///< the distribution of a job started at the new size
  std::vector<int> placement;  ///< grid rank g is held by rank placement[g]
  /// Per collection, per slot: the tile's owner after the resize (-1 where not kept).
  std::vector<std::vector<int>> owners;
  std::size_t tiles_kept = 0;   ///< kept tiles whose holder does not change
  std::size_t tiles_moved = 0;  ///< kept tiles that change holder
};

/// The grid BlockCyclic2D::square_for(ranks.size()) over `ranks` (the ranks the job has
/// after the resize, numbered as in `collections`' holders; order matters only to break
/// ties). Grid positions go to ranks greedily by the number of tiles, over all
/// collections, that the rank already holds at that position, most first; the rest in
/// order. All collections share one placement, so that a tile and the panels it is
/// computed from stay aligned as in a job started at that size. Throws
/// std::invalid_argument for an empty or repeated rank, a negative rank, or holders that
/// do not match their collection's tile count.
[[nodiscard]] Regrid regrid(std::span<const TileHolders> collections, std::span<const int> ranks);

}  // namespace bellows::runtime
