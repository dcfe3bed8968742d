#include "bellows/runtime/regrid.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>

namespace bellows::runtime {

Regrid regrid(std::span<const TileHolders> collections, std::span<const int> ranks) {
  if (ranks.empty()) throw std::invalid_argument("regrid: no rank to place the tiles on");
  std::unordered_map<int, std::size_t> index_of;  // rank -> its position in `ranks`
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0) {
      throw std::invalid_argument("regrid: rank " + std::to_string(ranks[i]) + " is negative");
    }
    if (!index_of.emplace(ranks[i], i).second) {
      throw std::invalid_argument("regrid: rank " + std::to_string(ranks[i]) + " is listed twice");
    }
  }
  for (std::size_t c = 0; c < collections.size(); ++c) {
    const auto& coll = collections[c];
    const auto slots = static_cast<std::size_t>(coll.tile_rows) * static_cast<std::size_t>(coll.tile_cols);
    if (coll.tile_rows <= 0 || coll.tile_cols <= 0 || coll.holders.size() != slots) {
      throw std::invalid_argument("regrid: collection " + std::to_string(c) + " has " +
                                  std::to_string(coll.holders.size()) + " holders for " +
                                  std::to_string(coll.tile_rows) + " x " +
                                  std::to_string(coll.tile_cols) + " tiles");
    }
  }

  Regrid out;
  out.grid = BlockCyclic2D::square_for(static_cast<int>(ranks.size()));
  const auto positions = static_cast<std::size_t>(out.grid.size());
  // held[g * ranks + i]: kept tiles at grid position g that ranks[i] holds now.
  std::vector<std::size_t> held(positions * ranks.size(), 0);
  for (const auto& coll : collections) {
    for (int n = 0; n < coll.tile_cols; ++n) {
      for (int m = 0; m < coll.tile_rows; ++m) {
        const int holder = coll.holders[static_cast<std::size_t>(n) * coll.tile_rows + m];
        const auto it = index_of.find(holder);
        if (holder < 0 || it == index_of.end()) continue;
        ++held[static_cast<std::size_t>(out.grid.owner(m, n)) * ranks.size() + it->second];
      }
    }
  }
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> overlaps;  // (tiles, g, i)
  for (std::size_t g = 0; g < positions; ++g) {
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (const auto tiles = held[g * ranks.size() + i]; tiles > 0) overlaps.emplace_back(tiles, g, i);
    }
  }
  std::stable_sort(overlaps.begin(), overlaps.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); });
  constexpr int kUnplaced = -1;
  out.placement.assign(positions, kUnplaced);
  std::vector<char> placed(ranks.size(), 0);
  for (const auto& [tiles, g, i] : overlaps) {
    if (out.placement[g] != kUnplaced || placed[i]) continue;
    out.placement[g] = ranks[i];
    placed[i] = 1;
  }
  std::size_t next = 0;
  for (auto& rank : out.placement) {
    if (rank != kUnplaced) continue;
    while (placed[next]) ++next;
    rank = ranks[next];
    placed[next] = 1;
  }

  for (const auto& coll : collections) {
    auto& owners = out.owners.emplace_back(coll.holders.size(), -1);
    for (int n = 0; n < coll.tile_cols; ++n) {
      for (int m = 0; m < coll.tile_rows; ++m) {
        const auto slot = static_cast<std::size_t>(n) * coll.tile_rows + m;
        if (coll.holders[slot] < 0) continue;
        owners[slot] = out.placement[static_cast<std::size_t>(out.grid.owner(m, n))];
        ++(owners[slot] == coll.holders[slot] ? out.tiles_kept : out.tiles_moved);
      }
    }
  }
  return out;
}

}  // namespace bellows::runtime
