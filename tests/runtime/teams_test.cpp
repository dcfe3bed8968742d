// plan_teams(): TeamLB's teams and balance over small tile graphs whose best cut is plain
// (no MPI).

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
using bellows::runtime::edge_cut;
using bellows::runtime::load_imbalance;
using bellows::runtime::plan_teams;
using bellows::runtime::TeamPlan;
using bellows::runtime::TeamRequest;
using bellows::runtime::TeamWeighting;
using bellows::runtime::TileMove;
using bellows::runtime::TileTraffic;
using bellows::testing::thrown_message;

namespace {

/// Cliques of `size` tiles each (tiles c*size .. c*size+size-1), every pair inside a clique
/// exchanging 100 bytes, consecutive cliques joined by one 1-byte entry.
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
    return {4, team_size, seconds, holders, traffic, weighting};
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

TEST(PlanTeams, TwoCliquesJoinedByAThinEdgeBecomeTheTwoTeams) {
  const TwoCliques graph;
  const TeamPlan plan = plan_teams(graph.request(2));
  EXPECT_EQ(plan.team_size, 2);
  EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 0, 1, 1}));
  // Each clique goes to the team that held most of its tiles.
  EXPECT_EQ(plan.tile_team, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 1.0);
  EXPECT_DOUBLE_EQ(plan.cut.total_bytes, 1201.0);
  EXPECT_DOUBLE_EQ(plan.cut.fraction(), 1.0 / 1201.0);
}

TEST(PlanTeams, InsideATeamTheHeaviestTileGoesToTheLeastLoadedRankFirst) {
  const TwoCliques graph;
  const TeamPlan plan = plan_teams(graph.request(2));
  // Team 0: 4 -> rank 0 (its holder), 3 -> rank 1 (its holder), 2 -> rank 1 (3 < 4),
  // 1 -> rank 0 (4 < 5). Team 1 alike on ranks 2 and 3.
  EXPECT_EQ(plan.tile_holders, (std::vector<int>{0, 1, 1, 0, 2, 3, 3, 2}));
  EXPECT_EQ(plan.moves, (std::vector<TileMove>{{2, 0, 1}, {3, 2, 0}, {7, 1, 2}}));
  EXPECT_EQ(rank_loads(plan.tile_holders, graph.seconds, 4), (std::vector<double>{5, 5, 5, 5}));
  // Before: team 0 carried 6 and 4 (I = 0.2), team 1 carried 5 and 5.
  ASSERT_EQ(plan.imbalance_before.size(), 2U);
  EXPECT_DOUBLE_EQ(plan.imbalance_before[0], 0.2);
  EXPECT_DOUBLE_EQ(plan.imbalance_before[1], 0.0);
  EXPECT_EQ(plan.imbalance_after, (std::vector<double>{0.0, 0.0}));
}

TEST(PlanTeams, BalancingLowersTheImbalanceOfAJobThatOneRankHeld) {
  // Four cliques of four tiles, uneven loads, every tile on rank 0 of 8.
  const std::vector<TileTraffic> traffic = cliques(4, 4);
  std::vector<double> seconds;
  for (int t = 0; t < 16; ++t) seconds.push_back(1.0 + (t * 7) % 5);
  const std::vector<int> holders(16, 0);
  const TeamPlan plan = plan_teams({8, 2, seconds, holders, traffic, TeamWeighting::load});
  ASSERT_EQ(plan.imbalance_before.size(), 4U);
  ASSERT_EQ(plan.imbalance_after.size(), 4U);
  EXPECT_DOUBLE_EQ(plan.imbalance_before[0], 1.0);  // rank 0 all, rank 1 nothing
  EXPECT_LT(plan.imbalance_after[0], plan.imbalance_before[0]);
  for (std::size_t team = 0; team < 4; ++team) {
    EXPECT_LE(plan.imbalance_after[team], 0.25) << "team " << team;
  }
  EXPECT_DOUBLE_EQ(load_imbalance(rank_loads(holders, seconds, 8)), 7.0);
  EXPECT_LT(load_imbalance(rank_loads(plan.tile_holders, seconds, 8)), 0.5);
  // Every tile sits on a rank of its team, and every tile that left rank 0 is a move.
  for (std::size_t t = 0; t < 16; ++t) {
    EXPECT_EQ(plan.tile_holders[t] / 2, plan.tile_team[t]) << "tile " << t;
  }
  EXPECT_EQ(plan.moves.size(),
            static_cast<std::size_t>(std::count_if(plan.tile_holders.begin(),
                                                   plan.tile_holders.end(),
                                                   [](int h) { return h != 0; })));
}

TEST(PlanTeams, TeamSizeOneMakesEachRankATeamOfItsOwnClique) {
  // Four pairs of tiles on four ranks, each pair split over two ranks now.
  const std::vector<TileTraffic> traffic = cliques(4, 2);
  const std::vector<double> seconds(8, 1.0);
  const std::vector<int> holders{0, 1, 1, 2, 2, 3, 3, 0};
  const TeamPlan plan = plan_teams({4, 1, seconds, holders, traffic, TeamWeighting::load});
  EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 1, 2, 3}));
  // Pairs {0,1} {2,3} {4,5} {6,7} are the teams; only the three 1-byte joins cross.
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 3.0);
  for (int pair = 0; pair < 4; ++pair) {
    EXPECT_EQ(plan.tile_team[static_cast<std::size_t>(2 * pair)],
              plan.tile_team[static_cast<std::size_t>(2 * pair + 1)])
        << "pair " << pair;
  }
  EXPECT_EQ(plan.tile_holders, plan.tile_team);  // a team of one rank is that rank
  EXPECT_EQ(plan.imbalance_after, (std::vector<double>{0, 0, 0, 0}));
}

TEST(PlanTeams, OneTeamCutsNothingAndBalancesAllRanks) {
  const TwoCliques graph;
  const TeamPlan plan = plan_teams(graph.request(4));
  EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(plan.tile_team, std::vector<int>(8, 0));
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 0.0);
  // Heaviest first, ties to the holder: 4 (tile 0) -> 0, 4 (tile 4) -> 2, 3 (tile 1) -> 1,
  // 3 (tile 5) -> 3, 2 (tile 2) -> 1 (ranks 1 and 3 carry 3; neither holds it, both hold
  // one tile, 1 is lower), 2 (tile 6) -> 3, 1 (tile 3) -> 2 (ranks 0 and 2 carry 4; 2
  // holds it), 1 (tile 7) -> 0.
  EXPECT_EQ(plan.tile_holders, (std::vector<int>{0, 1, 1, 2, 2, 3, 3, 0}));
  EXPECT_EQ(plan.moves, (std::vector<TileMove>{{2, 0, 1}, {7, 1, 0}}));
  ASSERT_EQ(plan.imbalance_before.size(), 1U);
  EXPECT_DOUBLE_EQ(plan.imbalance_before[0], 0.2);  // loads 6, 4, 5, 5
  EXPECT_DOUBLE_EQ(plan.imbalance_after[0], 0.0);
}

TEST(PlanTeams, TheLoadBlindReferenceCutsLessButLeavesTeamsUnequal) {
  // Clique 0 carries ten times the work of clique 1: balancing load across two teams must
  // split a clique; the reference, weighing every tile alike, keeps them whole.
  TwoCliques graph;
  graph.seconds = {10, 10, 10, 10, 1, 1, 1, 1};
  const TeamPlan teamlb = plan_teams(graph.request(2, TeamWeighting::load));
  const TeamPlan reference = plan_teams(graph.request(2, TeamWeighting::tiles));
  EXPECT_DOUBLE_EQ(reference.cut.crossing_bytes, 1.0);
  EXPECT_GT(teamlb.cut.crossing_bytes, reference.cut.crossing_bytes);
  const auto team_loads = [&graph](const TeamPlan& plan) {
    std::vector<double> loads(2, 0.0);
    for (std::size_t t = 0; t < 8; ++t) {
      loads[static_cast<std::size_t>(plan.tile_team[t])] += graph.seconds[t];
    }
    return loads;
  };
  EXPECT_LT(load_imbalance(team_loads(teamlb)), load_imbalance(team_loads(reference)));
}

TEST(PlanTeams, TheSamePlanEveryTime) {
  const TwoCliques graph;
  const TeamPlan first = plan_teams(graph.request(2));
  const TeamPlan second = plan_teams(graph.request(2));
  EXPECT_EQ(first.tile_holders, second.tile_holders);
  EXPECT_EQ(first.tile_team, second.tile_team);
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

  std::vector<TileTraffic> negative_bytes = graph.traffic;
  negative_bytes[3].bytes = -8.0;
  request = graph.request(2);
  request.traffic = negative_bytes;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: traffic entry 3 (tiles 1 and 2) has -8 bytes; bytes are finite and not "
            "negative");

  std::vector<TileTraffic> unknown_tile = graph.traffic;
  unknown_tile.push_back({2, 8, 5.0});
  request = graph.request(2);
  request.traffic = unknown_tile;
  EXPECT_EQ(thrown_message([&] { (void)plan_teams(request); }),
            "plan_teams: traffic entry 13 names tile 8, not one of the 8 tiles");

  const std::vector<double> three_seconds{1, 1, 1};
  const std::vector<int> three_holders{0, 1, 2};
  EXPECT_EQ(thrown_message([&] {
              (void)plan_teams({4, 1, three_seconds, three_holders, {}, TeamWeighting::load});
            }),
            "plan_teams: 3 tiles cannot fill 4 teams of 1 ranks");
}

TEST(PlanTeams, UnevenLastTeamGetsItsShare) {
  // 3 ranks in teams of 2: team 0 is ranks 0-1, team 1 is rank 2 alone, with a third of
  // the work.
  const std::vector<TileTraffic> traffic = cliques(3, 2);
  const std::vector<double> seconds(6, 1.0);
  const std::vector<int> holders{0, 0, 1, 1, 2, 2};
  const TeamPlan plan = plan_teams({3, 2, seconds, holders, traffic, TeamWeighting::load});
  EXPECT_EQ(plan.rank_team, (std::vector<int>{0, 0, 1}));
  EXPECT_EQ(plan.tile_team, (std::vector<int>{0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(plan.tile_holders, holders);
  EXPECT_TRUE(plan.moves.empty());
  EXPECT_DOUBLE_EQ(plan.cut.crossing_bytes, 1.0);
}

TEST(ConsecutiveTeams, TeamIsTheHoldersRankOverTheTeamSize) {
  const std::vector<int> holders{0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(consecutive_teams(holders, 4), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  EXPECT_EQ(consecutive_teams(holders, 3), (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2}));
  EXPECT_EQ(thrown_message([&] { (void)consecutive_teams(holders, 0); }),
            "consecutive_teams: team size 0 is below 1");
}

TEST(EdgeCut, CountsTheBytesBetweenTeamsAndEverythingInTheTotal) {
  const std::vector<TileTraffic> traffic{{0, 1, 10.0}, {1, 2, 30.0}, {2, 2, 5.0}, {2, 3, 55.0}};
  const std::vector<int> teams{0, 0, 1, 1};
  const auto cut = edge_cut(traffic, teams);
  EXPECT_DOUBLE_EQ(cut.crossing_bytes, 30.0);
  EXPECT_DOUBLE_EQ(cut.total_bytes, 100.0);
  EXPECT_DOUBLE_EQ(cut.fraction(), 0.3);
  EXPECT_DOUBLE_EQ(edge_cut({}, teams).fraction(), 0.0);
  EXPECT_EQ(thrown_message([&] { (void)edge_cut(traffic, std::vector<int>{0, 0}); }),
            "edge_cut: traffic entry 1 names tile 2, not one of the 2 tiles");
}

TEST(LoadImbalance, IsMaxOverAverageLessOne) {
  EXPECT_DOUBLE_EQ(load_imbalance(std::vector<double>{1, 2, 3}), 0.5);
  EXPECT_DOUBLE_EQ(load_imbalance(std::vector<double>{2, 2}), 0.0);
  EXPECT_DOUBLE_EQ(load_imbalance(std::vector<double>{0, 0}), 0.0);
  EXPECT_DOUBLE_EQ(load_imbalance({}), 0.0);
}

}  // namespace
