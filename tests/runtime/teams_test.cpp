// plan_teams(): TeamLB's teams and balance over small tile graphs whose best cut is plain,
// partitioning ranks and partitioning tiles (no MPI).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/teams.hpp"
#include "thrown_message.hpp"

using bellows::runtime::consecutive_teams;
using bellows::runtime::load_imbalance;
using bellows::runtime::EdgeCut;
using bellows::runtime::message_cut;
using bellows::runtime::most_balanced_within;
using bellows::runtime::plan_teams;
using bellows::runtime::TeamCandidate;
using bellows::runtime::TeamPlan;
using bellows::runtime::TeamRequest;
using bellows::runtime::TeamUnit;
using bellows::runtime::TeamWeighting;
using bellows::runtime::TileMove;
using bellows::runtime::TileTraffic;
using bellows::testing::thrown_message;

namespace {

/// Cliques of `size` tiles each (tiles c*size .. c*size+size-1), in every pair inside a
/// clique the lower tile reading 100 bytes of the higher, the last tile of a clique reading 1
/// byte of the first of the next.
std::vector<TileTraffic> cliques(int count, int size) {
  std::vector<TileTraffic> traffic;
  for (int c = 0; c < count; ++c) {
    for (int a = c * size; a < (c + 1) * size; ++a) {
      for (int b = a + 1; b < (c + 1) * size; ++b) traffic.push_back({a, b, 100.0});
    }
    if (c + 1 < count) traffic.push_back({(c + 1) * size - 1, (c + 1) * size, 1.0});
  }
  return traffic;
}

struct TwoCliques {
  std::vector<TileTraffic> traffic = cliques(2, 4);
  std::vector<double> seconds{4, 3, 2, 1, 4, 3, 2, 1};
  // Clique 0 mostly on ranks 0-1 (team 0), clique 1 mostly on ranks 2-3 (team 1).
  std::vector<int> holders{0, 1, 0, 2, 2, 3, 3, 1};

  TeamRequest request(int team_size, TeamWeighting weighting = TeamWeighting::load) const {
    return {4, team_size, seconds, holders, traffic, weighting, TeamUnit::tiles};
  }
};

std::vector<double> rank_loads(const std::vector<int>& holders, const std::vector<double>& seconds,
                               int ranks) {
  std::vector<double> loads(static_cast<std::size_t>(ranks), 0.0);
  for (std::size_t t = 0; t < holders.size(); ++t) {
    loads[static_cast<std::size_t>(holders[t])] += seconds[t];
  }
  return loads;
}

/// Eight tiles, tile t on rank t % 4: ranks 0 and 2 read each other's tiles (100 bytes each
/// way), so do ranks 1 and 3; rank 0 reads 1 byte of rank 1.
struct PairedRanks {
  std::vector<TileTraffic> traffic{{0, 2, 100.0}, {6, 4, 100.0}, {1, 3, 100.0},
                                   {7, 5, 100.0}, {0, 1, 1.0}};
  std::vector<double> seconds = std::vector<double>(8, 1.0);
  std::vector<int> holders{0, 1, 2, 3, 0, 1, 2, 3};

  TeamRequest request(int team_size) const {
    return {4, team_size, seconds, holders, traffic, TeamWeighting::load, TeamUnit::ranks};
  }
};

/// Right-looking Cholesky on `tiles` x `tiles` tiles over a `grid` x `grid` process grid
/// (tile (m, n) on rank grid (m mod grid) + (n mod grid)), as the examples' task graph: each
/// tile weighs its tasks' flops, each task reads its panels (8 bytes a tile).
struct CholeskyGraph {
  std::vector<int> holders;
  std::vector<double> seconds;
  std::vector<TileTraffic> traffic;

  CholeskyGraph(int tiles, int grid) {
    const auto slot = [tiles](int m, int n) { return static_cast<std::size_t>(m * tiles + n); };
    holders.resize(slot(tiles, 0));
    seconds.assign(holders.size(), 0.0);
    for (int m = 0; m < tiles; ++m) {
      for (int n = 0; n < tiles; ++n) holders[slot(m, n)] = grid * (m % grid) + n % grid;
    }
    const auto read = [&](std::size_t reader, std::size_t tile) {
      traffic.push_back({static_cast<int>(reader), static_cast<int>(tile), 8.0});
    };
    for (int k = 0; k < tiles; ++k) {
      seconds[slot(k, k)] += 1.0;
      for (int m = k + 1; m < tiles; ++m) {
        read(slot(m, k), slot(k, k));
        read(slot(m, m), slot(m, k));
        seconds[slot(m, k)] += 3.0;
        seconds[slot(m, m)] += 3.0;
        for (int n = k + 1; n < m; ++n) {
          read(slot(m, n), slot(m, k));
          read(slot(m, n), slot(n, k));
          seconds[slot(m, n)] += 6.0;
        }
      }
    }
  }
};

/// C += A B over `tiles` x `tiles` tiles of each on a `grid` x `grid` process grid, with
/// product (i, j, k) present when k < tiles >> (i mod 3) and k < tiles >> (j mod 2): rows
/// and columns of C that carry up to six times the work of others, as the bspgemm
/// example's skewed pattern does.
struct SkewedGemmGraph {
  std::vector<int> holders;
  std::vector<double> seconds;
  std::vector<TileTraffic> traffic;

  SkewedGemmGraph(int tiles, int grid) {
    const auto slot = [tiles](int matrix, int m, int n) {
      return static_cast<std::size_t>((matrix * tiles + m) * tiles + n);
    };
    holders.resize(slot(3, 0, 0));
    seconds.assign(holders.size(), 0.0);
    for (int matrix = 0; matrix < 3; ++matrix) {
      for (int m = 0; m < tiles; ++m) {
        for (int n = 0; n < tiles; ++n) holders[slot(matrix, m, n)] = grid * (m % grid) + n % grid;
      }
    }
    for (int i = 0; i < tiles; ++i) {
      for (int j = 0; j < tiles; ++j) {
        const int ks = std::min(tiles >> (i % 3), tiles >> (j % 2));
        for (int k = 0; k < ks; ++k) {
          seconds[slot(2, i, j)] += 1.0;
          traffic.push_back({static_cast<int>(slot(2, i, j)), static_cast<int>(slot(0, i, k)), 8.0});
          traffic.push_back({static_cast<int>(slot(2, i, j)), static_cast<int>(slot(1, k, j)), 8.0});
        }
      }
    }
  }
};

double heaviest_rank(const TeamPlan& plan, const std::vector<double>& seconds, int ranks) {
  const std::vector<double> loads = rank_loads(plan.tile_holders, seconds, ranks);
  return *std::max_element(loads.begin(), loads.end());
}

// ---------------------------------------------------------------- teams of ranks

TEST(PlanTeamsOfRanks, RanksThatTalkShareATeamWhereConsecutiveTeamsSplitThem) {
  const PairedRanks job;
  const TeamPlan plan = plan_teams(job.request(2));
  EXPECT_EQ(plan.team_size, 2);
  EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(plan.tile_holders, job.holders);  // balanced already: nothing moves
  EXPECT_TRUE(plan.moves.empty());
  // Five messages of 401 bytes; only rank 1's byte to rank 0 crosses.
  EXPECT_DOUBLE_EQ(plan.cut.total_bytes, 401.0);
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 1.0);
  EXPECT_EQ(plan.cut.logged_bytes, (std::vector<double>{0, 1, 0, 0}));

  const auto consecutive = message_cut(job.traffic, job.holders, consecutive_teams(4, 2));
  EXPECT_DOUBLE_EQ(consecutive.crossing_bytes, 400.0);
  EXPECT_EQ(consecutive.logged_bytes, (std::vector<double>{100, 100, 100, 100}));
}

TEST(PlanTeamsOfRanks, TilesMoveOnlyInsideTheirTeamToEvenItsLoad) {
  PairedRanks job;
  job.seconds = {4, 1, 1, 1, 2, 1, 1, 1};  // rank 0 carries 6, rank 2 carries 2
  const TeamPlan plan = plan_teams(job.request(2));
  ASSERT_EQ(plan.rank_team, (std::vector<int>{0, 1, 0, 1}));
  // Team {0, 2} averages 4: tile 0 (4) stays on rank 0, tile 4 (2) would take rank 0 past
  // the average and goes to rank 2, tiles 2 and 6 stay on rank 2.
  EXPECT_EQ(plan.moves, (std::vector<TileMove>{{4, 0, 2}}));
  EXPECT_EQ(rank_loads(plan.tile_holders, job.seconds, 4), (std::vector<double>{4, 2, 4, 2}));
  EXPECT_EQ(plan.imbalance_before, (std::vector<double>{0.5, 0.0}));
  EXPECT_EQ(plan.imbalance_after, (std::vector<double>{0.0, 0.0}));
}

TEST(PlanTeamsOfRanks, TeamSizeOneAndOneTeamNeedNoPartitioner) {
  const PairedRanks job;
  const TeamPlan alone = plan_teams(job.request(1));
  EXPECT_EQ(alone.rank_team, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_DOUBLE_EQ(alone.cut.fraction(), 1.0);  // every message is logged
  EXPECT_TRUE(alone.moves.empty());
  const TeamPlan together = plan_teams(job.request(4));
  EXPECT_EQ(together.rank_team, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(together.cut.crossing_bytes, 0.0);
  EXPECT_EQ(together.cut.logged_bytes, (std::vector<double>{0, 0, 0, 0}));
}

TEST(PlanTeamsOfRanks, TeamsAreExactlyTheirSizeWhenTheGraphPullsOneWay) {
  // Rank 0 talks to all seven others alike; teams of 4 must still be 4 ranks each.
  std::vector<TileTraffic> traffic;
  for (int r = 1; r < 8; ++r) traffic.push_back({0, r, 50.0});
  const std::vector<double> seconds(8, 1.0);
  const std::vector<int> holders{0, 1, 2, 3, 4, 5, 6, 7};
  const TeamPlan plan =
      plan_teams({8, 4, seconds, holders, traffic, TeamWeighting::load, TeamUnit::ranks});
  EXPECT_EQ(std::count(plan.rank_team.begin(), plan.rank_team.end(), 0), 4);
  EXPECT_EQ(std::count(plan.rank_team.begin(), plan.rank_team.end(), 1), 4);
  EXPECT_EQ(plan.rank_team[0], 0);  // numbered by lowest rank
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 200.0);  // the four others of rank 0's team
}

TEST(PlanTeamsOfRanks, GemmOnAFourByFourGridTakesTheGridsRowsAsTeams) {
  // C(i,j) += A(i,k) B(k,j) on 4 x 4 tiles of each, tile (m, n) of every matrix on rank
  // 4 (m mod 4) + (n mod 4): a rank reads A from its grid row and B from its grid column, so
  // a row keeps half of its messages inside.
  const auto slot = [](int matrix, int m, int n) { return (matrix * 4 + m) * 4 + n; };
  std::vector<int> holders(48);
  for (int matrix = 0; matrix < 3; ++matrix) {
    for (int m = 0; m < 4; ++m) {
      for (int n = 0; n < 4; ++n) holders[static_cast<std::size_t>(slot(matrix, m, n))] = 4 * m + n;
    }
  }
  std::vector<TileTraffic> traffic;
  std::vector<double> seconds(48, 0.0);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) {
      seconds[static_cast<std::size_t>(slot(2, i, j))] = 4.0;
      for (int k = 0; k < 4; ++k) {
        traffic.push_back({slot(2, i, j), slot(0, i, k), 8.0});
        traffic.push_back({slot(2, i, j), slot(1, k, j), 8.0});
      }
    }
  }
  const TeamPlan plan =
      plan_teams({16, 4, seconds, holders, traffic, TeamWeighting::load, TeamUnit::ranks});
  EXPECT_EQ(plan.rank_team, consecutive_teams(16, 4));
  EXPECT_TRUE(plan.moves.empty());
  EXPECT_DOUBLE_EQ(plan.cut.total_bytes, 16 * 6 * 8.0);
  EXPECT_DOUBLE_EQ(plan.cut.fraction(), 0.5);
  EXPECT_EQ(plan.cut.logged_bytes, std::vector<double>(16, 3 * 8.0));
}

TEST(PlanTeamsOfRanks, TeamsNeverCutMoreThanConsecutiveRanksWhenLoadIsNotWeighed) {
  // Cholesky on 12 x 12 tiles over a 4 x 4 grid (tile (m, n) on rank 4 (m mod 4) +
  // (n mod 4)); teams of 4 and 8, judged before any tile moves.
  const int tiles = 12;
  const auto slot = [](int m, int n) { return m * tiles + n; };
  std::vector<int> holders(tiles * tiles);
  for (int m = 0; m < tiles; ++m) {
    for (int n = 0; n < tiles; ++n) holders[static_cast<std::size_t>(slot(m, n))] = 4 * (m % 4) + n % 4;
  }
  std::vector<TileTraffic> traffic;
  std::vector<double> seconds(holders.size(), 0.0);
  for (int k = 0; k < tiles; ++k) {
    seconds[static_cast<std::size_t>(slot(k, k))] += 1.0;
    for (int m = k + 1; m < tiles; ++m) {
      traffic.push_back({slot(m, k), slot(k, k), 8.0});
      traffic.push_back({slot(m, m), slot(m, k), 8.0});
      seconds[static_cast<std::size_t>(slot(m, k))] += 3.0;
      seconds[static_cast<std::size_t>(slot(m, m))] += 3.0;
      for (int n = k + 1; n < m; ++n) {
        traffic.push_back({slot(m, n), slot(m, k), 8.0});
        traffic.push_back({slot(m, n), slot(n, k), 8.0});
        seconds[static_cast<std::size_t>(slot(m, n))] += 6.0;
      }
    }
  }
  for (const int team_size : {4, 8}) {
    const TeamPlan plan = plan_teams(
        {16, team_size, seconds, holders, traffic, TeamWeighting::uniform, TeamUnit::ranks});
    const auto teams_only = message_cut(traffic, holders, plan.rank_team);
    const auto consecutive = message_cut(traffic, holders, consecutive_teams(16, team_size));
    EXPECT_LE(teams_only.crossing_bytes, consecutive.crossing_bytes) << "teams of " << team_size;
    for (int team = 0; team < 16 / team_size; ++team) {
      EXPECT_EQ(std::count(plan.rank_team.begin(), plan.rank_team.end(), team), team_size);
    }
  }
}

// ---------------------------------------------------------------- the bound on the cut

TEST(PlanTeamsWithinTheBound, TheCutStaysWithinTheBoundOfTheLoadBlindPartitionsOnTheExamplesGraphs) {
  const CholeskyGraph cholesky(16, 4);
  const SkewedGemmGraph gemm(12, 4);
  struct Graph {
    const char* name;
    const std::vector<int>& holders;
    const std::vector<double>& seconds;
    const std::vector<TileTraffic>& traffic;
  };
  for (const Graph& graph : {Graph{"cholesky", cholesky.holders, cholesky.seconds, cholesky.traffic},
                             Graph{"skewed gemm", gemm.holders, gemm.seconds, gemm.traffic}}) {
    for (const int team_size : {2, 4, 8}) {
      TeamRequest request{16, team_size, graph.seconds, graph.holders, graph.traffic,
                          TeamWeighting::uniform, TeamUnit::ranks};
      const TeamPlan blind = plan_teams(request);
      ASSERT_TRUE(blind.reference_cut.has_value());
      EXPECT_DOUBLE_EQ(blind.reference_cut->crossing_bytes, blind.cut.crossing_bytes);
      request.weighting = TeamWeighting::load;
      double heaviest_before = 0.0;
      for (const double bound : {0.0, 0.05, 0.10, 0.25, 1.0}) {
        request.cut_bound = bound;
        const TeamPlan plan = plan_teams(request);
        const std::string row = std::string(graph.name) + ", teams of " +
                                std::to_string(team_size) + ", bound " + std::to_string(bound);
        EXPECT_DOUBLE_EQ(plan.cut_bound, bound) << row;
        ASSERT_TRUE(plan.reference_cut.has_value()) << row;
        EXPECT_DOUBLE_EQ(plan.reference_cut->crossing_bytes, blind.cut.crossing_bytes) << row;
        EXPECT_LE(plan.cut.crossing_bytes, blind.cut.crossing_bytes * (1.0 + bound) * (1 + 1e-9)) << row;
        EXPECT_LE(plan.cut.fraction(), blind.cut.fraction() * (1.0 + bound) * (1 + 1e-9)) << row;
        for (int team = 0; team < 16 / team_size; ++team) {
          EXPECT_EQ(std::count(plan.rank_team.begin(), plan.rank_team.end(), team), team_size) << row;
        }
        // A wider bound admits every plan a narrower one did: never a heavier rank.
        const double heaviest = heaviest_rank(plan, graph.seconds, 16);
        if (bound > 0.0) {
          EXPECT_LE(heaviest, heaviest_before * (1 + 1e-9)) << row;
        }
        EXPECT_LE(heaviest, heaviest_rank(blind, graph.seconds, 16) * (1 + 1e-9)) << row;
        heaviest_before = heaviest;
      }
    }
  }
}

TEST(PlanTeamsWithinTheBound, AZeroBoundKeepsTheLoadBlindCutAndAWideOneBalances) {
  // Ranks 0 and 2 talk (100 bytes each way), so do ranks 1 and 3; ranks 0 and 2 carry four
  // times the work of ranks 1 and 3. The load-blind teams {0, 2} {1, 3} cross 1 byte and
  // leave ranks 0 and 2 with 8 seconds; teams {0, 1} {2, 3} even the loads to 5 and cross
  // hundreds of bytes.
  PairedRanks job;
  job.seconds = {4, 1, 4, 1, 4, 1, 4, 1};
  TeamRequest request = job.request(2);
  request.weighting = TeamWeighting::uniform;
  const TeamPlan blind = plan_teams(request);
  EXPECT_EQ(blind.rank_team, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_DOUBLE_EQ(blind.cut.crossing_bytes, 1.0);

  request.weighting = TeamWeighting::load;
  request.cut_bound = 0.0;
  const TeamPlan held = plan_teams(request);
  EXPECT_EQ(held.rank_team, blind.rank_team);
  EXPECT_DOUBLE_EQ(held.cut.crossing_bytes, 1.0);
  EXPECT_DOUBLE_EQ(heaviest_rank(held, job.seconds, 4), 8.0);

  request.cut_bound = 1000.0;
  const TeamPlan balanced = plan_teams(request);
  EXPECT_NE(balanced.rank_team, blind.rank_team);
  EXPECT_GT(balanced.cut.crossing_bytes, 1.0);
  EXPECT_LE(balanced.cut.crossing_bytes, 1001.0);
  EXPECT_DOUBLE_EQ(heaviest_rank(balanced, job.seconds, 4), 5.0);
}

TEST(PlanTeamsWithinTheBound, ABadBoundIsNamed) {
  const PairedRanks job;
  TeamRequest request = job.request(2);
  request.cut_bound = -0.1;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: cut bound -0.1 is not a finite fraction of 0 or more");
  request.cut_bound = std::nan("");
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: cut bound nan is not a finite fraction of 0 or more");
}

TEST(MostBalancedWithin, TheMostBalancedCandidateWithinTheBoundWins) {
  const auto cut = [](double crossing, double total) {
    EdgeCut c;
    c.crossing_bytes = crossing;
    c.total_bytes = total;
    return c;
  };
  const EdgeCut reference = cut(100, 200);
  const std::vector<TeamCandidate> candidates{
      {cut(100, 200), 9.0},  // the reference itself
      {cut(108, 200), 6.0},  // within 10 %
      {cut(115, 200), 4.0},  // more balanced, 15 % more bytes
      {cut(104, 180), 5.0},  // 4 % more bytes, but a share of 0.578: 16 % more
      {cut(109, 220), 7.0},
  };
  EXPECT_EQ(most_balanced_within(candidates, reference, 0.10), 1U);
  EXPECT_EQ(most_balanced_within(candidates, reference, 0.20), 2U);
  EXPECT_EQ(most_balanced_within(candidates, reference, 0.0), 0U);
  // Equally balanced: the fewer crossing bytes, then the first.
  const std::vector<TeamCandidate> ties{{cut(105, 200), 6.0}, {cut(102, 200), 6.0},
                                        {cut(102, 200), 6.0}};
  EXPECT_EQ(most_balanced_within(ties, reference, 0.10), 1U);
  EXPECT_EQ(thrown_message([&] { (void)most_balanced_within(candidates, reference, -1.0); }),
            "most_balanced_within: cut bound -1 is not a finite fraction of 0 or more");
  EXPECT_EQ(thrown_message([&] {
              (void)most_balanced_within(std::vector<TeamCandidate>{{cut(120, 200), 1.0}},
                                         reference, 0.10);
            }),
            "most_balanced_within: none of the 1 candidates' cuts is within 0.1 of the "
            "reference's 100 crossing bytes");
}

// ---------------------------------------------------------------- teams of tiles

TEST(PlanTeamsOfTiles, TwoCliquesJoinedByAThinEdgeBecomeTheTwoTeams) {
  const TwoCliques graph;
  const TeamPlan plan = plan_teams(graph.request(2));
  EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 0, 1, 1}));
  // Each clique goes to the team that held most of its tiles.
  EXPECT_EQ(std::vector<int>(plan.tile_holders.begin(), plan.tile_holders.begin() + 4),
            (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(std::vector<int>(plan.tile_holders.begin() + 4, plan.tile_holders.end()),
            (std::vector<int>{2, 3, 3, 2}));
  // Messages after: three of 100 bytes in each clique, and the thin byte, which crosses.
  EXPECT_DOUBLE_EQ(plan.cut.total_bytes, 601.0);
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 1.0);
  EXPECT_EQ(plan.cut.logged_bytes, (std::vector<double>{0, 0, 1, 0}));
}

TEST(PlanTeamsOfTiles, InsideATeamTheHeaviestTileGoesToTheLeastLoadedRankFirst) {
  const TwoCliques graph;
  const TeamPlan plan = plan_teams(graph.request(2));
  // Team 0 averages 5: 4 stays on rank 0, 3 stays on rank 1, 2 would take rank 0 to 6 and
  // goes to rank 1 (3 < 4), 1 comes from rank 2 to rank 0 (4 < 5). Team 1 alike.
  EXPECT_EQ(plan.tile_holders, (std::vector<int>{0, 1, 1, 0, 2, 3, 3, 2}));
  EXPECT_EQ(plan.moves, (std::vector<TileMove>{{2, 0, 1}, {3, 2, 0}, {7, 1, 2}}));
  EXPECT_EQ(rank_loads(plan.tile_holders, graph.seconds, 4), (std::vector<double>{5, 5, 5, 5}));
  // Before: team 0 carried 6 and 4 (I = 0.2), team 1 carried 5 and 5.
  ASSERT_EQ(plan.imbalance_before.size(), 2U);
  EXPECT_DOUBLE_EQ(plan.imbalance_before[0], 0.2);
  EXPECT_DOUBLE_EQ(plan.imbalance_before[1], 0.0);
  EXPECT_EQ(plan.imbalance_after, (std::vector<double>{0.0, 0.0}));
}

TEST(PlanTeamsOfTiles, BalancingLowersTheImbalanceOfAJobThatOneRankHeld) {
  // Four cliques of four tiles, uneven loads, every tile on rank 0 of 8.
  const std::vector<TileTraffic> traffic = cliques(4, 4);
  std::vector<double> seconds;
  for (int t = 0; t < 16; ++t) seconds.push_back(1.0 + (t * 7) % 5);
  const std::vector<int> holders(16, 0);
  const TeamPlan plan =
      plan_teams({8, 2, seconds, holders, traffic, TeamWeighting::load, TeamUnit::tiles});
  ASSERT_EQ(plan.imbalance_before.size(), 4U);
  ASSERT_EQ(plan.imbalance_after.size(), 4U);
  EXPECT_DOUBLE_EQ(plan.imbalance_before[0], 1.0);  // rank 0 all, rank 1 nothing
  EXPECT_LT(plan.imbalance_after[0], plan.imbalance_before[0]);
  for (std::size_t team = 0; team < 4; ++team) {
    EXPECT_LE(plan.imbalance_after[team], 0.25) << "team " << team;
  }
  EXPECT_DOUBLE_EQ(load_imbalance(rank_loads(holders, seconds, 8)), 7.0);
  EXPECT_LT(load_imbalance(rank_loads(plan.tile_holders, seconds, 8)), 0.5);
  // Every tile that left rank 0 is a move.
  EXPECT_EQ(plan.moves.size(),
            static_cast<std::size_t>(std::count_if(plan.tile_holders.begin(),
                                                   plan.tile_holders.end(),
                                                   [](int h) { return h != 0; })));
}

TEST(PlanTeamsOfTiles, TeamSizeOneMakesEachRankATeamOfItsOwnClique) {
  // Four pairs of tiles on four ranks, each pair split over two ranks now.
  const std::vector<TileTraffic> traffic = cliques(4, 2);
  const std::vector<double> seconds(8, 1.0);
  const std::vector<int> holders{0, 1, 1, 2, 2, 3, 3, 0};
  const TeamPlan plan =
      plan_teams({4, 1, seconds, holders, traffic, TeamWeighting::load, TeamUnit::tiles});
  EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 1, 2, 3}));
  for (int pair = 0; pair < 4; ++pair) {
    EXPECT_EQ(plan.tile_holders[static_cast<std::size_t>(2 * pair)],
              plan.tile_holders[static_cast<std::size_t>(2 * pair + 1)])
        << "pair " << pair;
  }
  // The pairs read each other on one rank; only the three 1-byte joins travel, and cross.
  EXPECT_DOUBLE_EQ(plan.cut.total_bytes, 3.0);
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 3.0);
  EXPECT_EQ(plan.imbalance_after, (std::vector<double>{0, 0, 0, 0}));
}

TEST(PlanTeamsOfTiles, OneTeamCutsNothingAndBalancesAllRanks) {
  const TwoCliques graph;
  const TeamPlan plan = plan_teams(graph.request(4));
  EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 0.0);
  // Average 5, heaviest first: tiles 0, 4, 1, 5 stay; tile 2 (2) would take rank 0 to 6 and
  // goes to rank 1 (ranks 1 and 3 carry 3, hold one tile each; 1 is lower); tile 6 stays
  // on rank 3, tile 3 stays on rank 2, tile 7 (1) would take rank 1 to 6 and goes to rank 0.
  EXPECT_EQ(plan.tile_holders, (std::vector<int>{0, 1, 1, 2, 2, 3, 3, 0}));
  EXPECT_EQ(plan.moves, (std::vector<TileMove>{{2, 0, 1}, {7, 1, 0}}));
  ASSERT_EQ(plan.imbalance_before.size(), 1U);
  EXPECT_DOUBLE_EQ(plan.imbalance_before[0], 0.2);  // loads 6, 4, 5, 5
  EXPECT_DOUBLE_EQ(plan.imbalance_after[0], 0.0);
}

TEST(PlanTeamsOfTiles, TheLoadBlindReferenceCutsLessButLeavesTeamsUnequal) {
  // Clique 0 carries ten times the work of clique 1: balancing load across two teams must
  // split a clique; the reference, weighing every tile alike, keeps them whole.
  TwoCliques graph;
  graph.seconds = {10, 10, 10, 10, 1, 1, 1, 1};
  const TeamPlan teamlb = plan_teams(graph.request(2, TeamWeighting::load));
  const TeamPlan reference = plan_teams(graph.request(2, TeamWeighting::uniform));
  EXPECT_DOUBLE_EQ(reference.cut.crossing_bytes, 1.0);
  EXPECT_GT(teamlb.cut.crossing_bytes, reference.cut.crossing_bytes);
  const auto team_loads = [&graph](const TeamPlan& plan) {
    std::vector<double> loads(2, 0.0);
    for (std::size_t t = 0; t < 8; ++t) {
      loads[static_cast<std::size_t>(plan.rank_team[static_cast<std::size_t>(
          plan.tile_holders[t])])] += graph.seconds[t];
    }
    return loads;
  };
  EXPECT_LT(load_imbalance(team_loads(teamlb)), load_imbalance(team_loads(reference)));
}

TEST(PlanTeamsOfTiles, UnevenLastTeamGetsItsShare) {
  // 3 ranks in teams of 2: team 0 is ranks 0-1, team 1 is rank 2 alone, with a third of
  // the work.
  const std::vector<TileTraffic> traffic = cliques(3, 2);
  const std::vector<double> seconds(6, 1.0);
  const std::vector<int> holders{0, 0, 1, 1, 2, 2};
  const TeamPlan plan =
      plan_teams({3, 2, seconds, holders, traffic, TeamWeighting::load, TeamUnit::tiles});
  EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(plan.tile_holders, holders);
  EXPECT_TRUE(plan.moves.empty());
  // Tile 1 on rank 0 reads tile 2 on rank 1 (same team); tile 3 on rank 1 reads tile 4 on
  // rank 2 (crosses).
  EXPECT_DOUBLE_EQ(plan.cut.total_bytes, 2.0);
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 1.0);
}

// ---------------------------------------------------------------- both

TEST(PlanTeams, TheSamePlanEveryTime) {
  const TwoCliques graph;
  for (const TeamUnit unit : {TeamUnit::ranks, TeamUnit::tiles}) {
    TeamRequest request = graph.request(2);
    request.unit = unit;
    const TeamPlan first = plan_teams(request);
    const TeamPlan second = plan_teams(request);
    EXPECT_EQ(first.tile_holders, second.tile_holders);
    EXPECT_EQ(first.rank_team, second.rank_team);
  }
}

TEST(PlanTeams, TrafficWithoutBytesLeavesConsecutiveTeams) {
  const std::vector<TileTraffic> traffic{{0, 1, 0.0}, {2, 3, 0.0}};
  const std::vector<double> seconds{1, 1, 1, 1};
  const std::vector<int> holders{0, 1, 2, 3};
  for (const TeamUnit unit : {TeamUnit::ranks, TeamUnit::tiles}) {
    const TeamPlan plan =
        plan_teams({4, 2, seconds, holders, traffic, TeamWeighting::load, unit});
    EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ(plan.tile_holders, holders);
    EXPECT_DOUBLE_EQ(plan.cut.fraction(), 0.0);
  }
}

TEST(PlanTeams, ASlowedRankKeepsFewerSecondsOfTilesInItsTeam) {
  // One team of two ranks, eight tiles of one second each, four on each rank, nothing read:
  // rank 1 takes four times as long as the seconds say.
  const std::vector<double> seconds(8, 1.0);
  const std::vector<int> holders{0, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<double> slowed{1.0, 4.0}, alike{1.0, 1.0};
  TeamRequest request{2, 2, seconds, holders, {}};
  const TeamPlan blind = plan_teams(request);
  EXPECT_TRUE(blind.moves.empty()) << "alike in seconds, the ranks keep their tiles";
  request.rank_slowness = alike;
  const TeamPlan same = plan_teams(request);
  EXPECT_EQ(same.tile_holders, blind.tile_holders);
  EXPECT_EQ(same.imbalance_after, blind.imbalance_after);

  request.rank_slowness = slowed;
  const TeamPlan plan = plan_teams(request);
  int on_slowed = 0;
  for (const int holder : plan.tile_holders) on_slowed += holder == 1 ? 1 : 0;
  // Each tile to the rank that would finish it first: 7 s on rank 0 and 4 s on rank 1 (two
  // tiles there would take 8 s).
  EXPECT_EQ(on_slowed, 1);
  for (const TileMove& move : plan.moves) EXPECT_EQ(move.from, 1) << "tile " << move.tile;
  ASSERT_EQ(plan.imbalance_before.size(), 1U);
  EXPECT_DOUBLE_EQ(plan.imbalance_before[0], (16.0 - 10.0) / 10.0) << "4 s and 16 s";
  EXPECT_DOUBLE_EQ(plan.imbalance_after[0], (7.0 - 5.5) / 5.5) << "7 s and 4 s";
}

TEST(PlanTeams, BadInputIsNamed) {
  const TwoCliques graph;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(graph.request(0)); }),
            "plan_teams: team size 0 is not between 1 and the job's 4 ranks");
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(graph.request(5)); }),
            "plan_teams: team size 5 is not between 1 and the job's 4 ranks");
  TeamRequest request = graph.request(2);
  request.ranks = 0;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: 0 ranks; a job has at least 1");

  const std::vector<int> seven_holders{0, 1, 0, 2, 2, 3, 3};
  request = graph.request(2);
  request.tile_holders = seven_holders;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: 7 tile holders for 8 tiles' seconds; there is one of each per tile");

  const std::vector<int> holder_out_of_range{0, 1, 0, 2, 2, 3, 4, 1};
  request = graph.request(2);
  request.tile_holders = holder_out_of_range;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: tile 6 is held by rank 4, not one of the job's 4 ranks");

  const std::vector<double> negative_seconds{4, 3, -1.5, 1, 4, 3, 2, 1};
  request = graph.request(2);
  request.tile_seconds = negative_seconds;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: tile 2 has -1.5 seconds of work; seconds are finite and not negative");

  const std::vector<double> slowness_of_three{1, 1, 1}, zero_slowness{1, 0, 1, 1};
  request = graph.request(2);
  request.rank_slowness = slowness_of_three;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: slowness of 3 ranks for a job of 4; give one per rank, or none");
  request.rank_slowness = zero_slowness;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: rank 1 has slowness 0; a slowness is finite and above 0");

  std::vector<TileTraffic> negative_bytes = graph.traffic;
  negative_bytes[3].bytes = -8.0;
  request = graph.request(2);
  request.traffic = negative_bytes;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: traffic entry 3 (tile 1 reading tile 2) has -8 bytes; bytes are finite "
            "and not negative");

  std::vector<TileTraffic> unknown_tile = graph.traffic;
  unknown_tile.push_back({2, 8, 5.0});
  request = graph.request(2);
  request.traffic = unknown_tile;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: traffic entry 13 names tile 8, not one of the 8 tiles");

  const std::vector<double> three_seconds{1, 1, 1};
  const std::vector<int> three_holders{0, 1, 2};
  EXPECT_EQ(thrown_message([&] {
              (void)plan_teams({4, 1, three_seconds, three_holders, {}, TeamWeighting::load,
                                TeamUnit::tiles});
            }),
            "plan_teams: 3 tiles cannot fill 4 teams of 1 ranks");
}

TEST(ConsecutiveTeams, TeamIsTheRankOverTheTeamSize) {
  EXPECT_EQ(consecutive_teams(8, 4), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(consecutive_teams(8, 3), (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2}));
  EXPECT_EQ(thrown_message([] { (void)consecutive_teams(8, 0); }),
            "consecutive_teams: team size 0 is not between 1 and the job's 8 ranks");
}

TEST(MessageCut, ATileTravelsOncePerReceivingRankAndCrossesWhenTheTeamsDiffer) {
  // Tiles 0 and 1 on rank 0, tile 2 on rank 1, tile 3 on rank 2; ranks 0 | 1 2.
  const std::vector<TileTraffic> traffic{
      {0, 1, 10.0}, {1, 2, 30.0}, {2, 2, 5.0}, {3, 2, 55.0}, {0, 2, 30.0}};
  const std::vector<int> holders{0, 0, 1, 2};
  const std::vector<int> teams{0, 1, 1};
  const auto cut = message_cut(traffic, holders, teams);
  // Tile 2 to rank 0 once (30 bytes, crosses), to rank 2 (55, same team); the rest is local.
  EXPECT_DOUBLE_EQ(cut.total_bytes, 85.0);
  EXPECT_DOUBLE_EQ(cut.crossing_bytes, 30.0);
  EXPECT_EQ(cut.logged_bytes, (std::vector<double>{0, 30, 0}));
  EXPECT_DOUBLE_EQ(cut.fraction(), 30.0 / 85.0);
  EXPECT_DOUBLE_EQ(message_cut({}, holders, teams).fraction(), 0.0);
  EXPECT_EQ(thrown_message([&] { (void)message_cut(traffic, std::vector<int>{0, 0}, teams); }),
            "message_cut: traffic entry 1 names tile 2, not one of the 2 tiles");
  EXPECT_EQ(thrown_message([&] {
              (void)message_cut(traffic, std::vector<int>{0, 0, 1, 3}, teams);
            }),
            "message_cut: tile 3 is held by rank 3, not one of the 3 ranks with a team");
}

TEST(LoadImbalance, IsMaxOverAverageLessOne) {
  EXPECT_DOUBLE_EQ(load_imbalance(std::vector<double>{1, 2, 3}), 0.5);
  EXPECT_DOUBLE_EQ(load_imbalance(std::vector<double>{2, 2}), 0.0);
  EXPECT_DOUBLE_EQ(load_imbalance(std::vector<double>{0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(load_imbalance({}), 0.0);
}

}  // namespace
