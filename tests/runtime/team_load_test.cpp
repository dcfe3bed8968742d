// What TeamLB weighs each tile by and whether planning again pays (team_load.hpp): the median
// over a window of iterations forgets a one-off spike, follows a lasting change, weighs a tile
// seen once by its one sample; a rank's slowness per flop against the median rank, as a whole
// and class by class (a kernel mix is no slowness, a rank slowed in every class reads its
// factor, a slowed rank of a class two ranks run leaves the other's reading alone); a re-plan
// only above the least gain and within the cut bound.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/options.hpp"
#include "bellows/runtime/team_load.hpp"

namespace bellows::runtime {
namespace {

template <typename Call>
std::string refusal(Call&& call) {
  try {
    call();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

/// Adds one iteration in which every tile ran one task.
void add(TileLoadHistory& history, const std::vector<double>& seconds) {
  const std::vector<double> tasks(seconds.size(), 1.0);
  history.add_iteration(seconds, tasks);
}

TEST(TileLoadHistory, EmptyUntilAnIterationIsAdded) {
  const TileLoadHistory history(5);
  EXPECT_TRUE(history.loads().empty());
  EXPECT_EQ(history.iterations(), 0);
  EXPECT_FALSE(history.full());
}

TEST(TileLoadHistory, ATileSeenOnceWeighsItsOneSample) {
  TileLoadHistory history(5);
  add(history, {2.0, 0.5, 0.0});
  EXPECT_EQ(history.loads(), (std::vector<double>{2.0, 0.5, 0.0}));
  EXPECT_EQ(history.iterations(), 1);
  // A tile whose tasks ran in no iteration but the third: its one sample, not diluted by the
  // iterations it was not seen in.
  TileLoadHistory late(5);
  late.add_iteration(std::vector<double>{1.0, 0.0}, std::vector<double>{1.0, 0.0});
  late.add_iteration(std::vector<double>{1.0, 0.0}, std::vector<double>{1.0, 0.0});
  late.add_iteration(std::vector<double>{1.0, 3.0}, std::vector<double>{1.0, 2.0});
  EXPECT_EQ(late.loads(), (std::vector<double>{1.0, 3.0}));
}

TEST(TileLoadHistory, ForgetsAOneOffSpikeAtOnce) {
  TileLoadHistory history(5);
  add(history, {1.0, 1.0});
  add(history, {1.0, 1.0});
  add(history, {9.0, 1.0});  // one iteration preempted on the first tile's rank
  EXPECT_EQ(history.loads(), (std::vector<double>{1.0, 1.0}));
  add(history, {1.0, 1.0});
  add(history, {1.0, 1.0});
  EXPECT_EQ(history.loads(), (std::vector<double>{1.0, 1.0}));
  // Two spikes of five are still a minority.
  add(history, {7.0, 1.0});
  EXPECT_EQ(history.loads(), (std::vector<double>{1.0, 1.0}));
}

TEST(TileLoadHistory, FollowsALastingChangeOnceItHoldsMoreThanHalfTheWindow) {
  TileLoadHistory history(5);
  for (int i = 0; i < 5; ++i) add(history, {1.0, 1.0});
  ASSERT_TRUE(history.full());
  add(history, {4.0, 1.0});  // the first tile's rank slows down from here on
  add(history, {4.0, 1.0});
  EXPECT_EQ(history.loads()[0], 1.0) << "two slow iterations of five";
  add(history, {4.0, 1.0});
  EXPECT_EQ(history.loads()[0], 4.0) << "three of five";
  add(history, {4.0, 1.0});
  add(history, {4.0, 1.0});
  EXPECT_EQ(history.loads(), (std::vector<double>{4.0, 1.0})) << "the old speed forgotten";
}

TEST(TileLoadHistory, AnEvenCountWeighsTheMeanOfTheMiddleTwo) {
  TileLoadHistory history(4);
  add(history, {1.0});
  add(history, {3.0});
  EXPECT_EQ(history.loads(), (std::vector<double>{2.0}));
  add(history, {10.0});
  add(history, {2.0});
  EXPECT_EQ(history.loads(), (std::vector<double>{2.5}));
}

TEST(TileLoadHistory, AWindowOfOneIsTheLastIteration) {
  TileLoadHistory history(1);
  add(history, {1.0, 2.0});
  add(history, {5.0, 3.0});
  EXPECT_EQ(history.loads(), (std::vector<double>{5.0, 3.0}));
  EXPECT_TRUE(history.full());
  EXPECT_EQ(history.iterations(), 1);
}

TEST(TileLoadHistory, ClearForgetsEveryTile) {
  TileLoadHistory history(3);
  add(history, {1.0, 2.0});
  history.clear();
  EXPECT_TRUE(history.loads().empty());
  EXPECT_EQ(history.iterations(), 0);
  add(history, {4.0, 5.0, 6.0});  // the tile count may change with the tiles
  EXPECT_EQ(history.loads(), (std::vector<double>{4.0, 5.0, 6.0}));
}

TEST(TileLoadHistory, BadInputIsRefusedByName) {
  EXPECT_EQ(refusal([] { TileLoadHistory history(0); }),
            "TileLoadHistory: the window must be at least 1 iteration, got 0");
  TileLoadHistory history(3);
  EXPECT_EQ(refusal([&] { history.add_iteration(std::vector<double>{1.0, 2.0}, std::vector<double>{1.0}); }),
            "TileLoadHistory: 2 tiles' seconds but 1 tiles' task counts");
  EXPECT_EQ(refusal([&] { history.add_iteration(std::vector<double>{1.0, -2.0}, std::vector<double>{1.0, 1.0}); }),
            "TileLoadHistory: tile 1's seconds must be finite and not negative, got -2");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(refusal([&] { history.add_iteration(std::vector<double>{1.0}, std::vector<double>{nan}); }),
            "TileLoadHistory: tile 0's task count must be finite and not negative, got nan");
  add(history, {1.0, 2.0});
  EXPECT_EQ(refusal([&] { add(history, {1.0, 2.0, 3.0}); }),
            "TileLoadHistory: an iteration of 3 tiles, the history holds 2");
  EXPECT_EQ(history.loads(), (std::vector<double>{1.0, 2.0})) << "a refused iteration changes nothing";
}

TEST(RankSlowness, ARankSlowerPerFlopThanTheMedianByMoreThanTheTolerance) {
  // Rank 1 took four times the seconds per flop of the others; rank 3 a tenth more, which
  // kernels of different kinds can account for.
  const std::vector<double> seconds{1.0, 4.0, 2.0, 1.1}, flops{1e9, 1e9, 2e9, 1e9};
  const auto slowness = rank_slowness(seconds, flops);
  ASSERT_EQ(slowness.size(), 4U);
  EXPECT_DOUBLE_EQ(slowness[0], 1.0);
  EXPECT_DOUBLE_EQ(slowness[1], 4.0 / 1.05) << "against the median of 1.0, 1.0, 1.1 and 4.0 ns per flop";
  EXPECT_DOUBLE_EQ(slowness[2], 1.0);
  EXPECT_DOUBLE_EQ(slowness[3], 1.0) << "within the tolerance";
  EXPECT_NEAR(rank_slowness(seconds, flops, 0.0)[3], 1.1 / 1.05, 1e-12);
}

TEST(RankSlowness, ARankThatRanNothingCountsAsTheMedian) {
  const std::vector<double> seconds{0.0, 2.0, 1.0}, flops{0.0, 1.0, 1.0};
  EXPECT_EQ(rank_slowness(seconds, flops), (std::vector<double>{1.0, 2.0 / 1.5, 1.0 / 1.5}));
  const std::vector<double> none{0.0, 0.0};
  EXPECT_EQ(rank_slowness(none, none), (std::vector<double>{1.0, 1.0}));
  EXPECT_TRUE(rank_slowness({}, {}).empty());
}

TEST(RankSlowness, BadInputIsRefusedByName) {
  const std::vector<double> two{1.0, 1.0}, one{1.0}, negative{1.0, -1.0};
  EXPECT_EQ(refusal([&] { (void)rank_slowness(two, one); }), "rank_slowness: seconds of 2 ranks but flops of 1");
  EXPECT_EQ(refusal([&] { (void)rank_slowness(two, negative); }),
            "rank_slowness: rank 1's flops must be finite and not negative, got -1");
  EXPECT_EQ(refusal([&] { (void)rank_slowness(two, two, -0.5); }),
            "rank_slowness: the tolerance must be finite and not negative, got -0.5");
}

// Four ranks of a Cholesky-like mix, classes (diagonal, off-diagonal): the diagonal class runs
// at 3 ns per flop, the other at 1 ns, on every rank that runs it; ranks 0 and 3 hold the
// diagonal tiles. Rank r's class c at r * 2 + c.
const std::vector<double> kMixFlops{1e9, 3e9, 0.0, 4e9, 0.0, 4e9, 1e9, 3e9};
std::vector<double> mix_seconds(double rank_1_slowed = 1.0, double rank_3_slowed = 1.0) {
  return {3.0, 3.0, 0.0, 4.0 * rank_1_slowed, 0.0, 4.0, 3.0 * rank_3_slowed, 3.0 * rank_3_slowed};
}

void expect_near(const std::vector<double>& got, const std::vector<double>& expected, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (std::size_t r = 0; r < got.size(); ++r) EXPECT_NEAR(got[r], expected[r], 1e-12) << what << ", rank " << r;
}

TEST(RankSlowness, AKernelMixAloneReadsAsNoSlownessClassByClass) {
  const auto seconds = mix_seconds();
  EXPECT_EQ(rank_slowness_by_class(seconds, kMixFlops, 2), (std::vector<double>{1.0, 1.0, 1.0, 1.0}));
  EXPECT_EQ(rank_slowness_by_class(seconds, kMixFlops, 2, 0.0), (std::vector<double>{1.0, 1.0, 1.0, 1.0}))
      << "not even past no tolerance (each class at its median)";
  // Per rank alone, the ranks with diagonal tiles read 1.5 ns per flop against a median of
  // 1.25: 1.2 times slower, the others 0.8, past a tolerance of 0.1.
  std::vector<double> rank_seconds(4), rank_flops(4);
  for (std::size_t r = 0; r < 4; ++r) {
    rank_seconds[r] = seconds[2 * r] + seconds[2 * r + 1];
    rank_flops[r] = kMixFlops[2 * r] + kMixFlops[2 * r + 1];
  }
  expect_near(rank_slowness(rank_seconds, rank_flops, 0.1), {1.2, 0.8, 0.8, 1.2}, "per rank alone");
}

TEST(RankSlowness, ARankSlowedInEveryClassReadsItsFactorWhateverItsMix) {
  expect_near(rank_slowness_by_class(mix_seconds(4.0), kMixFlops, 2), {1.0, 4.0, 1.0, 1.0},
              "rank 1 (off-diagonal tiles only) four times slower");
  // Rank 3 holds diagonal tiles too, a class only ranks 0 and 3 run: the off-diagonal class,
  // which every rank runs, tells its speed.
  expect_near(rank_slowness_by_class(mix_seconds(1.0, 4.0), kMixFlops, 2), {1.0, 1.0, 1.0, 4.0},
              "rank 3 (diagonal tiles too) four times slower");
}

TEST(RankSlowness, OneSlowedRankOfAClassTwoRanksRunDoesNotMakeTheOtherReadFast) {
  // The diagonal class's median among ranks 0 and 3 alone would be the mean of 3 and 12 ns
  // per flop: rank 3 would read 2.29 and rank 0 0.57. Each reads from the class all four run.
  for (const double tolerance : {0.25, 0.0}) {
    const std::string what = "tolerance " + std::to_string(tolerance);
    expect_near(rank_slowness_by_class(mix_seconds(1.0, 4.0), kMixFlops, 2, tolerance), {1.0, 1.0, 1.0, 4.0},
                "rank 3 slowed, " + what);
    std::vector<double> rank_0_slowed = mix_seconds();
    rank_0_slowed[0] *= 4.0;
    rank_0_slowed[1] *= 4.0;
    expect_near(rank_slowness_by_class(rank_0_slowed, kMixFlops, 2, tolerance), {4.0, 1.0, 1.0, 1.0},
                "rank 0 slowed, " + what);
  }
}

// Classes (A, B): ranks 0, 1 and 2 run A at 1 ns per flop; B, at 2 ns, only ranks 0 and 3.
const std::vector<double> kFewRankFlops{1e9, 1e9, 2e9, 0.0, 2e9, 0.0, 0.0, 2e9};
std::vector<double> few_rank_seconds(double rank_0_slowed, double rank_3_slowed) {
  return {1.0 * rank_0_slowed, 2.0 * rank_0_slowed, 2.0, 0.0, 2.0, 0.0, 0.0, 4.0 * rank_3_slowed};
}

TEST(RankSlowness, ARankThatRanOnlyAFewRankClassIsReadAgainstThePeersOtherClassesTell) {
  // Rank 3 runs only B, with rank 0, whose speed A tells: B's speed is rank 0's with its
  // slowness taken out. Against B's plain median, rank 3 would read 0.4 with rank 0 slowed
  // four times, and 1.6 (rank 0 0.67) slowed four times itself.
  expect_near(rank_slowness_by_class(few_rank_seconds(1.0, 1.0), kFewRankFlops, 2, 0.0), {1.0, 1.0, 1.0, 1.0},
              "none slowed");
  expect_near(rank_slowness_by_class(few_rank_seconds(4.0, 1.0), kFewRankFlops, 2), {4.0, 1.0, 1.0, 1.0},
              "rank 0 slowed");
  expect_near(rank_slowness_by_class(few_rank_seconds(1.0, 4.0), kFewRankFlops, 2), {1.0, 1.0, 1.0, 4.0},
              "rank 3 slowed");
  // Both slowed alike: each reads its factor.
  expect_near(rank_slowness_by_class(few_rank_seconds(2.0, 2.0), kFewRankFlops, 2), {2.0, 1.0, 1.0, 2.0},
              "ranks 0 and 3 slowed twice");
}

TEST(RankSlowness, TwoRanksThatAloneRanAnythingReadAgainstTheirMean) {
  // No class tells either's speed: one is slower than the other, no more.
  const std::vector<double> seconds{3.0, 1.0, 1.0, 1.0}, flops{1.0, 1.0, 1.0, 1.0};
  expect_near(rank_slowness_by_class(seconds, flops, 2), {4.0 / 3.0, 2.0 / 3.0}, "ranks 0 and 1");
}

TEST(RankSlowness, ByClassARankThatRanNothingCountsAsTheMedian) {
  // Class 0's median: 1.5 ns per flop (ranks 1 and 2), class 1's: 1 ns. Rank 1 (2 + 1 s)
  // against 1.5 + 1 reads 1.2, rank 2 (1 + 1 s) 0.8: both inside the tolerance.
  const std::vector<double> seconds{0.0, 0.0, 2.0, 1.0, 1.0, 1.0}, flops{0.0, 0.0, 1.0, 1.0, 1.0, 1.0};
  EXPECT_EQ(rank_slowness_by_class(seconds, flops, 2), (std::vector<double>{1.0, 1.0, 1.0}));
  expect_near(rank_slowness_by_class(seconds, flops, 2, 0.0), {1.0, 1.2, 0.8}, "no tolerance");
  EXPECT_TRUE(rank_slowness_by_class({}, {}, 3).empty());
}

TEST(RankSlowness, ByClassBadInputIsRefusedByName) {
  const std::vector<double> four{1.0, 1.0, 1.0, 1.0}, three{1.0, 1.0, 1.0}, negative{1.0, 1.0, 1.0, -1.0};
  EXPECT_EQ(refusal([&] { (void)rank_slowness_by_class(four, four, 0); }), "rank_slowness_by_class: no task classes");
  EXPECT_EQ(refusal([&] { (void)rank_slowness_by_class(four, three, 2); }),
            "rank_slowness_by_class: 4 seconds but 3 flops");
  EXPECT_EQ(refusal([&] { (void)rank_slowness_by_class(three, three, 2); }),
            "rank_slowness_by_class: 3 values are not a whole number of ranks of 2 classes");
  EXPECT_EQ(refusal([&] { (void)rank_slowness_by_class(four, negative, 2); }),
            "rank_slowness_by_class: rank 1's flops of class 1 must be finite and not negative, got -1");
  EXPECT_EQ(refusal([&] { (void)rank_slowness_by_class(four, four, 2, -0.5); }),
            "rank_slowness_by_class: the tolerance must be finite and not negative, got -0.5");
}

ReplanFacts facts(const std::vector<double>& now, const std::vector<double>& planned) {
  ReplanFacts f;
  f.rank_seconds_now = now;
  f.rank_seconds_planned = planned;
  f.crossing_bytes_now = 100.0;
  f.crossing_bytes_planned = 105.0;
  f.crossing_bytes_reference = 100.0;
  return f;
}

TEST(ReplanDecision, ReplansWhenTheHeaviestRankFallsByMoreThanTheLeastGain) {
  const std::vector<double> now{4.0, 1.0, 1.0, 1.0}, planned{2.0, 2.0, 2.0, 1.0};
  const auto decision = replan_decision(facts(now, planned));
  EXPECT_TRUE(decision.replan);
  EXPECT_DOUBLE_EQ(decision.gain, 0.5);
  EXPECT_EQ(decision.reason,
            "the heaviest rank's predicted seconds go from 4 to 2 (50.0 %), more than the 10.0 % that pays "
            "for a re-plan");
}

TEST(ReplanDecision, KeepsTheTeamsWhenTheGainDoesNotPay) {
  const std::vector<double> now{1.05, 1.0, 1.0}, planned{1.0, 1.02, 1.03};
  const auto decision = replan_decision(facts(now, planned));
  EXPECT_FALSE(decision.replan);
  EXPECT_NEAR(decision.gain, 0.02 / 1.05, 1e-12);
  EXPECT_EQ(decision.reason,
            "the heaviest rank's predicted seconds go from 1.05 to 1.03 (1.9 %), not more than the 10.0 % that "
            "pays for a re-plan");
  // Exactly the least gain does not pay either; a plan that is worse never does.
  const std::vector<double> two_now{2.0, 1.0}, two_planned{1.5, 1.5};
  auto exactly = facts(two_now, two_planned);
  exactly.min_gain = 0.25;
  EXPECT_FALSE(replan_decision(exactly).replan);
  const std::vector<double> worse{1.2, 1.0, 1.0};
  EXPECT_FALSE(replan_decision(facts(now, worse)).replan);
  EXPECT_LT(replan_decision(facts(now, worse)).gain, 0.0);
}

TEST(ReplanDecision, KeepsTheTeamsWhenThePlanCutPassesTheBound) {
  const std::vector<double> now{4.0, 1.0}, planned{2.5, 2.5};
  auto f = facts(now, planned);
  f.crossing_bytes_planned = 111.0;
  const auto decision = replan_decision(f);
  EXPECT_FALSE(decision.replan);
  EXPECT_EQ(decision.reason,
            "the heaviest rank's predicted seconds go from 4 to 2.5 (37.5 %), but the plan's 111 bytes crossing "
            "teams pass 110, (1 + 0.1) times the load-blind partition's 100");
  f.crossing_bytes_planned = 110.0;
  EXPECT_TRUE(replan_decision(f).replan) << "at the bound is within it";
  // Without a reference (teams partitioned by tiles) the bound holds against the cut now.
  f.crossing_bytes_reference = -1.0;
  f.crossing_bytes_now = 50.0;
  EXPECT_FALSE(replan_decision(f).replan);
  EXPECT_NE(replan_decision(f).reason.find("times the bytes crossing now, 50"), std::string::npos);
}

TEST(ReplanDecision, NothingLoadedNowGainsNothing) {
  const std::vector<double> idle{0.0, 0.0}, planned{0.0, 0.0};
  const auto decision = replan_decision(facts(idle, planned));
  EXPECT_FALSE(decision.replan);
  EXPECT_EQ(decision.gain, 0.0);
}

TEST(ReplanDecision, BadFactsAreRefusedByName) {
  const std::vector<double> two{1.0, 1.0}, three{1.0, 1.0, 1.0}, negative{1.0, -1.0};
  EXPECT_EQ(refusal([&] { (void)replan_decision(facts(two, three)); }),
            "replan_decision: seconds of 2 ranks now and of 3 planned; both need the job's ranks");
  EXPECT_EQ(refusal([&] { (void)replan_decision(facts({}, {})); }),
            "replan_decision: seconds of 0 ranks now and of 0 planned; both need the job's ranks");
  EXPECT_EQ(refusal([&] { (void)replan_decision(facts(two, negative)); }),
            "replan_decision: rank 1's seconds planned must be finite and not negative, got -1");
  auto f = facts(two, two);
  f.min_gain = -0.1;
  EXPECT_EQ(refusal([&] { (void)replan_decision(f); }),
            "replan_decision: the least gain must be finite and not negative, got -0.1");
  f = facts(two, two);
  f.cut_bound = std::numeric_limits<double>::infinity();
  EXPECT_EQ(refusal([&] { (void)replan_decision(f); }),
            "replan_decision: the cut bound must be finite and not negative, got inf");
  f = facts(two, two);
  f.crossing_bytes_reference = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(refusal([&] { (void)replan_decision(f); }),
            "replan_decision: the reference's crossing bytes must be finite and not negative, got nan");
}

TEST(ReplanDecision, TheOptionsDefaultsAndRefusals) {
  MessageLogOptions options;
  EXPECT_EQ(options.load_window, 5);
  EXPECT_TRUE(options.replan);
  EXPECT_DOUBLE_EQ(options.replan_min_gain, 0.10);
  EXPECT_EQ(validate(options), "");
  options.load_window = 0;
  EXPECT_EQ(validate(options), "message log: TeamLB's load window must be at least 1 iteration, got 0");
  options.load_window = 3;
  options.replan_min_gain = -1.0;
  EXPECT_EQ(validate(options),
            "message log: TeamLB's least gain for a re-plan must be finite and not negative, got -1.000000");
}

}  // namespace
}  // namespace bellows::runtime
