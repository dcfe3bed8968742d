// plan_shrink: the backups that take leaving ranks' tiles, and the survivors' new numbers.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/shrink_plan.hpp"

namespace bellows::runtime {
namespace {

std::string refusal(const std::vector<long>& held, const std::vector<int>& leaving) {
  try {
    (void)plan_shrink(held, leaving);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ShrinkPlan, OneLeaverGoesToTheNextStayingRankWhenLoadsAreEqual) {
  const std::vector<long> held{4, 4, 4, 4};
  const auto plan = plan_shrink(held, std::vector<int>{2});
  EXPECT_EQ(plan.backup, (std::vector<int>{0, 1, 3, 3}));
  EXPECT_EQ(plan.new_rank, (std::vector<int>{0, 1, -1, 2}));
  EXPECT_TRUE(plan.leaves(2));
  EXPECT_FALSE(plan.leaves(3));
  EXPECT_FALSE(plan.leaves(-1));
}

TEST(ShrinkPlan, ABlockOfLeaversSpreadsOverTheLeastLoadedSurvivors) {
  // Ranks 4..7 leave; each takes the survivor holding least, its own tiles counted once
  // chosen, so the four leavers land on four different survivors.
  const std::vector<long> held(8, 10);
  const auto plan = plan_shrink(held, std::vector<int>{4, 5, 6, 7});
  EXPECT_EQ(plan.backup, (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(plan.new_rank, (std::vector<int>{0, 1, 2, 3, -1, -1, -1, -1}));
}

TEST(ShrinkPlan, TheLeastLoadedSurvivorWinsOverRingOrder) {
  const std::vector<long> held{9, 5, 9, 1};
  const auto plan = plan_shrink(held, std::vector<int>{1});
  EXPECT_EQ(plan.backup[1], 3);
  EXPECT_EQ(plan.new_rank, (std::vector<int>{0, -1, 1, 2}));
}

TEST(ShrinkPlan, LeaversAreTakenInRankOrderWhateverTheRequestOrder) {
  const std::vector<long> held{0, 3, 3, 0};
  const auto a = plan_shrink(held, std::vector<int>{2, 1});
  const auto b = plan_shrink(held, std::vector<int>{1, 2});
  EXPECT_EQ(a.backup, b.backup);
  // Rank 1 first: ranks 3 and 0 hold nothing, and 3 comes first after 1 in ring order.
  // Then rank 2: rank 3 now holds rank 1's 3 tiles, rank 0 none.
  EXPECT_EQ(a.backup, (std::vector<int>{0, 3, 0, 3}));
}

TEST(ShrinkPlan, NoLeaverIsTheIdentity) {
  const std::vector<long> held{1, 2, 3};
  const auto plan = plan_shrink(held, std::vector<int>{});
  EXPECT_EQ(plan.backup, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(plan.new_rank, (std::vector<int>{0, 1, 2}));
}

TEST(ShrinkPlan, RefusesRankZeroOutOfRangeAndRepeatedLeavers) {
  const std::vector<long> held{1, 1, 1};
  EXPECT_EQ(refusal(held, {0}),
            "prepare_shrink: cannot remove rank 0 from 3 ranks (rank 0 stays; each rank once)");
  EXPECT_EQ(refusal(held, {3}),
            "prepare_shrink: cannot remove rank 3 from 3 ranks (rank 0 stays; each rank once)");
  EXPECT_EQ(refusal(held, {-2}),
            "prepare_shrink: cannot remove rank -2 from 3 ranks (rank 0 stays; each rank once)");
  EXPECT_EQ(refusal(held, {1, 1}),
            "prepare_shrink: cannot remove rank 1 from 3 ranks (rank 0 stays; each rank once)");
}

}  // namespace
}  // namespace bellows::runtime
