// choose_tile_size(): the tile size from measured kernel speeds, with made-up speeds (no MPI).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/tile_size.hpp"

using bellows::runtime::choose_tile_size;
using bellows::runtime::predict_tile_time;
using bellows::runtime::tile_problem_error;
using bellows::runtime::tile_size_candidates;
using bellows::runtime::TileCandidate;
using bellows::runtime::TileGraph;
using bellows::runtime::TileProblem;

namespace {

TileProblem problem_of(TileGraph graph, int n, int ranks, double overhead_seconds = 10e-6) {
  TileProblem p;
  p.graph = graph;
  p.n = n;
  p.ranks = ranks;
  p.workers_per_rank = 1;
  p.task_overhead_seconds = overhead_seconds;
  return p;
}

/// One core's DGEMM as it behaves on a typical CPU: slower on small tiles, flat from 256 on.
std::vector<TileCandidate> typical_cpu() {
  return {{64, 25.0, 0.0}, {128, 40.0, 0.0}, {256, 50.0, 0.0}, {512, 55.0, 0.0},
          {1024, 57.0, 0.0}};
}

std::string refusal(const TileProblem& p, const std::vector<TileCandidate>& c) {
  try {
    (void)choose_tile_size(p, c);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST(TileSize, GemmPredictionAddsUpItsParts) {
  // N 1024, tile 512: 2 x 2 x 2 GEMM tasks of 2 x 512^3 flops at 50 GFLOP/s, 10 us each;
  // 4 tiles of C over 2 ranks (2 each, no imbalance), a chain of 2 tasks.
  const auto p = predict_tile_time(problem_of(TileGraph::gemm, 1024, 2), {512, 50.0, 0.0});
  const double task = 2.0 * 512.0 * 512.0 * 512.0 / 50e9 + 10e-6;
  EXPECT_EQ(p.tile, 512);
  EXPECT_DOUBLE_EQ(p.tasks, 8.0);
  EXPECT_NEAR(p.work_seconds, 8.0 * task, 1e-12);
  EXPECT_DOUBLE_EQ(p.imbalance, 1.0);
  EXPECT_NEAR(p.critical_path_seconds, 2.0 * task, 1e-12);
  EXPECT_NEAR(p.predicted_seconds, 8.0 * task / 2.0 + 2.0 * task, 1e-12);
}

TEST(TileSize, CholeskyCountsItsTasksAndPanelSpeed) {
  // N 1024, tile 256: T = 4, 4 POTRF, 6 TRSM, 6 SYRK, 4 GEMM.
  const auto p =
      predict_tile_time(problem_of(TileGraph::cholesky, 1024, 1, 0.0), {256, 60.0, 30.0});
  const double b3 = 256.0 * 256.0 * 256.0;
  EXPECT_DOUBLE_EQ(p.tasks, 20.0);
  const double work = 4 * (b3 / 3) / 30e9 + 12 * b3 / 30e9 + 4 * 2 * b3 / 60e9;
  EXPECT_NEAR(p.work_seconds, work, 1e-12);
  EXPECT_NEAR(p.critical_path_seconds, 4 * (b3 / 3) / 30e9 + 3 * 2 * b3 / 30e9, 1e-12);
  // A panel speed of 0 means the GEMM speed.
  const auto same = predict_tile_time(problem_of(TileGraph::cholesky, 1024, 1, 0.0), {256, 60.0, 0.0});
  EXPECT_NEAR(same.work_seconds, (4 * (b3 / 3) + 12 * b3 + 8 * b3) / 60e9, 1e-12);
}

TEST(TileSize, TooFewTilesPerRankCountAsImbalance) {
  // N 1024, tile 512 on 3 ranks: 4 tiles of C, the busiest rank holds 2 (4/3 on average).
  const auto p = predict_tile_time(problem_of(TileGraph::gemm, 1024, 3), {512, 50.0, 0.0});
  EXPECT_NEAR(p.imbalance, 2.0 / (4.0 / 3.0), 1e-12);
  // One rank of 4 workers holding 1 tile (tile = n): 3 workers idle.
  auto one = problem_of(TileGraph::gemm, 1024, 1);
  one.workers_per_rank = 4;
  EXPECT_DOUBLE_EQ(predict_tile_time(one, {1024, 50.0, 0.0}).imbalance, 4.0);
}

TEST(TileSize, SmallMatrixPicksSmallTilesForParallelism) {
  for (const auto graph : {TileGraph::gemm, TileGraph::cholesky}) {
    auto candidates = typical_cpu();
    candidates.pop_back();  // 1024 > N
    const auto choice = choose_tile_size(problem_of(graph, 512, 4), candidates);
    EXPECT_LE(choice.tile, 128) << "graph " << static_cast<int>(graph);
    EXPECT_EQ(choice.predictions.size(), 4u);
  }
}

TEST(TileSize, FastBigTileKernelsPickBigTiles) {
  // A kernel that only reaches its speed on big tiles (a GPU-like curve), N 4096 on 2 ranks.
  const std::vector<TileCandidate> curve{
      {128, 20.0, 0.0}, {256, 40.0, 0.0}, {512, 60.0, 0.0}, {1024, 100.0, 0.0}};
  EXPECT_EQ(choose_tile_size(problem_of(TileGraph::gemm, 4096, 2), curve).tile, 1024);
  // A flat curve picks smaller tiles on the same problem: the speed is what made it 1024.
  const std::vector<TileCandidate> flat{
      {128, 60.0, 0.0}, {256, 60.0, 0.0}, {512, 60.0, 0.0}, {1024, 60.0, 0.0}};
  EXPECT_LT(choose_tile_size(problem_of(TileGraph::gemm, 4096, 2), flat).tile, 1024);
}

TEST(TileSize, OverheadPushesTilesUp) {
  const std::vector<TileCandidate> flat{
      {64, 50.0, 0.0}, {128, 50.0, 0.0}, {256, 50.0, 0.0}, {512, 50.0, 0.0}};
  const int free_tasks = choose_tile_size(problem_of(TileGraph::cholesky, 2048, 2, 0.0), flat).tile;
  const int costly = choose_tile_size(problem_of(TileGraph::cholesky, 2048, 2, 2e-3), flat).tile;
  EXPECT_EQ(free_tasks, 64);
  EXPECT_GT(costly, free_tasks);
  // More overhead never picks a smaller tile.
  int previous = 0;
  for (const double overhead : {0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2}) {
    const int tile = choose_tile_size(problem_of(TileGraph::gemm, 2048, 2, overhead), flat).tile;
    EXPECT_GE(tile, previous) << "overhead " << overhead;
    previous = tile;
  }
}

TEST(TileSize, MovingTilesAddsTheirBytesToEachTask) {
  // GEMM reads and writes 3 tiles: 3 x 8 x 512^2 bytes at 1 ns a byte.
  auto problem = problem_of(TileGraph::gemm, 1024, 2, 0.0);
  const double free_moves = predict_tile_time(problem, {512, 50.0, 0.0}).work_seconds;
  problem.seconds_per_tile_byte = 1e-9;
  const double moves = predict_tile_time(problem, {512, 50.0, 0.0}).work_seconds;
  EXPECT_NEAR(moves - free_moves, 8.0 * 3.0 * 8.0 * 512.0 * 512.0 * 1e-9, 1e-12);
  // Bytes grow as b^2 and flops as b^3: with a flat kernel speed, slow moves push tiles up.
  const std::vector<TileCandidate> flat{{128, 60.0, 0.0}, {256, 60.0, 0.0}, {512, 60.0, 0.0},
                                        {1024, 60.0, 0.0}};
  auto gemm = problem_of(TileGraph::gemm, 4096, 2, 0.0);
  const int free_tile = choose_tile_size(gemm, flat).tile;
  gemm.seconds_per_tile_byte = 1.0 / 5e9;
  EXPECT_GT(choose_tile_size(gemm, flat).tile, free_tile);
}

TEST(TileSize, TiesGoToTheSmallestTileWhateverTheOrder) {
  auto p = problem_of(TileGraph::gemm, 4096, 2);
  auto candidates = typical_cpu();
  const auto first = choose_tile_size(p, candidates);
  std::reverse(candidates.begin(), candidates.end());
  EXPECT_EQ(choose_tile_size(p, candidates).tile, first.tile);
  // The predictions come back in the candidates' order.
  EXPECT_EQ(choose_tile_size(p, candidates).predictions.front().tile, 1024);
  // Tile 512 a little faster than 256 (within 2 %): 256 wins the tie; without a tie margin, 512.
  const std::vector<TileCandidate> close{{256, 50.0, 0.0}, {512, 51.0, 0.0}};
  const auto both = choose_tile_size(p, close);
  const double t256 = both.predictions[0].predicted_seconds;
  const double t512 = both.predictions[1].predicted_seconds;
  ASSERT_GT(t256, t512);
  ASSERT_LT(t256, t512 * 1.02);
  EXPECT_EQ(both.tile, 256);
  p.tie_fraction = 0.0;
  EXPECT_EQ(choose_tile_size(p, close).tile, 512);
}

TEST(TileSize, BadInputIsRefusedByName) {
  const auto p = problem_of(TileGraph::gemm, 1024, 2);
  EXPECT_EQ(tile_problem_error(p, typical_cpu()), "");
  EXPECT_EQ(refusal(p, {}), "tile size: no candidate tile size");
  EXPECT_EQ(refusal(p, {{256, 50.0, 0.0}, {256, 40.0, 0.0}}),
            "tile size: candidate 1 (tile 256): tile listed twice");
  EXPECT_EQ(refusal(p, {{2048, 50.0, 0.0}}),
            "tile size: candidate 0 (tile 2048): tile must be from 1 to the matrix order 1024");
  EXPECT_EQ(refusal(p, {{256, 0.0, 0.0}}),
            "tile size: candidate 0 (tile 256): GEMM speed must be a positive finite GFLOP/s, got 0.000000");
  EXPECT_EQ(refusal(p, {{256, NAN, 0.0}}).substr(0, 70),
            std::string("tile size: candidate 0 (tile 256): GEMM speed must be a positive finite GFLOP/s, got ").substr(0, 70));
  EXPECT_EQ(refusal(p, {{256, 50.0, -1.0}}),
            "tile size: candidate 0 (tile 256): panel speed must be a finite GFLOP/s of at least 0, got -1.000000");
  auto bad = p;
  bad.n = 0;
  EXPECT_EQ(refusal(bad, typical_cpu()), "tile size: matrix order must be at least 1, got 0");
  bad = p;
  bad.ranks = 0;
  EXPECT_EQ(refusal(bad, typical_cpu()), "tile size: ranks must be at least 1, got 0");
  bad = p;
  bad.workers_per_rank = -1;
  EXPECT_EQ(refusal(bad, typical_cpu()), "tile size: workers per rank must be at least 1, got -1");
  bad = p;
  bad.seconds_per_tile_byte = INFINITY;
  EXPECT_EQ(refusal(bad, typical_cpu()),
            "tile size: seconds per tile byte must be a finite number of at least 0, got inf");
  bad = p;
  bad.task_overhead_seconds = -1e-6;
  EXPECT_EQ(refusal(bad, typical_cpu()),
            "tile size: task overhead must be a finite number of seconds of at least 0, got -0.000001");
}

TEST(TileSize, CandidatesAreMultiplesOf32ThatDivideTheOrder) {
  EXPECT_EQ(tile_size_candidates(4096), (std::vector<int>{64, 128, 256, 512, 1024}));
  EXPECT_EQ(tile_size_candidates(6144),
            (std::vector<int>{64, 96, 128, 192, 256, 384, 512, 768, 1024}));
  EXPECT_EQ(tile_size_candidates(192), (std::vector<int>{64, 96, 192}));
  EXPECT_TRUE(tile_size_candidates(300).empty());
  EXPECT_TRUE(tile_size_candidates(0).empty());
  EXPECT_EQ(tile_size_candidates(4096, 256, 512), (std::vector<int>{256, 512}));
}
