#pragma once
// The 2D block-cyclic distribution of tiles over a process grid: where a tile lives, as a
// value the collections, the re-grid at a resize and the simulator all compute alike.

namespace bellows::runtime {

/// 2D block-cyclic distribution of tiles over a P x Q process grid, row-major ranks:
/// tile (m, n) lives on rank (m mod P) * Q + (n mod Q), as in ScaLAPACK.
struct BlockCyclic2D {
  int rows = 1;  ///< P
  int cols = 1;  ///< Q

  [[nodiscard]] int owner(int m, int n) const noexcept { return (m % rows) * cols + (n % cols); }
  [[nodiscard]] int size() const noexcept { return rows * cols; }
  /// The most square grid with rows <= cols for `ranks` processes.
  static BlockCyclic2D square_for(int ranks);
};

}  // namespace bellows::runtime
