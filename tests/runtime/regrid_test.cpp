// regrid(): where tiles go at a resize, on synthetic holders (no MPI).

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/regrid.hpp"

using bellows::runtime::BlockCyclic2D;
using bellows::runtime::regrid;
using bellows::runtime::TileHolders;

namespace {

/// A tiles x tiles collection laid out as a job started on `ranks` ranks lays it out,
/// keeping the tiles `keep` accepts.
TileHolders started_on(int ranks, int tiles, const std::function<bool(int, int)>& keep = {}) {
  const auto grid = BlockCyclic2D::square_for(ranks);
  TileHolders c{tiles, tiles, {}};
  for (int n = 0; n < tiles; ++n) {
    for (int m = 0; m < tiles; ++m) c.holders.push_back(!keep || keep(m, n) ? grid.owner(m, n) : -1);
  }
  return c;
}

std::vector<int> first_ranks(int count) {
  std::vector<int> ranks(static_cast<std::size_t>(count));
  for (int r = 0; r < count; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return ranks;
}

/// The tiles each rank holds in `owners`, over ranks 0..count-1.
std::vector<int> tiles_per_rank(const std::vector<int>& owners, int count) {
  std::vector<int> per(static_cast<std::size_t>(count), 0);
  for (const int o : owners) {
    if (o >= 0) ++per.at(static_cast<std::size_t>(o));
  }
  return per;
}

TEST(Regrid, ExpandFourToSixGivesTheGridOfASixRankJobAndKeepsAThird) {
  const std::vector<TileHolders> colls{started_on(4, 12), started_on(4, 12)};
  const auto out = regrid(colls, first_ranks(6));
  EXPECT_EQ(out.grid.rows, 2);
  EXPECT_EQ(out.grid.cols, 3);
  ASSERT_EQ(out.owners.size(), 2U);
  // Each grid position holds half its tiles already on one old rank: 4 positions keep
  // half, the two new ranks' positions keep none: a third of the tiles stay.
  EXPECT_EQ(out.tiles_kept, 2U * 144 / 3);
  EXPECT_EQ(out.tiles_moved, 2U * 144 * 2 / 3);
  for (const auto& owners : out.owners) EXPECT_EQ(tiles_per_rank(owners, 6), std::vector<int>(6, 24));
  // Every tile follows the grid through the placement, the same in both collections.
  for (std::size_t c = 0; c < 2; ++c) {
    for (int n = 0; n < 12; ++n) {
      for (int m = 0; m < 12; ++m) {
        EXPECT_EQ(out.owners[c][static_cast<std::size_t>(n) * 12 + m],
                  out.placement[static_cast<std::size_t>(out.grid.owner(m, n))]);
      }
    }
  }
  // The old ranks keep positions where they hold tiles; the new ranks take the others.
  auto sorted = out.placement;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, first_ranks(6));
  EXPECT_EQ(out.placement[0], 0);
}

TEST(Regrid, AResizeToTheSameGridMovesNothing) {
  const std::vector<TileHolders> colls{started_on(6, 10)};
  const auto out = regrid(colls, first_ranks(6));
  EXPECT_EQ(out.tiles_moved, 0U);
  EXPECT_EQ(out.tiles_kept, 100U);
  EXPECT_EQ(out.owners[0], colls[0].holders);
}

TEST(Regrid, ShrinkPlacesTilesOnlyOnTheRanksThatStay) {
  const std::vector<TileHolders> colls{started_on(6, 12)};
  const std::vector<int> staying{0, 2, 3, 5};  // 1 and 4 leave; numbers before the shrink
  const auto out = regrid(colls, staying);
  EXPECT_EQ(out.grid.rows, 2);
  EXPECT_EQ(out.grid.cols, 2);
  const auto per = tiles_per_rank(out.owners[0], 6);
  EXPECT_EQ(per, (std::vector<int>{36, 0, 36, 36, 0, 36}));
  EXPECT_EQ(out.tiles_kept + out.tiles_moved, 144U);
  // The tiles of the leavers all move.
  for (std::size_t s = 0; s < 144; ++s) {
    const int holder = colls[0].holders[s];
    if (holder == 1 || holder == 4) {
      EXPECT_NE(out.owners[0][s], holder);
    }
  }
}

TEST(Regrid, ShrinkBackToTheStartingSizeReturnsToTheStartingGridUpToNames) {
  // 4 -> 6 -> 4 removing the two ranks that came: every old rank holds what it held.
  const std::vector<TileHolders> start{started_on(4, 12)};
  const auto grown = regrid(start, first_ranks(6));
  const std::vector<TileHolders> after{{12, 12, grown.owners[0]}};
  const auto shrunk = regrid(after, first_ranks(4));
  EXPECT_EQ(shrunk.owners[0], start[0].holders);
}

TEST(Regrid, TilesNotKeptStayUnownedAndDoNotCount) {
  const auto lower = [](int m, int n) { return m >= n; };
  const std::vector<TileHolders> colls{started_on(4, 8, lower)};
  const auto out = regrid(colls, first_ranks(6));
  EXPECT_EQ(out.tiles_kept + out.tiles_moved, 36U);
  for (int n = 0; n < 8; ++n) {
    for (int m = 0; m < 8; ++m) {
      const int owner = out.owners[0][static_cast<std::size_t>(n) * 8 + m];
      if (m < n) {
        EXPECT_EQ(owner, -1);
      } else {
        EXPECT_GE(owner, 0);
      }
    }
  }
}

TEST(Regrid, TheSameHoldersGiveTheSameAnswer) {
  const std::vector<TileHolders> colls{started_on(8, 16), started_on(8, 9)};
  const auto a = regrid(colls, first_ranks(12));
  const auto b = regrid(colls, first_ranks(12));
  EXPECT_EQ(a.placement, b.placement);
  EXPECT_EQ(a.owners, b.owners);
}

TEST(Regrid, HundredsOfRanks) {
  const std::vector<TileHolders> colls{started_on(256, 64)};
  const auto out = regrid(colls, first_ranks(320));
  const auto per = tiles_per_rank(out.owners[0], 320);
  // A 16 x 20 grid over 64 x 64 tiles: 4 tile rows and 3 or 4 tile columns per position.
  EXPECT_EQ(out.grid.rows, 16);
  EXPECT_EQ(out.grid.cols, 20);
  EXPECT_EQ(*std::min_element(per.begin(), per.end()), 12);
  EXPECT_EQ(*std::max_element(per.begin(), per.end()), 16);
  EXPECT_EQ(out.tiles_kept + out.tiles_moved, 4096U);
}

TEST(Regrid, BadInputIsNamed) {
  const std::vector<TileHolders> colls{started_on(4, 4)};
  const auto message = [&](const std::vector<int>& ranks, const std::vector<TileHolders>& c) {
    try {
      (void)regrid(c, ranks);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({}, colls), "regrid: no rank to place the tiles on");
  EXPECT_EQ(message({0, 1, 1}, colls), "regrid: rank 1 is listed twice");
  EXPECT_EQ(message({0, -3}, colls), "regrid: rank -3 is negative");
  const std::vector<TileHolders> short_holders{{4, 4, {0, 1, 2}}};
  EXPECT_EQ(message({0, 1}, short_holders), "regrid: collection 0 has 3 holders for 4 x 4 tiles");
}

}  // namespace
