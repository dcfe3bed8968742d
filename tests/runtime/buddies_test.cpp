// choose_buddies: which rank holds each rank's checkpoint, always on another node.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/buddies.hpp"
#include "bellows/runtime/shrink_plan.hpp"

namespace bellows::runtime {
namespace {

std::vector<std::string> one_node_each(int ranks) {
  std::vector<std::string> hosts;
  for (int r = 0; r < ranks; ++r) hosts.push_back(std::string("n").append(std::to_string(r)));
  return hosts;
}

std::string refusal(const std::vector<std::string>& hosts, const std::vector<long>& held) {
  try {
    (void)choose_buddies(hosts, held);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Buddies, EqualLoadsOnOneNodeEachFormTheRing) {
  EXPECT_EQ(choose_buddies(one_node_each(4), std::vector<long>(4, 9)), (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(choose_buddies(one_node_each(2), std::vector<long>(2, 9)), (std::vector<int>{1, 0}));
}

TEST(Buddies, TheLeastLoadedRankOfAnotherNodeHoldsTheCopyCopiesCounted) {
  // Rank 0 -> 3 (1 tile); rank 1 -> 0 (3 holds 2 now); rank 2 -> 3 (holds 2, 0 holds 10);
  // rank 3 -> 1 (1 and 2 hold 9, 1 comes first after 3).
  const std::vector<long> held{1, 9, 9, 1};
  EXPECT_EQ(choose_buddies(one_node_each(4), held), (std::vector<int>{3, 0, 3, 1}));
}

TEST(Buddies, TwoRanksOfANodeNeverHoldEachOthersCopy) {
  const std::vector<std::string> hosts{"a", "a", "b", "b", "c", "c"};
  const auto buddies = choose_buddies(hosts, std::vector<long>(6, 4));
  EXPECT_EQ(buddies, (std::vector<int>{2, 3, 4, 5, 0, 1}));
  for (std::size_t r = 0; r < hosts.size(); ++r) {
    ASSERT_GE(buddies[r], 0);
    EXPECT_NE(hosts[static_cast<std::size_t>(buddies[r])], hosts[r]) << "rank " << r;
  }
  // Two nodes of two ranks: each node's ranks hold the other node's.
  const std::vector<std::string> two{"a", "a", "b", "b"};
  EXPECT_EQ(choose_buddies(two, std::vector<long>(4, 4)), (std::vector<int>{2, 3, 0, 1}));
}

TEST(Buddies, NoOtherNodeMeansNoBuddy) {
  EXPECT_EQ(choose_buddies(std::vector<std::string>{"a", "a", "a"}, std::vector<long>{1, 2, 3}),
            (std::vector<int>{-1, -1, -1}));
  EXPECT_EQ(choose_buddies(one_node_each(1), std::vector<long>{5}), (std::vector<int>{-1}));
  EXPECT_TRUE(choose_buddies(std::vector<std::string>{}, std::vector<long>{}).empty());
}

TEST(Buddies, ChangeWhenTheJobGrowsOrShrinks) {
  const auto three = choose_buddies(one_node_each(3), std::vector<long>(3, 12));
  EXPECT_EQ(three, (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(wards_of(three, 0), (std::vector<int>{2}));
  // Grown to 5 (the re-grid gave each rank fewer tiles): rank 2 now backs up onto rank 3.
  const auto five = choose_buddies(one_node_each(5), std::vector<long>{8, 7, 7, 7, 7});
  EXPECT_EQ(five, (std::vector<int>{1, 2, 3, 4, 0}));
  EXPECT_EQ(wards_of(five, 0), (std::vector<int>{4}));
  // Shrunk to 2 without rebalancing: rank 0 took a leaver's tiles, so it holds more.
  const auto two = choose_buddies(std::vector<std::string>{"n0", "n3"}, std::vector<long>{20, 16});
  EXPECT_EQ(two, (std::vector<int>{1, 0}));
}

TEST(Buddies, WardsAreListedInRankOrder) {
  const std::vector<int> buddies{3, 0, 3, 1, -1};
  EXPECT_EQ(wards_of(buddies, 3), (std::vector<int>{0, 2}));
  EXPECT_EQ(wards_of(buddies, 1), (std::vector<int>{3}));
  EXPECT_TRUE(wards_of(buddies, 2).empty());
  EXPECT_TRUE(wards_of(buddies, 4).empty());
}

TEST(Buddies, RefusesInputsThatDoNotFit) {
  EXPECT_EQ(refusal({"a", "b"}, {1, 1, 1}), "choose_buddies: 2 hosts for 3 ranks' tile counts");
  EXPECT_EQ(refusal({"a", "", "b"}, {1, 1, 1}), "choose_buddies: rank 1 has no host name");
  EXPECT_EQ(refusal({"a", "b"}, {-1, 1}), "choose_buddies: rank 0 holds -1 tiles");
}

TEST(Buddies, TheBackupRuleIsTheShrinks) {
  // choose_backup is the rule plan_shrink applies to each leaver: least load, then ring order.
  const std::vector<long> load{4, 2, 9, 2};
  EXPECT_EQ(choose_backup(load, 0, [](int) { return true; }), 1);
  EXPECT_EQ(choose_backup(load, 1, [](int) { return true; }), 3);
  EXPECT_EQ(choose_backup(load, 1, [](int r) { return r != 3; }), 0);
  EXPECT_EQ(choose_backup(load, 2, [](int) { return false; }), -1);
  EXPECT_EQ(plan_shrink(load, std::vector<int>{1}).backup[1], choose_backup(load, 1, [](int) { return true; }));
}

TEST(Buddies, WithTeamsABuddyIsOfTheSameTeamOnAnotherNode) {
  const std::vector<int> teams{0, 0, 1, 1, 1};
  EXPECT_EQ(choose_buddies(one_node_each(5), std::vector<long>(5, 9), teams), (std::vector<int>{1, 0, 3, 4, 2}));
  // Without teams the ring crosses them.
  EXPECT_EQ(choose_buddies(one_node_each(5), std::vector<long>(5, 9)), (std::vector<int>{1, 2, 3, 4, 0}));
}

TEST(Buddies, ATeamWithNoOtherNodeTakesABuddyOfAnotherTeam) {
  // Teams of one rank, and a team whose two ranks share a node: the buddy comes from another
  // node whatever its team.
  EXPECT_EQ(choose_buddies(one_node_each(3), std::vector<long>(3, 9), std::vector<int>{0, 1, 2}),
            (std::vector<int>{1, 2, 0}));
  const std::vector<std::string> hosts{"a", "a", "b", "b"};
  const auto buddies = choose_buddies(hosts, std::vector<long>(4, 9), std::vector<int>{0, 0, 1, 1});
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(hosts[static_cast<std::size_t>(buddies[static_cast<std::size_t>(r)])], hosts[static_cast<std::size_t>(r)])
        << "rank " << r;
  }
}

TEST(Buddies, RefusesTeamsForAnotherRankCount) {
  try {
    (void)choose_buddies(one_node_each(3), std::vector<long>(3, 9), std::vector<int>{0, 1});
    FAIL() << "accepted 2 teams for 3 ranks";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "choose_buddies: 2 teams named for 3 ranks");
  }
}

}  // namespace
}  // namespace bellows::runtime
