// plan_recovery, choose_checkpoint and superseded_copies: whom a job recovers onto after
// losing ranks, and which checkpoint it rolls back to (no MPI).
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/block_cyclic.hpp"
#include "bellows/runtime/buddies.hpp"
#include "bellows/runtime/recovery_plan.hpp"

namespace bellows::runtime {
namespace {

/// A job of `ranks` ranks, one per node, with the ring of buddies.
struct Job {
  explicit Job(int ranks) {
    for (int r = 0; r < ranks; ++r) {
      hosts.push_back(std::string("n").append(std::to_string(r)));
      buddies.push_back((r + 1) % ranks);
    }
  }
  std::vector<std::string> hosts;
  std::vector<int> buddies;
  std::vector<TileHolders> collections;

  [[nodiscard]] RecoveryDecision lose(std::vector<int> lost, NodeLossAction action = NodeLossAction::shrink,
                                      int replacement_nodes = 0, int minimum_nodes = 1) {
    lost_ = std::move(lost);
    return plan_recovery({hosts, buddies, lost_, action, replacement_nodes, minimum_nodes, collections, {}});
  }

 private:
  std::vector<int> lost_;
};

/// A tiles x tiles collection laid out as a job started on `ranks` ranks lays it out.
TileHolders started_on(int ranks, int tiles) {
  const auto grid = BlockCyclic2D::square_for(ranks);
  TileHolders c{tiles, tiles, {}};
  for (int n = 0; n < tiles; ++n) {
    for (int m = 0; m < tiles; ++m) c.holders.push_back(grid.owner(m, n));
  }
  return c;
}

std::string error_of(const RecoveryRequest& request) {
  try {
    (void)plan_recovery(request);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(RecoveryPlan, ShrinkGivesALostRanksTilesToItsBuddy) {
  Job job(4);
  const auto decision = job.lose({2});
  ASSERT_TRUE(decision.plan) << decision.refusal;
  EXPECT_EQ(decision.refusal, "");
  const RecoveryPlan& plan = *decision.plan;
  EXPECT_EQ(plan.ranks.backup, (std::vector<int>{0, 1, 3, 3}));
  EXPECT_EQ(plan.ranks.new_rank, (std::vector<int>{0, 1, -1, 2}));
  EXPECT_TRUE(plan.ranks.leaves(2));
  EXPECT_TRUE(plan.replaced.empty());
  // Rank 2's copy is at rank 3, rank 2 after recovery, which keeps the tiles.
  EXPECT_EQ(plan.restores, (std::vector<TileRestore>{{2, 2, 2}}));
  EXPECT_EQ(plan.roll_back, (std::vector<CheckpointSource>{{0, 0}, {1, 1}, {2, 3}, {3, 3}}));
  EXPECT_EQ(plan.survivors, 3);
  EXPECT_EQ(plan.nodes_after, 3);
  EXPECT_FALSE(plan.layout);
}

TEST(RecoveryPlan, ReplaceSendsTheCopyToAReplacementNumberedAfterTheSurvivors) {
  Job job(4);
  const auto decision = job.lose({1}, NodeLossAction::replace, 1);
  ASSERT_TRUE(decision.plan) << decision.refusal;
  const RecoveryPlan& plan = *decision.plan;
  EXPECT_EQ(plan.ranks.new_rank, (std::vector<int>{0, -1, 1, 2}));
  EXPECT_EQ(plan.ranks.backup, (std::vector<int>{0, 2, 2, 3}));
  EXPECT_EQ(plan.replaced, (std::vector<int>{1}));
  // From rank 1's buddy (old 2, new 1) to the replacement, new rank 3.
  EXPECT_EQ(plan.restores, (std::vector<TileRestore>{{1, 1, 3}}));
  EXPECT_EQ(plan.nodes_after, 4);
}

TEST(RecoveryPlan, LostRanksNoNodeCameForShrinkUnderReplace) {
  Job job(6);
  const auto decision = job.lose({3, 1}, NodeLossAction::replace, 1);
  ASSERT_TRUE(decision.plan) << decision.refusal;
  const RecoveryPlan& plan = *decision.plan;
  EXPECT_EQ(plan.ranks.new_rank, (std::vector<int>{0, -1, 1, -1, 2, 3}));
  EXPECT_EQ(plan.replaced, (std::vector<int>{1}));  // the first lost rank, in rank order
  // Rank 1's copy (at old 2, new 1) goes to the replacement (new 4); rank 3's stays at its
  // buddy (old 4, new 2).
  EXPECT_EQ(plan.restores, (std::vector<TileRestore>{{1, 1, 4}, {3, 2, 2}}));
  EXPECT_EQ(plan.nodes_after, 5);
  // More nodes than lost ranks: the extra ones are not used.
  const auto plenty = job.lose({3, 1}, NodeLossAction::replace, 5);
  ASSERT_TRUE(plenty.plan);
  EXPECT_EQ(plenty.plan->replaced, (std::vector<int>{1, 3}));
  EXPECT_EQ(plenty.plan->restores, (std::vector<TileRestore>{{1, 1, 4}, {3, 2, 5}}));
  EXPECT_EQ(plenty.plan->nodes_after, 6);
}

TEST(RecoveryPlan, TheFirstRankCanBeLostAndTheFirstSurvivorTakesItsNumber) {
  Job job(3);
  const auto decision = job.lose({0});
  ASSERT_TRUE(decision.plan) << decision.refusal;
  EXPECT_EQ(decision.plan->ranks.new_rank, (std::vector<int>{-1, 0, 1}));
  EXPECT_EQ(decision.plan->ranks.backup, (std::vector<int>{1, 1, 2}));
  EXPECT_EQ(decision.plan->restores, (std::vector<TileRestore>{{0, 0, 0}}));
}

TEST(RecoveryPlan, TwoLostRanksWithDifferentBuddiesRecover) {
  Job job(4);
  const auto decision = job.lose({2, 0});
  ASSERT_TRUE(decision.plan) << decision.refusal;
  EXPECT_EQ(decision.plan->ranks.new_rank, (std::vector<int>{-1, 0, -1, 1}));
  EXPECT_EQ(decision.plan->restores, (std::vector<TileRestore>{{0, 0, 0}, {2, 1, 1}}));
  EXPECT_EQ(decision.plan->roll_back,
            (std::vector<CheckpointSource>{{0, 1}, {1, 1}, {2, 3}, {3, 3}}));
}

TEST(RecoveryPlan, RefusesWhenARankAndItsBuddyAreBothLost) {
  Job job(4);
  const auto one = job.lose({1, 2});
  EXPECT_FALSE(one.plan);
  EXPECT_EQ(one.refusal,
            "rank 1 and its buddy rank 2 are both lost: no copy of rank 1's checkpoint is left");
  Job six(6);
  EXPECT_EQ(six.lose({5, 4, 2, 1}).refusal,
            "rank 1 and its buddy rank 2 are both lost: no copy of rank 1's checkpoint is left; "
            "rank 4 and its buddy rank 5 are both lost: no copy of rank 4's checkpoint is left");
  // Replacement nodes bring no copy back.
  EXPECT_EQ(job.lose({1, 2}, NodeLossAction::replace, 2).refusal, one.refusal);
}

TEST(RecoveryPlan, RefusesWhenNoRankSurvives) {
  Job job(3);
  const auto decision = job.lose({0, 1, 2}, NodeLossAction::replace, 3);
  EXPECT_FALSE(decision.plan);
  EXPECT_EQ(decision.refusal, "every rank of the job is lost (3 of 3): none is left to recover onto");
}

TEST(RecoveryPlan, RefusesALostRankWithoutABuddy) {
  Job job(2);
  job.hosts = {"n0", "n0"};
  job.buddies = choose_buddies(job.hosts, std::vector<long>{4, 4});
  EXPECT_EQ(job.lose({1}).refusal,
            "rank 1 has no buddy on another node: no copy of its checkpoint is left");
}

TEST(RecoveryPlan, RefusesToRunOnFewerNodesThanTheMinimum) {
  Job job(4);
  EXPECT_EQ(job.lose({2}, NodeLossAction::shrink, 0, 4).refusal,
            "the job would run on 3 nodes after losing 1 rank, fewer than nodes.min (4)");
  EXPECT_EQ(job.lose({2}, NodeLossAction::replace, 0, 4).refusal,
            "the job would run on 3 nodes after losing 1 rank with 0 replacement nodes, fewer "
            "than nodes.min (4)");
  EXPECT_EQ(job.lose({2, 0}, NodeLossAction::replace, 1, 4).refusal,
            "the job would run on 3 nodes after losing 2 ranks with 1 replacement node, fewer "
            "than nodes.min (4)");
  EXPECT_TRUE(job.lose({2}, NodeLossAction::replace, 1, 4).plan);
  EXPECT_TRUE(job.lose({2}, NodeLossAction::shrink, 0, 3).plan);
}

TEST(RecoveryPlan, CountsNodesNotRanks) {
  // Three nodes of two ranks; node b (ranks 2 and 3) is lost.
  Job job(6);
  job.hosts = {"a", "a", "b", "b", "c", "c"};
  job.buddies = choose_buddies(job.hosts, std::vector<long>(6, 4));
  const auto decision = job.lose({2, 3});
  ASSERT_TRUE(decision.plan) << decision.refusal;
  EXPECT_EQ(decision.plan->nodes_after, 2);
  EXPECT_EQ(decision.plan->restores, (std::vector<TileRestore>{{2, 2, 2}, {3, 3, 3}}));
  EXPECT_EQ(job.lose({2, 3}, NodeLossAction::shrink, 0, 3).refusal,
            "the job would run on 2 nodes after losing 2 ranks, fewer than nodes.min (3)");
}

TEST(RecoveryPlan, AReplacementTakesTheLostRanksPlaceOnTheGridAndNothingElseMoves) {
  Job job(4);
  job.collections = {started_on(4, 6), started_on(4, 6)};
  const auto decision = job.lose({1}, NodeLossAction::replace, 1);
  ASSERT_TRUE(decision.plan && decision.plan->layout) << decision.refusal;
  const Regrid& layout = *decision.plan->layout;
  EXPECT_EQ(layout.grid.size(), 4);
  EXPECT_EQ(layout.tiles_moved, 0U);
  EXPECT_EQ(layout.tiles_kept, 72U);
  // Old 0 -> 0, old 1 -> its replacement 3, old 2 -> 1, old 3 -> 2.
  const std::vector<int> renumbered{0, 3, 1, 2};
  for (std::size_t c = 0; c < 2; ++c) {
    ASSERT_EQ(layout.owners[c].size(), 36U);
    for (std::size_t s = 0; s < 36; ++s) {
      EXPECT_EQ(layout.owners[c][s],
                renumbered[static_cast<std::size_t>(job.collections[c].holders[s])]);
    }
  }
}

TEST(RecoveryPlan, AShrinkReGridsOntoTheSurvivorsAsAJobStartedOnThem) {
  Job job(4);
  job.collections = {started_on(4, 6)};
  const auto decision = job.lose({3});
  ASSERT_TRUE(decision.plan && decision.plan->layout) << decision.refusal;
  const Regrid& layout = *decision.plan->layout;
  EXPECT_EQ(layout.grid.size(), 3);
  EXPECT_EQ(layout.tiles_kept + layout.tiles_moved, 36U);
  std::vector<int> per_rank(3, 0);
  for (const int owner : layout.owners[0]) {
    ASSERT_GE(owner, 0);
    ASSERT_LT(owner, 3);
    ++per_rank[static_cast<std::size_t>(owner)];
  }
  EXPECT_EQ(per_rank, (std::vector<int>{12, 12, 12}));
  // Every tile where the grid of a 3-rank job puts it, through the placement.
  for (int n = 0; n < 6; ++n) {
    for (int m = 0; m < 6; ++m) {
      EXPECT_EQ(layout.owners[0][static_cast<std::size_t>(n * 6 + m)],
                layout.placement[static_cast<std::size_t>(layout.grid.owner(m, n))]);
    }
  }
}

/// A job of `ranks` ranks, one per node, in teams of `team_size` consecutive ranks, with
/// buddies chosen inside the teams where a team has another node.
struct TeamJob {
  TeamJob(int ranks, int team_size) {
    for (int r = 0; r < ranks; ++r) {
      hosts.push_back(std::string("n").append(std::to_string(r)));
      rank_team.push_back(r / team_size);
    }
    buddies = choose_buddies(hosts, std::vector<long>(static_cast<std::size_t>(ranks), 4), rank_team);
  }
  std::vector<std::string> hosts;
  std::vector<int> rank_team;
  std::vector<int> buddies;

  [[nodiscard]] RecoveryDecision lose(std::vector<int> lost, NodeLossAction action = NodeLossAction::shrink,
                                      int replacement_nodes = 0) {
    lost_ = std::move(lost);
    return plan_recovery({hosts, buddies, lost_, action, replacement_nodes, 1, {}, rank_team});
  }

 private:
  std::vector<int> lost_;
};

std::vector<int> owners(const std::vector<CheckpointSource>& sources) {
  std::vector<int> out;
  for (const CheckpointSource& s : sources) out.push_back(s.owner);
  return out;
}

TEST(RecoveryPlan, WithOneTeamEveryRankRollsBackAsWithoutTeams) {
  Job job(4);
  const auto plain = job.lose({2});
  const std::vector<int> one_team(4, 0);
  const std::vector<int> lost{2};
  const auto teamed = plan_recovery({job.hosts, job.buddies, lost, NodeLossAction::shrink, 0, 1, {}, one_team});
  ASSERT_TRUE(plain.plan && teamed.plan);
  EXPECT_EQ(teamed.plan->roll_back, plain.plan->roll_back);
  EXPECT_EQ(teamed.plan->teams_rolling_back, (std::vector<int>{0}));
  EXPECT_EQ(plain.plan->teams_rolling_back, (std::vector<int>{0}));
}

TEST(RecoveryPlan, OnlyTheLostRanksTeamRollsBackWhenItsBuddyIsInTheTeam) {
  TeamJob job(8, 4);  // teams {0..3} and {4..7}; buddies rings inside each team
  EXPECT_EQ(job.buddies, (std::vector<int>{1, 2, 3, 0, 5, 6, 7, 4}));
  const auto decision = job.lose({6});
  ASSERT_TRUE(decision.plan) << decision.refusal;
  const RecoveryPlan& plan = *decision.plan;
  EXPECT_EQ(plan.teams_rolling_back, (std::vector<int>{1}));
  EXPECT_EQ(plan.roll_back, (std::vector<CheckpointSource>{{4, 4}, {5, 5}, {6, 7}, {7, 7}}));
  // Rank 6's tiles go to its buddy, old 7, new 6: a rank that rolls back with it.
  EXPECT_EQ(plan.restores, (std::vector<TileRestore>{{6, 6, 6}}));
  EXPECT_EQ(plan.ranks.new_rank, (std::vector<int>{0, 1, 2, 3, 4, 5, -1, 6}));
}

TEST(RecoveryPlan, ATeamOfOneRollsBackWithItsBuddysTeam) {
  // Teams of one rank: the lost rank is its whole team; its buddy, which takes its tiles and
  // re-runs its work from the checkpoint, rolls back too. The other two keep their state.
  TeamJob job(4, 1);
  EXPECT_EQ(job.buddies, (std::vector<int>{1, 2, 3, 0}));
  const auto decision = job.lose({1});
  ASSERT_TRUE(decision.plan) << decision.refusal;
  EXPECT_EQ(decision.plan->teams_rolling_back, (std::vector<int>{1, 2}));
  EXPECT_EQ(owners(decision.plan->roll_back), (std::vector<int>{1, 2}));
  EXPECT_EQ(decision.plan->roll_back[0], (CheckpointSource{1, 2}));
}

TEST(RecoveryPlan, AReplacementRankLeavesTheBuddysTeamAlone) {
  // Under replace the buddy only sends the copy; the replacement starts at the checkpoint.
  TeamJob job(4, 1);
  const auto decision = job.lose({1}, NodeLossAction::replace, 1);
  ASSERT_TRUE(decision.plan) << decision.refusal;
  EXPECT_EQ(decision.plan->teams_rolling_back, (std::vector<int>{1}));
  EXPECT_EQ(decision.plan->roll_back, (std::vector<CheckpointSource>{{1, 2}}));
  EXPECT_EQ(decision.plan->restores, (std::vector<TileRestore>{{1, 1, 3}}));
}

TEST(RecoveryPlan, TwoLostRanksOfDifferentTeamsRollBackBothTeamsOfTheSameTeamOne) {
  TeamJob job(8, 4);
  const auto different = job.lose({1, 6});
  ASSERT_TRUE(different.plan) << different.refusal;
  EXPECT_EQ(different.plan->teams_rolling_back, (std::vector<int>{0, 1}));
  EXPECT_EQ(different.plan->roll_back.size(), 8U);
  const auto same = job.lose({4, 6});
  ASSERT_TRUE(same.plan) << same.refusal;
  EXPECT_EQ(same.plan->teams_rolling_back, (std::vector<int>{1}));
  EXPECT_EQ(same.plan->roll_back, (std::vector<CheckpointSource>{{4, 5}, {5, 5}, {6, 7}, {7, 7}}));
}

TEST(RecoveryPlan, TheCheckpointIsChosenOverTheTeamRollingBackOnly) {
  // Team 0's checkpoint of iteration 5 is still being taken; team 1 lost a rank and has 5 complete:
  // global rollback would go back to 4, team rollback of team 1 to 5.
  TeamJob job(4, 2);
  EXPECT_EQ(job.buddies, (std::vector<int>{1, 0, 3, 2}));
  const auto decision = job.lose({3});
  ASSERT_TRUE(decision.plan) << decision.refusal;
  std::vector<CheckpointCopy> copies;
  for (int r = 0; r < 4; ++r) {
    for (const int holder : {r, job.buddies[static_cast<std::size_t>(r)]}) {
      copies.push_back({r, holder, 4, 8, 8});
      copies.push_back({r, holder, 5, 8, r < 2 ? 3 : 8});
    }
  }
  EXPECT_EQ(choose_checkpoint(copies, decision.plan->roll_back).iteration, 5);
  Job global(4);
  global.buddies = job.buddies;
  const auto everyone = global.lose({3});
  ASSERT_TRUE(everyone.plan);
  EXPECT_EQ(choose_checkpoint(copies, everyone.plan->roll_back).iteration, 4);
}

TEST(RecoveryPlan, RefusesTeamsThatDoNotFitByName) {
  Job job(3);
  const std::vector<int> lost{1};
  const std::vector<int> two{0, 1};
  EXPECT_EQ(error_of({job.hosts, job.buddies, lost, NodeLossAction::shrink, 0, 1, {}, two}),
            "plan_recovery: 2 teams named for 3 ranks (rank_team)");
  const std::vector<int> negative{0, -1, 1};
  EXPECT_EQ(error_of({job.hosts, job.buddies, lost, NodeLossAction::shrink, 0, 1, {}, negative}),
            "plan_recovery: rank 1's team -1 is negative (rank_team)");
}

TEST(RecoveryPlan, RefusesInputsThatDoNotFitByName) {
  const std::vector<std::string> hosts{"n0", "n1", "n2"};
  const std::vector<int> ring{1, 2, 0};
  const std::vector<int> one{1};
  const auto with = [&hosts](const std::vector<int>& buddies, const std::vector<int>& lost,
                             NodeLossAction action, int nodes, int minimum,
                             const std::vector<TileHolders>& collections = {}) {
    return error_of({hosts, buddies, lost, action, nodes, minimum, collections, {}});
  };
  EXPECT_EQ(with({1, 2}, one, NodeLossAction::shrink, 0, 1), "plan_recovery: 3 hosts but 2 buddies");
  EXPECT_EQ(with({1, 7, 0}, one, NodeLossAction::shrink, 0, 1),
            "plan_recovery: rank 1's buddy 7 is not another rank of the job (3 ranks)");
  EXPECT_EQ(with({1, 1, 0}, one, NodeLossAction::shrink, 0, 1),
            "plan_recovery: rank 1's buddy 1 is not another rank of the job (3 ranks)");
  EXPECT_EQ(with(ring, {}, NodeLossAction::shrink, 0, 1), "plan_recovery: no rank is lost");
  EXPECT_EQ(with(ring, {3}, NodeLossAction::shrink, 0, 1),
            "plan_recovery: lost rank 3 is not a rank of the job (3 ranks)");
  EXPECT_EQ(with(ring, {1, 1}, NodeLossAction::shrink, 0, 1), "plan_recovery: lost rank 1 is named twice");
  EXPECT_EQ(with(ring, one, NodeLossAction::replace, -1, 1),
            "plan_recovery: the replacement nodes must be at least 0, got -1");
  EXPECT_EQ(with(ring, one, NodeLossAction::shrink, 2, 1),
            "plan_recovery: 2 replacement nodes under on_node_loss shrink");
  EXPECT_EQ(with(ring, one, NodeLossAction::shrink, 0, 0),
            "plan_recovery: the minimum of nodes must be at least 1, got 0");
  EXPECT_EQ(with(ring, one, NodeLossAction::shrink, 0, 1, {TileHolders{1, 2, {0, 5}}}),
            "plan_recovery: collection 0 names rank 5 as a tile's holder (3 ranks)");
}

TEST(RecoveryPlan, NodeLossActionsByName) {
  EXPECT_EQ(to_string(NodeLossAction::shrink), "shrink");
  EXPECT_EQ(to_string(NodeLossAction::replace), "replace");
  NodeLossAction action = NodeLossAction::shrink;
  EXPECT_TRUE(parse_node_loss_action("replace", action));
  EXPECT_EQ(action, NodeLossAction::replace);
  EXPECT_TRUE(parse_node_loss_action("shrink", action));
  EXPECT_EQ(action, NodeLossAction::shrink);
  EXPECT_FALSE(parse_node_loss_action("Replace", action));
  EXPECT_EQ(action, NodeLossAction::shrink);
}

// ---------------------------------------------------------------- which checkpoint

/// The copies of a ring of `ranks` after complete checkpoints at `iterations`: each rank's
/// own and its buddy's, `tiles` tiles each.
std::vector<CheckpointCopy> ring_copies(int ranks, std::vector<long> iterations, long tiles = 8) {
  std::vector<CheckpointCopy> copies;
  for (const long iteration : iterations) {
    for (int r = 0; r < ranks; ++r) {
      copies.push_back({r, r, iteration, tiles, tiles});
      copies.push_back({r, (r + 1) % ranks, iteration, tiles, tiles});
    }
  }
  return copies;
}

TEST(CheckpointChoice, TheLastIterationEveryHolderHasComplete) {
  Job job(4);
  const auto plan = job.lose({2}).plan;
  ASSERT_TRUE(plan);
  const auto choice = choose_checkpoint(ring_copies(4, {10, 20}), plan->roll_back);
  ASSERT_TRUE(choice.iteration) << choice.refusal;
  EXPECT_EQ(*choice.iteration, 20);
  EXPECT_EQ(choice.refusal, "");
}

TEST(CheckpointChoice, ACheckpointInProgressWhenTheFailureHitIsNotUsed) {
  Job job(4);
  const auto plan = job.lose({2}).plan;
  ASSERT_TRUE(plan);
  auto copies = ring_copies(4, {10});
  for (int r = 0; r < 4; ++r) {
    copies.push_back({r, r, 20, 8, 8});
    // Rank 2's copy at its buddy was still arriving: 5 of 8 tiles.
    copies.push_back({r, (r + 1) % 4, 20, 8, r == 2 ? 5 : 8});
  }
  const auto choice = choose_checkpoint(copies, plan->roll_back);
  ASSERT_TRUE(choice.iteration) << choice.refusal;
  EXPECT_EQ(*choice.iteration, 10);
  // Had every copy arrived, 20.
  copies.back() = {3, 0, 20, 8, 8};
  copies[copies.size() - 3] = {2, 3, 20, 8, 8};
  EXPECT_EQ(choose_checkpoint(copies, plan->roll_back).iteration, 20);
}

TEST(CheckpointChoice, RefusesWhenARankHasNoCompleteCopyAtItsHolder) {
  Job job(4);
  const auto plan = job.lose({2}).plan;
  ASSERT_TRUE(plan);
  std::vector<CheckpointCopy> copies;
  for (int r = 0; r < 4; ++r) {
    copies.push_back({r, r, 0, 8, 8});
    copies.push_back({r, (r + 1) % 4, 0, 8, r == 2 ? 3 : 8});
  }
  const auto choice = choose_checkpoint(copies, plan->roll_back);
  EXPECT_FALSE(choice.iteration);
  EXPECT_EQ(choice.refusal, "no complete checkpoint of rank 2 at rank 3 (iteration 0: 3 of 8 tiles)");
  // A copy held elsewhere does not count.
  copies.push_back({2, 1, 0, 8, 8});
  EXPECT_EQ(choose_checkpoint(copies, plan->roll_back).refusal, choice.refusal);
  const std::vector<CheckpointSource> two{{0, 1}, {2, 3}};
  EXPECT_EQ(choose_checkpoint(std::vector<CheckpointCopy>{}, two).refusal,
            "no complete checkpoint of rank 0 at rank 1; no complete checkpoint of rank 2 at rank 3");
}

TEST(CheckpointChoice, RefusesWhenTheRanksHaveNoCompleteIterationInCommon) {
  const std::vector<CheckpointCopy> copies{{0, 0, 20, 4, 4}, {0, 0, 30, 4, 4}, {2, 3, 10, 4, 4}};
  const std::vector<CheckpointSource> sources{{0, 0}, {2, 3}};
  const auto choice = choose_checkpoint(copies, sources);
  EXPECT_FALSE(choice.iteration);
  EXPECT_EQ(choice.refusal,
            "no iteration has a complete checkpoint of every rank that rolls back: rank 0 at "
            "rank 0 has 20 30; rank 2 at rank 3 has 10");
}

TEST(CheckpointChoice, OnlyTheRanksThatRollBackCount) {
  // A team of ranks 2 and 3 rolls back alone: rank 0's missing copy does not matter.
  const std::vector<CheckpointCopy> copies{{2, 3, 40, 4, 4}, {3, 3, 40, 4, 4}, {0, 0, 50, 4, 1}};
  const std::vector<CheckpointSource> team{{2, 3}, {3, 3}};
  EXPECT_EQ(choose_checkpoint(copies, team).iteration, 40);
  EXPECT_THROW((void)choose_checkpoint(copies, std::vector<CheckpointSource>{}), std::invalid_argument);
  try {
    (void)choose_checkpoint(copies, std::vector<CheckpointSource>{});
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "choose_checkpoint: no rank rolls back");
  }
}

TEST(CheckpointChoice, TheJobKeepsEachRanksOwnCopyAndItsBuddys) {
  EXPECT_EQ(kept_copies(std::vector<int>{1, 2, 0}),
            (std::vector<CheckpointSource>{{0, 0}, {0, 1}, {1, 1}, {1, 2}, {2, 2}, {2, 0}}));
  EXPECT_EQ(kept_copies(std::vector<int>{-1}), (std::vector<CheckpointSource>{{0, 0}}));
}

TEST(CheckpointChoice, ACopyIsFreedOnlyOnceANewerCheckpointIsCompleteEverywhere) {
  const std::vector<int> buddies{1, 0};
  const auto kept = kept_copies(buddies);
  // Iteration 20 is complete everywhere: the copies of 10 go, those of 20 and 30 stay.
  std::vector<CheckpointCopy> copies{{0, 0, 10, 4, 4}, {0, 1, 10, 4, 4}, {1, 1, 10, 4, 4}, {1, 0, 10, 4, 4},
                                     {0, 0, 20, 4, 4}, {0, 1, 20, 4, 4}, {1, 1, 20, 4, 4}, {1, 0, 20, 4, 4},
                                     {0, 0, 30, 4, 4}, {0, 1, 30, 4, 2}};
  const auto freed = superseded_copies(copies, kept);
  ASSERT_EQ(freed.size(), 4U);
  for (const auto& copy : freed) EXPECT_EQ(copy.iteration, 10);
  // Rank 1's copy of 20 at rank 0 still arriving: rank 0's and rank 1's own copies of 10
  // stay although their copies of 20 are complete.
  copies[7].tiles_held = 3;
  EXPECT_TRUE(superseded_copies(copies, kept).empty());
  EXPECT_TRUE(superseded_copies(std::vector<CheckpointCopy>{}, kept).empty());
}

TEST(CheckpointChoice, WorkRedoneIsAtMostOneInterval) {
  // Checkpoints every `interval` iterations (checkpoint_due); a failure after `done`
  // iterations, while the buddies' copies of a checkpoint taken then are arriving (none,
  // half or all of their tiles); holders free superseded copies as they go. The job rolls
  // back at most `interval` iterations.
  Job job(4);
  const auto plan = job.lose({1}).plan;
  ASSERT_TRUE(plan);
  const auto kept = kept_copies(job.buddies);
  for (const long interval : {1L, 3L, 7L}) {
    for (long done = 0; done <= 30; ++done) {
      for (const long arrived : {0L, 4L, 8L}) {
        std::vector<CheckpointCopy> copies;
        for (long boundary = 0; boundary <= done; boundary += interval) {
          const long tiles = boundary == done ? arrived : 8;
          for (int r = 0; r < 4; ++r) {
            copies.push_back({r, r, boundary, 8, 8});
            copies.push_back({r, (r + 1) % 4, boundary, 8, tiles});
          }
          const auto freed = superseded_copies(copies, kept);
          std::erase_if(copies, [&freed](const CheckpointCopy& c) {
            return std::any_of(freed.begin(), freed.end(), [&c](const CheckpointCopy& f) {
              return f.owner == c.owner && f.holder == c.holder && f.iteration == c.iteration;
            });
          });
        }
        // Never more than two checkpoints held: the last complete one and the one arriving.
        EXPECT_LE(copies.size(), 16U);
        const auto choice = choose_checkpoint(copies, plan->roll_back);
        if (done == 0 && arrived < 8) {
          EXPECT_EQ(choice.refusal,
                    "no complete checkpoint of rank 1 at rank 2 (iteration 0: " +
                        std::to_string(arrived) + " of 8 tiles)");
          continue;
        }
        ASSERT_TRUE(choice.iteration) << choice.refusal << " interval " << interval << " done " << done;
        EXPECT_LE(done - *choice.iteration, interval) << "interval " << interval << " done " << done;
        EXPECT_GE(done - *choice.iteration, 0);
      }
    }
  }
}

// ------------------------------------------- a loss in the first iteration after a recovery

/// Four ranks on nodes n0..n3 with the ring of buddies lose rank 1; its buddy 2 takes its
/// tiles. The survivors (new ranks 0, 1, 2 on n0, n2, n3) hold 8, 16 and 8 tiles and choose
/// buddies among themselves (choose_buddies); recover() ends by checkpointing the state it restored at
/// `iteration` under those buddies, complete at every holder (own copy and buddy's copy).
struct AfterRecovery {
  std::vector<std::string> hosts{"n0", "n2", "n3"};
  std::vector<long> tiles{8, 16, 8};
  std::vector<int> buddies = choose_buddies(hosts, tiles);
  long iteration = 9;

  [[nodiscard]] std::vector<CheckpointCopy> recovered_copies() const {
    std::vector<CheckpointCopy> copies;
    for (const CheckpointSource& kept : kept_copies(buddies)) {
      const long t = tiles[static_cast<std::size_t>(kept.owner)];
      copies.push_back({kept.owner, kept.holder, iteration, t, t});
    }
    return copies;
  }
  [[nodiscard]] RecoveryDecision lose(int rank) const {
    const std::vector<int> lost{rank};
    return plan_recovery({hosts, buddies, lost, NodeLossAction::shrink, 0, 1, {}, {}});
  }
};

TEST(CheckpointChoice, ALossRightAfterARecoveryRollsBackToTheStateItRestored) {
  // First the recovery itself: rank 1's copy is at rank 2, and the checkpoint of 9 is used.
  Job job(4);
  const auto first = job.lose({1}).plan;
  ASSERT_TRUE(first);
  ASSERT_EQ(choose_checkpoint(ring_copies(4, {9}), first->roll_back).iteration, 9);
  ASSERT_EQ(first->ranks.backup[1], 2);

  const AfterRecovery after;
  for (int r = 0; r < 3; ++r) {  // each on another node
    ASSERT_GE(after.buddies[static_cast<std::size_t>(r)], 0);
    ASSERT_NE(after.buddies[static_cast<std::size_t>(r)], r);
  }
  // Every survivor lost in the next iteration, the one that holds rank 1's tiles included
  // (new rank 1): its tiles come from its new buddy's copy of the state restored.
  for (int lost = 0; lost < 3; ++lost) {
    const auto plan = after.lose(lost).plan;
    ASSERT_TRUE(plan) << "losing new rank " << lost;
    const auto choice = choose_checkpoint(after.recovered_copies(), plan->roll_back);
    ASSERT_TRUE(choice.iteration) << choice.refusal;
    EXPECT_EQ(*choice.iteration, 9);
    const int buddy = after.buddies[static_cast<std::size_t>(lost)];
    const auto from_buddy = std::find(plan->roll_back.begin(), plan->roll_back.end(), CheckpointSource{lost, buddy});
    EXPECT_NE(from_buddy, plan->roll_back.end()) << "new rank " << lost << "'s copy is read from its buddy " << buddy;
  }
}

TEST(CheckpointChoice, TheNextCheckpointStillArrivingLeavesTheRecoveredOne) {
  const AfterRecovery after;
  // The checkpoint of iteration 10 was being taken when new rank 1 died: its copy at its
  // buddy had 5 of 16 tiles. The state restored at 9 is used.
  std::vector<CheckpointCopy> copies = after.recovered_copies();
  for (const CheckpointSource& kept : kept_copies(after.buddies)) {
    const long t = after.tiles[static_cast<std::size_t>(kept.owner)];
    copies.push_back({kept.owner, kept.holder, 10, t, kept.owner == 1 && kept.holder != 1 ? 5 : t});
  }
  const auto plan = after.lose(1).plan;
  ASSERT_TRUE(plan);
  const auto choice = choose_checkpoint(copies, plan->roll_back);
  ASSERT_TRUE(choice.iteration) << choice.refusal;
  EXPECT_EQ(*choice.iteration, 9);
  // Freeing the recovered checkpoint before the next one is complete everywhere would leave
  // nothing: it is not superseded while a copy of 10 is still arriving.
  EXPECT_TRUE(superseded_copies(copies, kept_copies(after.buddies)).empty());
}

TEST(CheckpointChoice, WithoutTheRecoveredCheckpointALossRightAfterARecoveryIsRefused) {
  // What the survivors held before recover() checkpointed the state it restored: the copies
  // from before the first loss are dropped when the numbering changes, and the checkpoint of
  // the next boundary is still arriving (nothing complete of rank 1 at rank 2).
  const AfterRecovery after;
  std::vector<CheckpointCopy> copies;
  for (const CheckpointSource& kept : kept_copies(after.buddies)) {
    const long t = after.tiles[static_cast<std::size_t>(kept.owner)];
    copies.push_back({kept.owner, kept.holder, 9, t, kept.owner == kept.holder ? t : 0});
  }
  const auto plan = after.lose(1).plan;
  ASSERT_TRUE(plan);
  const auto choice = choose_checkpoint(copies, plan->roll_back);
  EXPECT_FALSE(choice.iteration);
  EXPECT_EQ(choice.refusal, "no complete checkpoint of rank 1 at rank " + std::to_string(after.buddies[1]) +
                                " (iteration 9: 0 of 16 tiles)");
}

}  // namespace
}  // namespace bellows::runtime
