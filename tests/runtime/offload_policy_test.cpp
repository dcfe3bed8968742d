// OffloadPolicy: the pushes of proactive offloading decided on synthetic loads, speeds and
// transfer costs, without MPI or a clock.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "bellows/runtime/offload_policy.hpp"

using bellows::runtime::OffloadCandidate;
using bellows::runtime::OffloadOptions;
using bellows::runtime::OffloadPolicy;
using bellows::runtime::OffloadRank;

namespace {

constexpr double kNanosecondPerFlop = 1e-9;  // 1 GFLOP/s

/// `count` ranks of one speed with free transfers, loads in seconds.
std::vector<OffloadRank> ranks_with_loads(const std::vector<double>& loads) {
  std::vector<OffloadRank> ranks;
  for (double load : loads) {
    ranks.push_back(OffloadRank{load, kNanosecondPerFlop, 0.0, 0.0});
  }
  return ranks;
}

/// `count` candidates of `seconds` of work each (at 1 GFLOP/s) on `rank`.
void add_candidates(std::vector<OffloadCandidate>& out, int rank, int count, double seconds,
                    std::uint64_t bytes = 0) {
  for (int i = 0; i < count; ++i) {
    out.push_back(OffloadCandidate{rank, seconds / kNanosecondPerFlop, bytes, bytes > 0 ? 1U : 0U});
  }
}

}  // namespace

TEST(OffloadPolicy, BalancedRanksPushNothing) {
  const auto ranks = ranks_with_loads({1.0, 1.0, 1.0, 1.0});
  std::vector<OffloadCandidate> candidates;
  for (int r = 0; r < 4; ++r) add_candidates(candidates, r, 10, 0.1);
  const auto plan = OffloadPolicy::plan(ranks, candidates);
  EXPECT_TRUE(plan.moves.empty());
  EXPECT_DOUBLE_EQ(plan.makespan_after, 1.0);
}

TEST(OffloadPolicy, OverloadedRankPushesToTheUnderloadedUntilEven) {
  // Rank 0: 20 pieces of 0.1 s; ranks 1-3: none. Even is 0.5 s each.
  const auto ranks = ranks_with_loads({2.0, 0.0, 0.0, 0.0});
  std::vector<OffloadCandidate> candidates;
  add_candidates(candidates, 0, 20, 0.1);
  const auto plan = OffloadPolicy::plan(ranks, candidates);
  ASSERT_EQ(plan.moves.size(), 15U);
  for (const auto& move : plan.moves) {
    EXPECT_EQ(move.from, 0);
    EXPECT_NE(move.to, 0);
    EXPECT_GT(move.gain_seconds, 0.0);
  }
  EXPECT_DOUBLE_EQ(plan.makespan_before, 2.0);
  EXPECT_NEAR(plan.makespan_after, 0.5, 1e-9);
  for (double load : plan.loads_after) EXPECT_NEAR(load, 0.5, 1e-9);
}

TEST(OffloadPolicy, PushIsRefusedWhenTheTransferExceedsTheGain) {
  // One piece of 0.4 s on rank 0 (load 1.0) against rank 1 (load 0.2): moving it gains
  // 1.0 - max(0.6, 0.6) = 0.4 s. A receiver that needs 0.5 s to get its inputs refuses it,
  // one that needs 0.3 s takes it.
  std::vector<OffloadCandidate> candidates;
  add_candidates(candidates, 0, 1, 0.4, 1000);
  auto ranks = ranks_with_loads({1.0, 0.2});
  ranks[1].seconds_per_byte = 0.5 / 1000;
  EXPECT_TRUE(OffloadPolicy::plan(ranks, candidates).moves.empty());

  ranks[1].seconds_per_byte = 0.3 / 1000;
  const auto plan = OffloadPolicy::plan(ranks, candidates);
  ASSERT_EQ(plan.moves.size(), 1U);
  EXPECT_EQ(plan.moves[0].candidate, 0U);
  EXPECT_EQ(plan.moves[0].from, 0);
  EXPECT_EQ(plan.moves[0].to, 1);
  EXPECT_NEAR(plan.moves[0].transfer_seconds, 0.3, 1e-12);
  EXPECT_NEAR(plan.moves[0].gain_seconds, 1.0 - 0.9, 1e-12);  // transfer included
  EXPECT_NEAR(plan.loads_after[1], 0.2 + 0.4 + 0.3, 1e-12);
}

TEST(OffloadPolicy, TransferLatencyCountsPerTile) {
  std::vector<OffloadCandidate> candidates{OffloadCandidate{0, 0.4 / kNanosecondPerFlop, 0, 5}};
  auto ranks = ranks_with_loads({1.0, 0.2});
  ranks[1].transfer_latency_seconds = 0.1;  // 5 tiles: 0.5 s > the 0.4 s it would gain
  EXPECT_DOUBLE_EQ(OffloadPolicy::transfer_seconds(ranks[1], candidates[0]), 0.5);
  EXPECT_TRUE(OffloadPolicy::plan(ranks, candidates).moves.empty());
  ranks[1].transfer_latency_seconds = 0.05;
  EXPECT_EQ(OffloadPolicy::plan(ranks, candidates).moves.size(), 1U);
}

TEST(OffloadPolicy, UnderloadedRanksNeverPush) {
  // Rank 1 is below the mean yet has pieces; rank 2, with none, is lower still. Only rank 0
  // (overloaded) may push, and only ranks 1 and 2 (underloaded) may receive.
  const auto ranks = ranks_with_loads({3.0, 1.0, 0.0, 2.0});  // mean 1.5
  std::vector<OffloadCandidate> candidates;
  add_candidates(candidates, 1, 10, 0.1);
  add_candidates(candidates, 0, 30, 0.1);
  add_candidates(candidates, 3, 20, 0.1);
  const auto plan = OffloadPolicy::plan(ranks, candidates);
  ASSERT_FALSE(plan.moves.empty());
  for (const auto& move : plan.moves) {
    EXPECT_TRUE(move.from == 0 || move.from == 3) << "rank " << move.from << " pushed";
    EXPECT_TRUE(move.to == 1 || move.to == 2) << "rank " << move.to << " received";
    EXPECT_EQ(candidates[move.candidate].rank, move.from);
  }
  EXPECT_LT(plan.makespan_after, plan.makespan_before);
}

TEST(OffloadPolicy, ASlowedRankPushesItsWorkToFasterRanks) {
  // Equal work (10 pieces of 1e8 flops each) on 4 ranks, but rank 2 runs 4 times slower:
  // its load is 4 s against 1 s. Work moved off it costs the receiver a quarter of what
  // it cost rank 2.
  std::vector<OffloadRank> ranks;
  for (int r = 0; r < 4; ++r) {
    const double spf = r == 2 ? 4e-9 : 1e-9;
    ranks.push_back(OffloadRank{10 * 1e8 * spf, spf, 0.0, 0.0});
  }
  std::vector<OffloadCandidate> candidates;
  for (int r = 0; r < 4; ++r) {
    for (int i = 0; i < 10; ++i) candidates.push_back(OffloadCandidate{r, 1e8, 0, 0});
  }
  const auto plan = OffloadPolicy::plan(ranks, candidates);
  for (const auto& move : plan.moves) EXPECT_EQ(move.from, 2);
  // Rank 2 keeps 3 pieces (1.2 s); the 7 others go 3, 2, 2 to ranks 0, 1, 3 (1.3 s at most).
  EXPECT_EQ(plan.moves.size(), 7U);
  EXPECT_NEAR(plan.loads_after[2], 1.2, 1e-9);
  EXPECT_NEAR(plan.makespan_after, 1.3, 1e-9);
}

TEST(OffloadPolicy, NoPushBelowTheImbalanceThreshold) {
  const auto ranks = ranks_with_loads({1.04, 0.96});  // 4 % above the mean
  std::vector<OffloadCandidate> candidates;
  add_candidates(candidates, 0, 26, 0.04);
  EXPECT_TRUE(OffloadPolicy::plan(ranks, candidates).moves.empty());
  OffloadOptions eager;
  eager.min_imbalance = 0.0;
  const auto plan = OffloadPolicy::plan(ranks, candidates, eager);
  ASSERT_EQ(plan.moves.size(), 1U);
  EXPECT_NEAR(plan.makespan_after, 1.0, 1e-9);
}

TEST(OffloadPolicy, NoPushWhenThePreviousIterationTookFarLongerThanItsWork) {
  // Predicted busiest work 2 s: after an iteration of 3 s the work explains most of it, and
  // the push goes; after one of 5 s (more than twice the work) something else held it back.
  const auto ranks = ranks_with_loads({2.0, 0.0});
  std::vector<OffloadCandidate> candidates;
  add_candidates(candidates, 0, 20, 0.1);
  EXPECT_FALSE(OffloadPolicy::plan(ranks, candidates, {}, 3.0).moves.empty());
  EXPECT_TRUE(OffloadPolicy::plan(ranks, candidates, {}, 5.0).moves.empty());
  OffloadOptions any_share;
  any_share.min_compute_share = 0.0;
  EXPECT_FALSE(OffloadPolicy::plan(ranks, candidates, any_share, 5.0).moves.empty());
}

TEST(OffloadPolicy, PlanIsAFunctionOfItsInputs) {
  // Equal candidates and equal receivers: ties go to the lower candidate and rank, every time.
  const auto ranks = ranks_with_loads({2.0, 0.0, 0.0, 0.0});
  std::vector<OffloadCandidate> candidates;
  add_candidates(candidates, 0, 20, 0.1, 64);
  const auto first = OffloadPolicy::plan(ranks, candidates);
  for (int run = 0; run < 5; ++run) {
    const auto again = OffloadPolicy::plan(ranks, candidates);
    EXPECT_EQ(again.moves, first.moves);
    EXPECT_EQ(again.loads_after, first.loads_after);
  }
  ASSERT_GE(first.moves.size(), 3U);
  EXPECT_EQ(first.moves[0].candidate, 0U);
  EXPECT_EQ(first.moves[0].to, 1);
  EXPECT_EQ(first.moves[1].to, 2);
  EXPECT_EQ(first.moves[2].to, 3);
}

TEST(OffloadPolicy, PrefersTheCandidateThatEvensThePairOut) {
  // Gap of 1.0 s between ranks 0 and 1: a 0.5 s piece evens them exactly, a 0.9 s piece
  // would only swap the roles.
  std::vector<OffloadCandidate> candidates{OffloadCandidate{0, 0.9e9, 0, 0},
                                           OffloadCandidate{0, 0.5e9, 0, 0}};
  const auto ranks = ranks_with_loads({1.5, 0.5});
  const auto plan = OffloadPolicy::plan(ranks, candidates);
  ASSERT_EQ(plan.moves.size(), 1U);
  EXPECT_EQ(plan.moves[0].candidate, 1U);
  EXPECT_NEAR(plan.makespan_after, 1.0, 1e-9);
}

TEST(OffloadPolicy, RejectsInputsThatNameNoRankOrAreNotFinite) {
  const auto ranks = ranks_with_loads({1.0, 0.0});
  const std::vector<OffloadCandidate> outside{OffloadCandidate{2, 1e8, 0, 0}};
  EXPECT_THROW((void)OffloadPolicy::plan(ranks, outside), std::invalid_argument);
  auto bad = ranks;
  bad[1].seconds_per_flop = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW((void)OffloadPolicy::plan(bad, {}), std::invalid_argument);
  bad = ranks;
  bad[0].load_seconds = -1.0;
  EXPECT_THROW((void)OffloadPolicy::plan(bad, {}), std::invalid_argument);
}

// ---------------------------------------------------------------- whether the plans pay

TEST(OffloadFeedback, TheFirstIterationIsNoReference) {
  bellows::runtime::OffloadFeedback feedback;
  EXPECT_FALSE(feedback.may_plan());  // nothing to measure a plan against
  feedback.iteration_ended(false, 2.0, 4);  // warm-up included
  EXPECT_DOUBLE_EQ(feedback.unplanned_seconds(), 0.0);
  EXPECT_FALSE(feedback.may_plan());
  feedback.iteration_ended(false, 1.0, 4);  // stealing alone, measured
  EXPECT_TRUE(feedback.may_plan());
  feedback.iteration_ended(true, 1.5, 4);  // slower than stealing alone
  EXPECT_FALSE(feedback.may_plan());
}

TEST(OffloadFeedback, PlansGoOnWhileTheyAreNoSlowerThanStealingAlone) {
  bellows::runtime::OffloadFeedback feedback;
  feedback.iteration_ended(false, 1.20, 4);  // the first: warm-up
  feedback.iteration_ended(false, 1.00, 4);  // nothing moved: stealing alone
  EXPECT_DOUBLE_EQ(feedback.unplanned_seconds(), 1.00);
  feedback.iteration_ended(true, 0.95, 4);  // a plan that won
  EXPECT_TRUE(feedback.may_plan());
  feedback.iteration_ended(true, 1.00, 4);  // and one at par
  EXPECT_TRUE(feedback.may_plan());
  EXPECT_EQ(feedback.held_back(), 0U);
}

TEST(OffloadFeedback, ALosingPlanHoldsThePlansBackLongerEachTime) {
  bellows::runtime::OffloadFeedback feedback;
  feedback.iteration_ended(false, 0.70, 4);  // the first: warm-up
  feedback.iteration_ended(false, 0.55, 4);
  feedback.iteration_ended(true, 0.59, 4);  // slower than stealing alone: 1 iteration off
  EXPECT_FALSE(feedback.may_plan());
  feedback.iteration_ended(false, 0.56, 4);
  EXPECT_TRUE(feedback.may_plan());
  feedback.iteration_ended(true, 0.58, 4);  // lost again: 2 off
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(feedback.may_plan()) << i;
    feedback.iteration_ended(false, 0.55, 4);
  }
  EXPECT_TRUE(feedback.may_plan());
  feedback.iteration_ended(true, 0.57, 4);  // 4 off
  for (int i = 0; i < 4; ++i) feedback.iteration_ended(false, 0.55, 4);
  EXPECT_EQ(feedback.held_back(), 7U);
  // A win resets the hold to 1.
  feedback.iteration_ended(true, 0.50, 4);
  feedback.iteration_ended(true, 0.60, 4);
  EXPECT_FALSE(feedback.may_plan());
  feedback.iteration_ended(false, 0.55, 4);
  EXPECT_TRUE(feedback.may_plan());
}

TEST(OffloadFeedback, TheHoldStopsGrowingAtItsCeiling) {
  bellows::runtime::OffloadFeedback feedback;
  feedback.iteration_ended(false, 1.0, 2);  // the first: warm-up
  feedback.iteration_ended(false, 1.0, 2);
  int longest = 0;
  for (int loss = 0; loss < 8; ++loss) {
    feedback.iteration_ended(true, 2.0, 2);
    int held = 0;
    while (!feedback.may_plan()) {
      feedback.iteration_ended(false, 1.0, 2);
      ++held;
    }
    longest = std::max(longest, held);
  }
  EXPECT_EQ(longest, bellows::runtime::OffloadFeedback::kMaxSkip);
}

TEST(OffloadFeedback, ANewSizeStartsOver) {
  bellows::runtime::OffloadFeedback feedback;
  feedback.iteration_ended(false, 0.6, 4);  // the first: warm-up
  feedback.iteration_ended(false, 0.5, 4);
  feedback.iteration_ended(true, 0.6, 4);
  EXPECT_FALSE(feedback.may_plan());
  // Grown to 6 ranks: the 4-rank times say nothing of a 6-rank plan, and the first 6-rank
  // iteration is the new size's warm-up.
  feedback.iteration_ended(false, 0.7, 6);
  EXPECT_FALSE(feedback.may_plan());
  EXPECT_DOUBLE_EQ(feedback.unplanned_seconds(), 0.0);
  feedback.iteration_ended(false, 0.65, 6);
  EXPECT_TRUE(feedback.may_plan());
}

TEST(OffloadPolicy, ARankDriftsWhenItRunsSlowerThanPlannedAndPastThePlannedMakespan) {
  OffloadOptions options;
  options.min_imbalance = 0.05;
  const auto drift = [](double work, double speed) {
    OffloadPolicy::Drift d;
    d.predicted_work_seconds = work;
    d.planned_makespan_seconds = 1.0;
    d.seconds_per_flop = speed * kNanosecondPerFlop;
    d.planned_seconds_per_flop = kNanosecondPerFlop;
    return d;
  };
  EXPECT_FALSE(OffloadPolicy::drifted(drift(1.0, 1.0), options)) << "on plan";
  EXPECT_TRUE(OffloadPolicy::drifted(drift(3.0, 3.0), options)) << "a rank slowed 3x";
  EXPECT_FALSE(OffloadPolicy::drifted(drift(1.2, 1.2), options)) << "task times that vary";
  EXPECT_TRUE(OffloadPolicy::drifted(drift(1.3, 1.3), options)) << "slower than kDriftSlowdown";
  EXPECT_FALSE(OffloadPolicy::drifted(drift(1.04, 1.3), options))
      << "slower, but its work within min_imbalance of the makespan";
  EXPECT_FALSE(OffloadPolicy::drifted(drift(1.5, 1.0), options))
      << "more work at the planned speed (it stole some) is no drift";
  EXPECT_FALSE(OffloadPolicy::drifted(drift(0.9, 2.0), options))
      << "slower, but its work still ends within the plan's makespan";
  auto no_plan = drift(3.0, 3.0);
  no_plan.planned_makespan_seconds = 0.0;
  EXPECT_FALSE(OffloadPolicy::drifted(no_plan, options)) << "no plan, no drift";
  auto no_speed = drift(3.0, 3.0);
  no_speed.planned_seconds_per_flop = 0.0;
  EXPECT_FALSE(OffloadPolicy::drifted(no_speed, options)) << "no planned speed, no drift";
}

TEST(OffloadPolicy, ADriftingRankInvitesTheLeastLoadedFirstAndNeverItself) {
  const std::vector<double> loads{0.5, 0.9, 0.2, 0.5};
  EXPECT_EQ(OffloadPolicy::invitation_order(loads, 1), (std::vector<int>{2, 0, 3}));
  EXPECT_EQ(OffloadPolicy::invitation_order(loads, 2), (std::vector<int>{0, 3, 1}))
      << "ties go to the lower rank";
  EXPECT_TRUE(OffloadPolicy::invitation_order(std::vector<double>{1.0}, 0).empty());
}

TEST(OffloadPolicyInvitations, OneInvitationPerTwoRoundTrips) {
  EXPECT_TRUE(OffloadPolicy::may_invite(-1.0, 1e-3)) << "the first of the iteration";
  EXPECT_FALSE(OffloadPolicy::may_invite(0.0, 1e-3));
  EXPECT_FALSE(OffloadPolicy::may_invite(1.9e-3, 1e-3));
  EXPECT_TRUE(OffloadPolicy::may_invite(2e-3, 1e-3));
  EXPECT_TRUE(OffloadPolicy::may_invite(0.0, 0.0)) << "no round trip measured: no wait";
}
