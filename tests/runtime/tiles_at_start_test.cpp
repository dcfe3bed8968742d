// What a rank keeps of an iteration's start for a team roll-back (tiles_at_start.hpp): the
// tile pointers, installed again as they were, and a clear error when the mapping changed.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "thrown_message.hpp"
#include "tiles_at_start.hpp"

namespace bellows::runtime {
namespace {

using bellows::testing::thrown_message;

TEST(TilesAtIterationStart, KeepsNothingUntilAnIterationStarts) {
  const TilesAtIterationStart kept;
  EXPECT_EQ(kept.iteration(), -1);
}

TEST(TilesAtIterationStart, InstallsAgainTheTilesAsTheIterationStarted) {
  TiledMatrix a(0, 4, 4, 2, BlockCyclic2D::square_for(1), 0);  // 2 x 2 tiles, all local
  TiledMatrix c(1, 4, 4, 2, BlockCyclic2D::square_for(1), 0);
  std::vector<TiledMatrix*> collections{&a, &c};
  const TilePtr a01 = a.tile(0, 1), c11 = c.tile(1, 1);
  TilesAtIterationStart kept;
  kept.remember(5, collections);
  EXPECT_EQ(kept.iteration(), 5);
  // The iteration's tasks write new tiles; the application replaces others.
  a.set_tile(0, 1, std::make_shared<Tile>(2, 2));
  c.set_tile(1, 1, std::make_shared<Tile>(2, 2));
  EXPECT_NE(a.tile(0, 1), a01);
  EXPECT_EQ(kept.reinstall(collections), 8u);
  EXPECT_EQ(a.tile(0, 1), a01);  // the same tile, not a copy
  EXPECT_EQ(c.tile(1, 1), c11);
  kept.forget();
  EXPECT_EQ(kept.iteration(), -1);
  EXPECT_EQ(kept.reinstall(collections), 0u);
}

TEST(TilesAtIterationStart, RefusesToInstallATileThatIsNoLongerLocal) {
  TiledMatrix a(0, 4, 4, 2, BlockCyclic2D::square_for(1), 0);
  std::vector<TiledMatrix*> collections{&a};
  TilesAtIterationStart kept;
  kept.remember(3, collections);
  a.set_placement({1}, 0);  // the tiles now belong to rank 1
  EXPECT_EQ(thrown_message([&] { (void)kept.reinstall(collections); }),
            "tiles kept as iteration 3 started: tile (0, 0) of collection 0 is no longer local");
}

}  // namespace
}  // namespace bellows::runtime
