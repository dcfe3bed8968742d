#pragma once
// A rank's collections' tiles as an iteration started, kept for a team roll-back
// (docs/teams.md): a rank whose team does not roll back keeps its state as the interrupted
// iteration started. A task that writes a collection tile writes a new tile, and the
// application replaces tiles rather than writing them (docs/runtime.md), so keeping the
// tile pointers is enough: no bytes are copied. Not thread-safe: between iterations only.

#include <cstddef>
#include <span>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/task.hpp"
#include "bellows/runtime/tile.hpp"

namespace bellows::runtime {

class TilesAtIterationStart {
 public:
  /// Keeps the local tiles of `collections` as iteration `iteration` starts, forgetting
  /// those kept before.
  void remember(long iteration, std::span<TiledMatrix* const> collections);
  /// The iteration whose start the kept tiles are of; -1 when none are kept.
  [[nodiscard]] long iteration() const noexcept { return iteration_; }
  /// Installs the kept tiles again in `collections`. Throws std::logic_error naming the
  /// tile when one kept is no longer local (the mapping changed since). Returns how many.
  std::size_t reinstall(std::span<TiledMatrix* const> collections) const;
  void forget() noexcept;

 private:
  struct KeptTile {
    TileIndex index;
    TilePtr tile;
  };
  long iteration_ = -1;
  std::vector<KeptTile> tiles_;
};

}  // namespace bellows::runtime
