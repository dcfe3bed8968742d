// Task keys, tile indices, the block-cyclic distribution and TiledMatrix bookkeeping.
// (TiledMatrix needs MPI only for gather_to_root, which the MPI tests cover.)

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bellows/runtime/collection.hpp"
#include "bellows/runtime/task.hpp"
#include "bellows/runtime/tile.hpp"
#include "thrown_message.hpp"

using bellows::runtime::BlockCyclic2D;
using bellows::runtime::TaskKey;
using bellows::runtime::Tile;
using bellows::runtime::TiledMatrix;
using bellows::runtime::TileIndex;

TEST(TaskKey, EqualityComparesClassAndEveryIndex) {
  const TaskKey k{3, {1, 2, 3}};
  EXPECT_EQ(k, (TaskKey{3, {1, 2, 3}}));
  EXPECT_NE(k, (TaskKey{2, {1, 2, 3}}));
  EXPECT_NE(k, (TaskKey{3, {0, 2, 3}}));
  EXPECT_NE(k, (TaskKey{3, {1, 0, 3}}));
  EXPECT_NE(k, (TaskKey{3, {1, 2, 0}}));
  EXPECT_NE(k, (TaskKey{3, {3, 2, 1}}));
  EXPECT_EQ(std::hash<TaskKey>{}(k), std::hash<TaskKey>{}(TaskKey{3, {1, 2, 3}}));
}

TEST(TaskKey, HashSeparatesKeysThatDifferInOneField) {
  const std::hash<TaskKey> hash;
  std::size_t compared = 0;
  for (std::uint16_t c = 0; c < 4; ++c) {
    for (int i = -2; i < 14; ++i) {
      for (int j = 0; j < 16; j += 3) {
        for (int k = 0; k < 16; k += 3) {
          const TaskKey base{c, {i, j, k}};
          for (int field = 0; field < 4; ++field) {
            for (int d = 1; d < 20; ++d) {
              TaskKey other = base;
              if (field == 0) {
                other.task_class = static_cast<std::uint16_t>(c + d);
              } else {
                other.index[static_cast<std::size_t>(field - 1)] += d;
              }
              ASSERT_NE(other, base);
              EXPECT_NE(hash(other), hash(base))
                  << "class " << c << " (" << i << "," << j << "," << k << "), field " << field
                  << " + " << d;
              ++compared;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(compared, 4U * 16 * 6 * 6 * 4 * 19);
  // Permuted indices are different tasks with different hashes.
  EXPECT_NE(hash(TaskKey{0, {1, 2, 0}}), hash(TaskKey{0, {2, 1, 0}}));
}

// What unordered_map sees: the keys of a 4-class, 32^3 task domain spread over the
// buckets as uniformly random hashes would (mean of sum(bucket size^2) / keys close to
// 1 + load factor).
TEST(TaskKey, HashSpreadsATaskDomainOverBuckets) {
  std::unordered_set<TaskKey> keys;
  for (std::uint16_t c = 0; c < 4; ++c) {
    for (int i = 0; i < 32; ++i) {
      for (int j = 0; j < 32; ++j) {
        for (int k = 0; k < 32; ++k) keys.insert(TaskKey{c, {i, j, k}});
      }
    }
  }
  ASSERT_EQ(keys.size(), 4U * 32 * 32 * 32);
  double sum_squares = 0.0;
  std::size_t longest = 0;
  for (std::size_t b = 0; b < keys.bucket_count(); ++b) {
    const auto n = keys.bucket_size(b);
    sum_squares += static_cast<double>(n) * static_cast<double>(n);
    longest = std::max(longest, n);
  }
  const double ideal = 1.0 + static_cast<double>(keys.size() - 1) / static_cast<double>(keys.bucket_count());
  EXPECT_LT(sum_squares / static_cast<double>(keys.size()), ideal * 1.1);
  EXPECT_LE(longest, 12U);
}

TEST(TileIndex, EqualityAndHash) {
  EXPECT_EQ((TileIndex{1, 2, 3}), (TileIndex{1, 2, 3}));
  EXPECT_NE((TileIndex{1, 2, 3}), (TileIndex{0, 2, 3}));
  EXPECT_NE((TileIndex{1, 2, 3}), (TileIndex{1, 3, 2}));
  std::unordered_set<std::size_t> hashes;
  for (std::uint16_t c = 0; c < 3; ++c) {
    for (int m = 0; m < 40; ++m) {
      for (int n = 0; n < 40; ++n) hashes.insert(std::hash<TileIndex>{}(TileIndex{c, m, n}));
    }
  }
  EXPECT_EQ(hashes.size(), 3U * 40 * 40);
}

TEST(BlockCyclic2D, OwnerOnTwoByThreeGridIsRowMajor) {
  const BlockCyclic2D grid{2, 3};
  EXPECT_EQ(grid.size(), 6);
  std::vector<int> hits(6, 0);
  for (int m = 0; m < 8; ++m) {
    for (int n = 0; n < 9; ++n) {
      const int owner = grid.owner(m, n);
      EXPECT_EQ(owner, (m % 2) * 3 + (n % 3)) << "tile (" << m << "," << n << ")";
      ASSERT_GE(owner, 0);
      ASSERT_LT(owner, 6);
      ++hits[static_cast<std::size_t>(owner)];
    }
  }
  // 8 x 9 tiles over a 2 x 3 grid: every rank owns exactly 4 x 3 of them.
  for (int r = 0; r < 6; ++r) EXPECT_EQ(hits[static_cast<std::size_t>(r)], 12) << "rank " << r;
  EXPECT_EQ(grid.owner(0, 0), 0);
  EXPECT_EQ(grid.owner(0, 2), 2);
  EXPECT_EQ(grid.owner(1, 0), 3);
  EXPECT_EQ(grid.owner(1, 2), 5);
  EXPECT_EQ(grid.owner(2, 3), 0);
  EXPECT_EQ(grid.owner(3, 4), 4);
}

TEST(BlockCyclic2D, SquareForPicksTheMostSquareGrid) {
  const std::vector<std::pair<int, std::pair<int, int>>> expected = {
      {1, {1, 1}}, {2, {1, 2}}, {3, {1, 3}}, {4, {2, 2}},  {5, {1, 5}},
      {6, {2, 3}}, {7, {1, 7}}, {8, {2, 4}}, {9, {3, 3}}, {12, {3, 4}}, {16, {4, 4}}};
  for (const auto& [ranks, shape] : expected) {
    const auto g = BlockCyclic2D::square_for(ranks);
    EXPECT_EQ(g.rows, shape.first) << ranks << " ranks";
    EXPECT_EQ(g.cols, shape.second) << ranks << " ranks";
    EXPECT_EQ(g.size(), ranks);
    EXPECT_LE(g.rows, g.cols);
  }
}

TEST(TiledMatrix, TileShapesWhenTheOrderIsNotAMultipleOfTheTile) {
  const TiledMatrix a(0, 450, 450, 100, BlockCyclic2D{1, 1}, 0);
  EXPECT_EQ(a.tile_rows(), 5);
  EXPECT_EQ(a.tile_cols(), 5);
  for (int m = 0; m < 4; ++m) EXPECT_EQ(a.rows_of_tile(m), 100);
  EXPECT_EQ(a.rows_of_tile(4), 50);
  EXPECT_EQ(a.cols_of_tile(4), 50);

  const TiledMatrix b(3, 250, 130, 100, BlockCyclic2D{1, 1}, 0);
  EXPECT_EQ(b.id(), 3);
  EXPECT_EQ(b.tile_rows(), 3);
  EXPECT_EQ(b.tile_cols(), 2);
  EXPECT_EQ(b.rows_of_tile(2), 50);
  EXPECT_EQ(b.cols_of_tile(0), 100);
  EXPECT_EQ(b.cols_of_tile(1), 30);
  int total_elements = 0;
  for (int n = 0; n < b.tile_cols(); ++n) {
    for (int m = 0; m < b.tile_rows(); ++m) {
      const auto& t = b.tile(m, n);
      EXPECT_EQ(t->rows(), b.rows_of_tile(m));
      EXPECT_EQ(t->cols(), b.cols_of_tile(n));
      total_elements += static_cast<int>(t->elements());
    }
  }
  EXPECT_EQ(total_elements, 250 * 130);

  const TiledMatrix exact(0, 300, 300, 100, BlockCyclic2D{1, 1}, 0);
  EXPECT_EQ(exact.tile_rows(), 3);
  EXPECT_EQ(exact.rows_of_tile(2), 100);
  const TiledMatrix single(0, 40, 40, 64, BlockCyclic2D{1, 1}, 0);
  EXPECT_EQ(single.tile_rows(), 1);
  EXPECT_EQ(single.rows_of_tile(0), 40);
}

TEST(TiledMatrix, AllocatesOnlyLocalTilesOnTwoByThreeGrid) {
  const BlockCyclic2D grid{2, 3};
  int total = 0;
  for (int rank = 0; rank < 6; ++rank) {
    TiledMatrix a(0, 450, 450, 100, grid, rank);
    int local = 0;
    a.for_each_local_tile([&](int m, int n, Tile& t) {
      EXPECT_EQ(grid.owner(m, n), rank);
      EXPECT_EQ(t.rows(), a.rows_of_tile(m));
      EXPECT_EQ(t.cols(), a.cols_of_tile(n));
      ++local;
    });
    for (int m = 0; m < 5; ++m) {
      for (int n = 0; n < 5; ++n) EXPECT_EQ(a.is_local(m, n), grid.owner(m, n) == rank);
    }
    total += local;
  }
  EXPECT_EQ(total, 25);
  // Rank 0 owns rows {0, 2, 4} x columns {0, 3}.
  TiledMatrix r0(0, 450, 450, 100, grid, 0);
  std::set<std::pair<int, int>> tiles;
  r0.for_each_local_tile([&](int m, int n, Tile&) { tiles.insert({m, n}); });
  EXPECT_EQ(tiles, (std::set<std::pair<int, int>>{{0, 0}, {0, 3}, {2, 0}, {2, 3}, {4, 0}, {4, 3}}));
}

TEST(TiledMatrix, KeepFilterLeavesOutTheUpperTriangle) {
  const auto lower = [](int m, int n) { return m >= n; };
  TiledMatrix l(1, 450, 450, 100, BlockCyclic2D{1, 1}, 0, lower);
  int local = 0;
  l.for_each_local_tile([&](int m, int n, Tile&) {
    EXPECT_GE(m, n);
    ++local;
  });
  EXPECT_EQ(local, 15);
  EXPECT_TRUE(l.kept(3, 1));
  EXPECT_FALSE(l.kept(1, 3));
  EXPECT_TRUE(l.is_local(4, 4));
  EXPECT_FALSE(l.is_local(0, 4));
  EXPECT_EQ(bellows::testing::thrown_message([&] { (void)l.tile(0, 4); }),
            "tile (0,4) of collection 1 is not on rank 0");
  EXPECT_THROW((void)l.tile(0, 4), std::out_of_range);

  TiledMatrix g(2, 450, 450, 100, BlockCyclic2D{2, 3}, 4, lower);
  // Rank 4 = (1, 1) owns (1,1), (1,4), (3,1), (3,4); (1,4) and (3,4) are above the diagonal.
  int g_local = 0;
  g.for_each_local_tile([&](int, int, Tile&) { ++g_local; });
  EXPECT_EQ(g_local, 2);
  EXPECT_EQ(g.owner(3, 4), 4);
  EXPECT_FALSE(g.is_local(3, 4));
  EXPECT_TRUE(g.is_local(1, 1));
  EXPECT_TRUE(g.is_local(3, 1));
  EXPECT_FALSE(g.is_local(1, 4));
}

TEST(TiledMatrix, TileAccessErrorsNameTheTile) {
  TiledMatrix a(2, 450, 450, 100, BlockCyclic2D{2, 3}, 0);
  EXPECT_THROW((void)a.tile(1, 0), std::out_of_range);
  EXPECT_EQ(bellows::testing::thrown_message([&] { (void)a.tile(1, 0); }),
            "tile (1,0) of collection 2 is not on rank 0");
  EXPECT_EQ(bellows::testing::thrown_message([&] { (void)a.tile(5, 0); }),
            "tile (5,0) of collection 2 is not on rank 0");
  EXPECT_EQ(bellows::testing::thrown_message([&] { (void)a.tile(0, -1); }),
            "tile (0,-1) of collection 2 is not on rank 0");
  EXPECT_NO_THROW((void)a.tile(2, 3));

  EXPECT_THROW(a.set_tile(1, 1, std::make_shared<Tile>(100, 100)), std::out_of_range);
  EXPECT_EQ(bellows::testing::thrown_message([&] { a.set_tile(1, 1, std::make_shared<Tile>(100, 100)); }),
            "write-back of tile (1,1) of collection 2 on rank 0, which does not own it");
  EXPECT_THROW(a.set_tile(4, 0, std::make_shared<Tile>(100, 100)), std::invalid_argument);
  EXPECT_EQ(bellows::testing::thrown_message([&] { a.set_tile(4, 0, std::make_shared<Tile>(100, 100)); }),
            "write-back of tile (4,0) of collection 2 with a tile of the wrong shape");
  EXPECT_THROW(a.set_tile(0, 0, nullptr), std::invalid_argument);

  auto replacement = std::make_shared<Tile>(50, 100);
  replacement->at(49, 99) = 4.5;
  a.set_tile(4, 0, replacement);
  EXPECT_EQ(a.tile(4, 0).get(), replacement.get());
  EXPECT_EQ(a.tile(4, 0)->at(49, 99), 4.5);
}

TEST(TiledMatrix, TileOwnersOverrideThePlacementAndDropTilesThatLeave) {
  const BlockCyclic2D grid{1, 2};  // 3 x 3 tiles: columns 0 and 2 on rank 0, 1 on rank 1
  TiledMatrix a(0, 300, 300, 100, grid, 0);
  std::vector<int> owners(9, TiledMatrix::kNoTileOwner);
  owners[2 * 3 + 1] = 2;  // tile (1, 2) to rank 2
  owners[1 * 3 + 0] = 0;  // tile (0, 1) to rank 0
  a.set_mapping({0, 1}, owners, 0);
  EXPECT_EQ(a.owner(1, 2), 2);
  EXPECT_EQ(a.owner(0, 1), 0);
  EXPECT_EQ(a.owner(2, 2), 0);  // as the placement says
  EXPECT_EQ(a.owner(1, 1), 1);
  EXPECT_FALSE(a.is_local(1, 2));
  EXPECT_THROW((void)a.tile(1, 2), std::out_of_range);  // dropped
  EXPECT_TRUE(a.is_local(0, 1));  // gained: empty until installed
  EXPECT_THROW((void)a.tile(0, 1), std::out_of_range);
  a.set_tile(0, 1, std::make_shared<Tile>(100, 100));
  EXPECT_NO_THROW((void)a.tile(0, 1));
  // A new placement keeps the per-tile owners.
  a.set_placement({1, 0}, 0);
  EXPECT_EQ(a.owner(1, 2), 2);
  EXPECT_EQ(a.owner(2, 2), 1);
  EXPECT_EQ(a.owner(1, 1), 0);
  EXPECT_EQ(a.tile_owners(), owners);
  EXPECT_EQ(bellows::testing::thrown_message([&] { a.set_mapping({0, 1}, {1, 2}, 0); }),
            "tile owners of collection 0 have 2 entries for 9 tiles");
}

TEST(TiledMatrix, AnEmptyPlacementIsTheIdentity) {
  const BlockCyclic2D grid{1, 2};  // 3 x 3 tiles: columns 0 and 2 on grid rank 0, 1 on 1
  TiledMatrix a(0, 300, 300, 100, grid, 0);
  a.set_placement({1, 0}, 0);  // rank 0 now holds column 1
  a.set_tile(0, 1, std::make_shared<Tile>(100, 100));
  std::vector<int> owners(9, TiledMatrix::kNoTileOwner);
  owners[2 * 3 + 1] = 1;  // tile (1, 2) to rank 1
  a.set_mapping({}, owners, 0);
  EXPECT_TRUE(a.placement().empty());
  EXPECT_EQ(a.tile_owners(), owners);
  for (int n = 0; n < 3; ++n) {
    for (int m = 0; m < 3; ++m) {
      const int expected = m == 1 && n == 2 ? 1 : grid.owner(m, n);
      EXPECT_EQ(a.owner(m, n), expected) << "tile (" << m << ", " << n << ")";
    }
  }
  EXPECT_FALSE(a.is_local(0, 1));
  EXPECT_THROW((void)a.tile(0, 1), std::out_of_range);  // left with the identity
  EXPECT_TRUE(a.is_local(0, 0));  // back: empty until installed
  EXPECT_THROW((void)a.tile(0, 0), std::out_of_range);
  // The same as the identity written out, on either side.
  TiledMatrix b(0, 300, 300, 100, grid, 1);
  b.set_mapping({0, 1}, owners, 1);
  for (int n = 0; n < 3; ++n) {
    for (int m = 0; m < 3; ++m) EXPECT_EQ(a.owner(m, n), b.owner(m, n));
  }
  // set_placement reads an empty placement the same way.
  a.set_placement({1, 0}, 0);
  a.set_placement({}, 0);
  EXPECT_TRUE(a.placement().empty());
  EXPECT_EQ(a.owner(0, 1), 1);
  EXPECT_EQ(bellows::testing::thrown_message([&] { a.set_mapping({0}, {}, 0); }),
            "placement of collection 0 has 1 entries for a grid of 2 ranks");
}

TEST(TiledMatrix, RejectsNonPositiveSizesAndGrids) {
  EXPECT_EQ(bellows::testing::thrown_message([] { TiledMatrix(0, 0, 10, 5, BlockCyclic2D{1, 1}, 0); }),
            "matrix 0x10 with tile 5: sizes must be positive");
  EXPECT_THROW(TiledMatrix(0, 10, 10, 0, BlockCyclic2D{1, 1}, 0), std::invalid_argument);
  EXPECT_EQ(bellows::testing::thrown_message([] { TiledMatrix(0, 10, 10, 5, BlockCyclic2D{0, 2}, 0); }),
            "process grid 0x2 must be positive");
}

TEST(Tile, ShapeAccessAndDeepClone) {
  Tile t(3, 2);
  EXPECT_EQ(t.elements(), 6U);
  EXPECT_EQ(t.bytes(), 48U);
  for (int j = 0; j < 2; ++j) {
    for (int i = 0; i < 3; ++i) t.at(i, j) = 10 * i + j;
  }
  EXPECT_EQ(t.data()[4], 11.0);  // column-major: (1, 1) is element 1 + 1 * 3
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0U);
  auto copy = t.clone();
  EXPECT_NE(copy->data(), t.data());
  t.at(2, 1) = -1.0;
  EXPECT_EQ(copy->at(2, 1), 21.0);
  EXPECT_EQ(copy->rows(), 3);
  EXPECT_EQ(copy->cols(), 2);
  EXPECT_THROW(Tile(-1, 2), std::invalid_argument);
}
