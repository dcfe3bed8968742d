// Buddy checkpoints (RuntimeOptions::checkpoint) under mpiexec -n 2..4: a GEMM whose ranks
// name nodes of their own checkpoints at the boundaries its interval picks, every rank's
// tiles come back bit-identical from its buddy's copy and from its own after they were
// overwritten (tiles unchanged since the previous checkpoint travel as empty messages and
// come back from the previous copy), the copies held are those kept_copies() names for the buddies
// choose_buddies() picks (older ones freed), the counts and bytes in the rank statistics
// add up, the interval follows Young/Daly from the measured cost, and a restore that cannot
// be done is refused on every rank with the reason.

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bellows/examples/app.hpp"
#include "bellows/runtime/buddies.hpp"
#include "bellows/runtime/recovery_plan.hpp"
#include "bellows/runtime/runtime.hpp"
#include "gemm_tasks.hpp"
#include "mpi_test_support.hpp"
#include "tiled_gemm.hpp"

namespace br = bellows::runtime;
namespace be = bellows::examples;
namespace bt = bellows::testing;
using bt::MpiTest;

namespace {

constexpr int kN = 384;
constexpr int kTile = 96;
constexpr unsigned kSeed = 5;

/// Every local tile's contents, in (n, m) order.
using TileContents = std::vector<std::vector<double>>;

TileContents local_contents(br::TiledMatrix& matrix) {
  TileContents out;
  matrix.for_each_local_tile([&](int, int, br::Tile& t) {
    out.emplace_back(t.data(), t.data() + t.elements());
  });
  return out;
}

/// Replaces every local tile by a new one of other contents (what a lost rank's memory
/// would hold: nothing of the checkpoint).
void overwrite(br::TiledMatrix& matrix, double value) {
  std::vector<std::pair<int, int>> local;
  matrix.for_each_local_tile([&](int m, int n, br::Tile&) { local.emplace_back(m, n); });
  for (const auto& [m, n] : local) {
    auto t = std::make_shared<br::Tile>(matrix.rows_of_tile(m), matrix.cols_of_tile(n));
    std::fill(t->data(), t->data() + t->elements(), value);
    matrix.set_tile(m, n, std::move(t));
  }
}

bool same_bits(const TileContents& a, const TileContents& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() ||
        std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(double)) != 0) {
      return false;
    }
  }
  return true;
}

/// A GEMM C = A * B on the CPU, its three collections registered with a runtime whose
/// checkpoints are configured by `checkpoint` (enabled), each rank on node `node`.
struct Gemm : bellows::test::TiledGemm {
  std::unique_ptr<br::Runtime> runtime;

  Gemm(br::CheckpointOptions checkpoint, const std::string& node)
      : TiledGemm(kN, kTile, bt::world_size(), bt::world_rank(), kSeed) {
    br::RuntimeOptions options;
    options.comm_max_sleep_us = 100;
    checkpoint.enabled = true;
    checkpoint.node = node;
    options.checkpoint = checkpoint;
    runtime = std::make_unique<br::Runtime>(MPI_COMM_WORLD, options);
    attach(*runtime);
  }

  /// Every local tile of A, B and C, in that order.
  [[nodiscard]] TileContents contents() {
    TileContents all;
    for (auto* m : {&a, &b, &c}) {
      for (auto& tile : local_contents(*m)) all.push_back(std::move(tile));
    }
    return all;
  }
  void overwrite_all(double value) {
    overwrite(a, value);
    overwrite(b, value);
    overwrite(c, value);
  }
  [[nodiscard]] std::uint64_t own_bytes() {
    std::uint64_t bytes = 0;
    for (auto* m : {&a, &b, &c}) m->for_each_local_tile([&](int, int, br::Tile& t) { bytes += t.bytes(); });
    return bytes;
  }
  /// Per rank: the tiles it owns over the three collections (as choose_buddies counts them).
  [[nodiscard]] std::vector<long> held() const {
    std::vector<long> out(static_cast<std::size_t>(bt::world_size()), 0);
    for (const auto* m : {&a, &b, &c}) {
      for (int n = 0; n < m->tile_cols(); ++n) {
        for (int t = 0; t < m->tile_rows(); ++t) ++out[static_cast<std::size_t>(m->owner(t, n))];
      }
    }
    return out;
  }
};

std::string node_of_rank() { return "node" + std::to_string(bt::world_rank()); }

/// Every rank's checkpoint_copies() as (owner, holder, iteration, complete), on every rank.
std::vector<std::tuple<int, int, long, bool>> all_copies(const br::Runtime& runtime) {
  std::vector<long> mine;
  for (const auto& copy : runtime.checkpoint_copies()) {
    mine.insert(mine.end(), {copy.owner, copy.holder, copy.iteration, copy.complete() ? 1L : 0L});
  }
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(bt::world_size())), offsets(counts.size());
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = total;
    total += counts[r];
  }
  std::vector<long> all(static_cast<std::size_t>(total));
  MPI_Allgatherv(mine.data(), count, MPI_LONG, all.data(), counts.data(), offsets.data(), MPI_LONG,
                 MPI_COMM_WORLD);
  std::vector<std::tuple<int, int, long, bool>> out;
  for (std::size_t i = 0; i + 3 < all.size(); i += 4) {
    out.emplace_back(static_cast<int>(all[i]), static_cast<int>(all[i + 1]), all[i + 2], all[i + 3] != 0);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_F(MpiTest, CheckpointComesBackBitIdenticalFromTheBuddyAndFromTheOwnCopy) {
  br::CheckpointOptions every_two;
  every_two.every_iterations = 2;
  Gemm gemm(every_two, node_of_rank());
  const int size = bt::world_size(), rank = bt::world_rank();

  // Boundaries 0 and 2 take checkpoints: at the start of iterations 1 and 3.
  const auto first = gemm.runtime->run_iteration();
  EXPECT_EQ(first.local.checkpoint.checkpoints, 1U);
  EXPECT_EQ(gemm.runtime->last_checkpoint(), 0L);
  const auto second = gemm.runtime->run_iteration();
  EXPECT_EQ(second.local.checkpoint.checkpoints, 0U) << "the interval is 2 iterations";
  const auto at_two = gemm.contents();
  const auto c_at_two = gemm.c.gather_to_root(MPI_COMM_WORLD);
  const auto third = gemm.runtime->run_iteration();
  EXPECT_EQ(third.local.checkpoint.checkpoints, 1U);
  EXPECT_EQ(third.local.checkpoint.interval_iterations, 2);
  ASSERT_EQ(gemm.runtime->last_checkpoint(), 2L);

  // The buddies: choose_buddies over the ranks' nodes and tile counts, never the rank itself.
  std::vector<std::string> nodes;
  for (int r = 0; r < size; ++r) nodes.push_back("node" + std::to_string(r));
  const auto buddies = gemm.runtime->checkpoint_buddies();
  EXPECT_EQ(buddies, br::choose_buddies(nodes, gemm.held()));
  ASSERT_EQ(buddies.size(), static_cast<std::size_t>(size));
  const int buddy = buddies[static_cast<std::size_t>(rank)];
  ASSERT_GE(buddy, 0);
  ASSERT_NE(buddy, rank);

  // What was sent is what the buddies received: at the first checkpoint every tile a rank
  // owns, at the second only C's (A and B are the tiles the buddy's copy already holds).
  EXPECT_EQ(first.local.checkpoint.bytes_sent, gemm.own_bytes());
  EXPECT_EQ(first.local.checkpoint.tiles_unchanged, 0U);
  EXPECT_EQ(bt::sum_over_ranks(first.local.checkpoint.bytes_sent),
            bt::sum_over_ranks(first.local.checkpoint.bytes_received));
  std::uint64_t c_bytes = 0, a_and_b_tiles = 0;
  gemm.c.for_each_local_tile([&](int, int, br::Tile& t) { c_bytes += t.bytes(); });
  gemm.a.for_each_local_tile([&](int, int, br::Tile&) { ++a_and_b_tiles; });
  gemm.b.for_each_local_tile([&](int, int, br::Tile&) { ++a_and_b_tiles; });
  EXPECT_EQ(third.local.checkpoint.bytes_sent, c_bytes);
  EXPECT_EQ(third.local.checkpoint.tiles_unchanged, a_and_b_tiles);
  EXPECT_EQ(bt::sum_over_ranks(third.local.checkpoint.bytes_sent),
            bt::sum_over_ranks(third.local.checkpoint.bytes_received));
  EXPECT_EQ(bt::sum_over_ranks(third.local.checkpoint.bytes_held),
            bt::sum_over_ranks(gemm.own_bytes()))
      << "every rank's copy is held at its buddy, the older ones freed";

  // The copies held: exactly kept_copies() of the latest checkpoint, all complete.
  std::vector<std::tuple<int, int, long, bool>> expected;
  for (const auto& kept : br::kept_copies(buddies)) expected.emplace_back(kept.owner, kept.holder, 2L, true);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all_copies(*gemm.runtime), expected);

  // Overwritten, then restored from the buddies' copies.
  gemm.overwrite_all(-7.0);
  std::vector<br::CheckpointSource> from_buddies;
  for (int r = 0; r < size; ++r) from_buddies.push_back({r, buddies[static_cast<std::size_t>(r)]});
  gemm.runtime->restore_checkpoint(2, from_buddies);
  EXPECT_TRUE(bt::all_ranks(same_bits(gemm.contents(), at_two)))
      << "tiles restored from the buddies differ from the tiles at the checkpoint";

  // Overwritten again, then restored from the ranks' own copies.
  gemm.overwrite_all(3.0);
  std::vector<br::CheckpointSource> own;
  for (int r = 0; r < size; ++r) own.push_back({r, r});
  gemm.runtime->restore_checkpoint(2, own);
  EXPECT_TRUE(bt::all_ranks(same_bits(gemm.contents(), at_two)))
      << "tiles restored from the own copies differ from the tiles at the checkpoint";

  // One rank alone rolls back (a team of one): the others keep what they hold.
  gemm.overwrite_all(5.0);
  const auto overwritten = gemm.contents();
  const std::vector<br::CheckpointSource> first_rank_only{{0, buddies[0]}};
  gemm.runtime->restore_checkpoint(2, first_rank_only);
  EXPECT_TRUE(same_bits(gemm.contents(), rank == 0 ? at_two : overwritten)) << "rank " << rank;
  gemm.runtime->restore_checkpoint(2, own);

  // The job runs on from the restored tiles: iteration 4 computes the C of iteration 2.
  (void)gemm.runtime->run_iteration();
  const auto c_after = gemm.c.gather_to_root(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_TRUE(c_after.size() == c_at_two.size() &&
                std::memcmp(c_after.data(), c_at_two.data(), c_at_two.size() * sizeof(double)) == 0);
  }
}

TEST_F(MpiTest, RestoreThatCannotBeDoneIsRefusedOnEveryRankWithTheReason) {
  br::CheckpointOptions every_iteration;
  every_iteration.every_iterations = 1;
  Gemm gemm(every_iteration, node_of_rank());
  const int size = bt::world_size();
  for (int it = 0; it < 3; ++it) (void)gemm.runtime->run_iteration();
  ASSERT_EQ(gemm.runtime->last_checkpoint(), 2L);
  const auto buddies = gemm.runtime->checkpoint_buddies();

  const std::vector<br::CheckpointSource> own_of_first{{0, 0}};
  try {
    gemm.runtime->restore_checkpoint(1, own_of_first);
    ADD_FAILURE() << "a superseded checkpoint was restored";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "restore_checkpoint: no complete checkpoint of iteration 1 (complete: 2)");
  }
  const std::vector<br::CheckpointSource> twice{{0, 0}, {0, buddies[0]}};
  try {
    gemm.runtime->restore_checkpoint(2, twice);
    ADD_FAILURE() << "an owner named twice was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "restore_checkpoint: rank 0 is named twice");
  }
  const std::vector<br::CheckpointSource> out_of_range{{size, 0}};
  try {
    gemm.runtime->restore_checkpoint(2, out_of_range);
    ADD_FAILURE() << "a rank out of range was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "restore_checkpoint: rank " + std::to_string(size) +
                                         " from rank 0: the job has ranks 0 to " +
                                         std::to_string(size - 1));
  }
  if (size >= 3) {
    // A rank that is neither rank 0 nor its buddy holds no copy of rank 0's checkpoint.
    int stranger = 1;
    while (stranger == buddies[0]) ++stranger;
    const std::vector<br::CheckpointSource> wrong_holder{{0, stranger}};
    try {
      gemm.runtime->restore_checkpoint(2, wrong_holder);
      ADD_FAILURE() << "a copy rank " << stranger << " does not keep was restored";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "restore_checkpoint: rank " + std::to_string(stranger) +
                    " keeps no copy of rank 0's checkpoint of iteration 2 (its copies are at rank 0 "
                    "and rank " + std::to_string(buddies[0]) + ")");
    }
  }
  // The refusals moved nothing: the runtime goes on.
  const auto report = gemm.runtime->run_iteration();
  EXPECT_EQ(report.local.checkpoint.checkpoints, 1U);
}

TEST_F(MpiTest, RanksOfOneNodeKeepTheirOwnCopiesOnly) {
  br::CheckpointOptions every_iteration;
  every_iteration.every_iterations = 1;
  Gemm gemm(every_iteration, "one-node");
  const int size = bt::world_size();
  (void)gemm.runtime->run_iteration();
  const auto report = gemm.runtime->run_iteration();
  EXPECT_EQ(report.local.checkpoint.checkpoints, 1U);
  EXPECT_EQ(report.local.checkpoint.bytes_sent, 0U) << "no rank of another node to send to";
  EXPECT_EQ(report.local.checkpoint.bytes_held, 0U);
  EXPECT_EQ(gemm.runtime->checkpoint_buddies(), std::vector<int>(static_cast<std::size_t>(size), -1));
  std::vector<std::tuple<int, int, long, bool>> expected;
  for (int r = 0; r < size; ++r) expected.emplace_back(r, r, 1L, true);
  EXPECT_EQ(all_copies(*gemm.runtime), expected);
  const auto at_one = gemm.contents();
  gemm.overwrite_all(9.0);
  std::vector<br::CheckpointSource> own;
  for (int r = 0; r < size; ++r) own.push_back({r, r});
  gemm.runtime->restore_checkpoint(1, own);
  EXPECT_TRUE(bt::all_ranks(same_bits(gemm.contents(), at_one)));
}

TEST_F(MpiTest, IntervalFollowsYoungDalyFromTheMeasuredCost) {
  constexpr int kIterations = 4;
  // Nodes that fail every microsecond: the optimum interval is shorter than an iteration,
  // so every boundary takes a checkpoint (at least 1 iteration).
  br::CheckpointOptions fragile;
  fragile.node_mean_time_between_failures_seconds = 1e-6;
  Gemm often(fragile, node_of_rank());
  std::uint64_t taken = 0;
  for (int it = 0; it < kIterations; ++it) taken += often.runtime->run_iteration().local.checkpoint.checkpoints;
  EXPECT_EQ(taken, static_cast<std::uint64_t>(kIterations));
  EXPECT_EQ(often.runtime->stats().checkpoint.interval_iterations, 1);

  // The default, a year per node: after the first checkpoint, none for far longer.
  Gemm rarely(br::CheckpointOptions{}, node_of_rank());
  taken = 0;
  for (int it = 0; it < kIterations; ++it) taken += rarely.runtime->run_iteration().local.checkpoint.checkpoints;
  EXPECT_EQ(taken, 1U) << "only the first boundary";
  EXPECT_GT(rarely.runtime->stats().checkpoint.interval_iterations, 100)
      << "a checkpoint of milliseconds every iteration of milliseconds, with a node failing once a year";
  EXPECT_GT(rarely.runtime->stats().checkpoint.post_seconds, 0.0);
}

TEST_F(MpiTest, CheckpointsOffTakeNoneAndHoldNothing) {
  bellows::test::TiledGemm gemm(kN, kTile, bt::world_size(), bt::world_rank(), kSeed);
  br::Runtime runtime(MPI_COMM_WORLD, br::RuntimeOptions{});
  gemm.attach(runtime);
  const auto report = runtime.run_iteration();
  EXPECT_EQ(report.local.checkpoint.checkpoints, 0U);
  EXPECT_EQ(report.local.checkpoint.bytes_sent, 0U);
  EXPECT_TRUE(runtime.checkpoint_copies().empty());
  EXPECT_FALSE(runtime.last_checkpoint().has_value());
}
