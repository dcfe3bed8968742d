#pragma once
// Tiled data collections and their distributions.

#include <functional>
#include <mpi.h>
#include <vector>

#include "bellows/runtime/block_cyclic.hpp"
#include "bellows/runtime/task.hpp"
#include "bellows/runtime/tile.hpp"

namespace bellows::runtime {

class Engine;

/// A rows x cols matrix of doubles cut into tile x tile blocks (the last row and column
/// of tiles may be smaller), distributed block-cyclically. Each rank allocates only its
/// own tiles, and only those `keep(m, n)` accepts (e.g. the lower triangle).
///
/// Thread safety: distinct tiles may be read and replaced concurrently; the runtime
/// replaces a tile when a task writes it back.
class TiledMatrix {
 public:
  using TileFilter = std::function<bool(int m, int n)>;

  TiledMatrix(CollectionId id, int rows, int cols, int tile, BlockCyclic2D distribution,
              int my_rank, TileFilter keep = {});

  [[nodiscard]] CollectionId id() const noexcept { return id_; }
  [[nodiscard]] int rows() const noexcept { return rows_; }
  [[nodiscard]] int cols() const noexcept { return cols_; }
  [[nodiscard]] int tile_size() const noexcept { return tile_; }
  [[nodiscard]] int tile_rows() const noexcept { return mt_; }  ///< number of tile rows
  [[nodiscard]] int tile_cols() const noexcept { return nt_; }  ///< number of tile columns
  [[nodiscard]] int rows_of_tile(int m) const noexcept;
  [[nodiscard]] int cols_of_tile(int n) const noexcept;
  [[nodiscard]] const BlockCyclic2D& distribution() const noexcept { return dist_; }
  /// The rank that holds tile (m, n) now: its own owner if it has one (see
  /// set_mapping), else the distribution's rank moved by the placement.
  [[nodiscard]] int owner(int m, int n) const noexcept {
    if (!tile_owners_.empty()) {
      const int own = tile_owners_[slot(m, n)];
      if (own != kNoTileOwner) return own;
    }
    const int grid_rank = dist_.owner(m, n);
    return placement_.empty() ? grid_rank : placement_[static_cast<std::size_t>(grid_rank)];
  }
  /// An entry of tile_owners() that defers to the placement.
  static constexpr int kNoTileOwner = -1;
  /// Where the distribution's ranks live after a resize: grid rank g is held by rank
  /// placement[g] of the current communicator, and this process is now `my_rank` (-1: it
  /// left). An empty placement is the identity: grid rank g is communicator rank g. A
  /// placement that is not empty has one entry per grid rank (else std::invalid_argument
  /// naming the collection and both sizes). Per-tile owners set by set_mapping() are kept. Tiles this rank no longer
  /// holds are dropped; tiles it gains are empty until set_tile() installs them (the
  /// runtime does, with the data of the rank that held them).
  void set_placement(std::vector<int> placement, int my_rank);
  /// The placement (as set_placement: empty is the identity, kept empty) and per-tile
  /// owners at once: tile_owners is empty
  /// (none) or holds tile_rows() * tile_cols() entries, entry n * tile_rows() + m being
  /// the rank that holds tile (m, n) or kNoTileOwner. The runtime uses per-tile owners
  /// to spread the tiles of ranks that leave and to give new ranks a share of the tiles.
  void set_mapping(std::vector<int> placement, std::vector<int> tile_owners, int my_rank);
  [[nodiscard]] const std::vector<int>& placement() const noexcept { return placement_; }
  [[nodiscard]] const std::vector<int>& tile_owners() const noexcept { return tile_owners_; }
  [[nodiscard]] int my_rank() const noexcept { return my_rank_; }
  [[nodiscard]] bool kept(int m, int n) const { return !keep_ || keep_(m, n); }
  [[nodiscard]] bool is_local(int m, int n) const { return owner(m, n) == my_rank_ && kept(m, n); }
  [[nodiscard]] TileIndex index(int m, int n) const noexcept { return TileIndex{id_, m, n}; }

  /// The local tile (m, n); throws std::out_of_range when it is not local.
  [[nodiscard]] const TilePtr& tile(int m, int n) const;
  /// Replaces the local tile (m, n).
  void set_tile(int m, int n, TilePtr t);
  void for_each_local_tile(const std::function<void(int m, int n, Tile&)>& fn);

  /// Collective over comm: rank 0 receives the whole matrix (column-major, ld = rows,
  /// tiles not kept are left zero); other ranks receive an empty vector.
  [[nodiscard]] std::vector<double> gather_to_root(MPI_Comm comm) const;

 private:
  friend class Engine;

  [[nodiscard]] std::size_t slot(int m, int n) const noexcept {
    return static_cast<std::size_t>(n) * mt_ + m;
  }
  /// For the runtime, between iterations only: while probing, owner(m, n) answers
  /// -(2 + base + slot), so that the runtime learns which tile decides each task's owner;
  /// stop_probe() puts the owners back.
  void start_probe(int base);
  void stop_probe() noexcept;

  CollectionId id_;
  int rows_;
  int cols_;
  int tile_;
  int mt_;
  int nt_;
  BlockCyclic2D dist_;
  int my_rank_;
  TileFilter keep_;
  std::vector<int> placement_;  // empty: grid rank g is communicator rank g
  std::vector<int> tile_owners_;  // empty, or per slot: the owner or kNoTileOwner
  std::vector<int> saved_tile_owners_;  // while probing
  std::vector<TilePtr> tiles_;  // mt_ * nt_, null where not local
};

}  // namespace bellows::runtime
