// survivors_without: who is left after ranks died, and their numbers in the rebuilt communicator.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/survivors.hpp"

namespace bellows::runtime {
namespace {

std::string refusal(int size, const std::vector<int>& dead) {
  try {
    (void)survivors_without(size, dead);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Survivors, KeepTheirOrderSoTheFirstSurvivorBecomesRankZero) {
  EXPECT_EQ(survivors_without(4, std::vector<int>{0}), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(survivors_without(4, std::vector<int>{2}), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(survivors_without(4, std::vector<int>{3}), (std::vector<int>{0, 1, 2}));
}

TEST(Survivors, DeadRanksMayComeInAnyOrder) {
  EXPECT_EQ(survivors_without(6, std::vector<int>{4, 0, 2}), (std::vector<int>{1, 3, 5}));
}

TEST(Survivors, NoDeadLeavesEveryRank) {
  EXPECT_EQ(survivors_without(3, std::vector<int>{}), (std::vector<int>{0, 1, 2}));
}

TEST(Survivors, NewRankOfEachOldRank) {
  const std::vector<int> survivors = survivors_without(5, std::vector<int>{0, 3});
  EXPECT_EQ(survivor_rank(survivors, 1), 0);
  EXPECT_EQ(survivor_rank(survivors, 2), 1);
  EXPECT_EQ(survivor_rank(survivors, 4), 2);
  EXPECT_EQ(survivor_rank(survivors, 0), -1);
  EXPECT_EQ(survivor_rank(survivors, 3), -1);
  EXPECT_EQ(survivor_rank(survivors, 7), -1);
}

TEST(Survivors, BadDeadSetsAreRefusedByName) {
  EXPECT_EQ(refusal(4, {4}), "survivors: dead rank 4 is out of range [0, 4)");
  EXPECT_EQ(refusal(4, {-1}), "survivors: dead rank -1 is out of range [0, 4)");
  EXPECT_EQ(refusal(4, {1, 2, 1}), "survivors: dead rank 1 is listed twice");
  EXPECT_EQ(refusal(2, {1, 0}), "survivors: all 2 ranks are listed as dead; nobody is left to carry on");
  EXPECT_EQ(refusal(0, {}), "survivors: a communicator of 0 ranks has no survivors to number");
}

TEST(Survivors, WithoutDataTheDeadHandNothingOnAndTheSurvivorsKeepTheirOrder) {
  const ShrinkPlan plan = plan_survivors_without_data(5, std::vector<int>{3, 0});
  EXPECT_EQ(plan.new_rank, (std::vector<int>{-1, 0, 1, -1, 2}));
  EXPECT_EQ(plan.backup, (std::vector<int>{-1, 1, 2, -1, 4}));
  EXPECT_TRUE(plan.leaves(0));
  EXPECT_TRUE(plan.leaves(3));
  EXPECT_FALSE(plan.leaves(1));
  EXPECT_FALSE(plan.leaves(4));
}

TEST(Survivors, WithoutDataBadDeadSetsAreRefusedAsSurvivorsWithoutRefusesThem) {
  try {
    (void)plan_survivors_without_data(3, std::vector<int>{0, 1, 2});
    FAIL() << "every rank dead was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "survivors: all 3 ranks are listed as dead; nobody is left to carry on");
  }
  try {
    (void)plan_survivors_without_data(3, std::vector<int>{3});
    FAIL() << "a dead rank out of range was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "survivors: dead rank 3 is out of range [0, 3)");
  }
}

}  // namespace
}  // namespace bellows::runtime
