#include "tiles_at_start.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace bellows::runtime {

void TilesAtIterationStart::remember(long iteration, std::span<TiledMatrix* const> collections) {
  tiles_.clear();
  for (TiledMatrix* c : collections) {
    c->for_each_local_tile([&](int m, int n, Tile&) {
      tiles_.push_back(KeptTile{TileIndex{c->id(), m, n}, c->tile(m, n)});
    });
  }
  iteration_ = iteration;
}

std::size_t TilesAtIterationStart::reinstall(std::span<TiledMatrix* const> collections) const {
  for (const KeptTile& kept : tiles_) {
    const TileIndex& at = kept.index;
    if (at.collection >= collections.size() || !collections[at.collection]->is_local(at.m, at.n)) {
      throw std::logic_error("tiles kept as iteration " + std::to_string(iteration_) + " started: tile (" +
                             std::to_string(at.m) + ", " + std::to_string(at.n) + ") of collection " +
                             std::to_string(at.collection) + " is no longer local");
    }
  }
  for (const KeptTile& kept : tiles_) collections[kept.index.collection]->set_tile(kept.index.m, kept.index.n, kept.tile);
  return tiles_.size();
}

void TilesAtIterationStart::forget() noexcept {
  tiles_.clear();
  iteration_ = -1;
}

}  // namespace bellows::runtime
