// The join tree's rounds: which groups merge in which round, who leads them and their sizes.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/join_rounds.hpp"

namespace bellows::runtime {
namespace {

std::string refusal(int ordinal, int count) {
  try {
    (void)join_rounds(ordinal, count);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JoinRounds, RoundCountIsCeilLog2) {
  EXPECT_EQ(join_round_count(1), 0);
  EXPECT_EQ(join_round_count(2), 1);
  EXPECT_EQ(join_round_count(3), 2);
  EXPECT_EQ(join_round_count(4), 2);
  EXPECT_EQ(join_round_count(5), 3);
  EXPECT_EQ(join_round_count(1024), 10);
  EXPECT_EQ(join_round_count(1025), 11);
}

TEST(JoinRounds, OneProcessHasNoRound) { EXPECT_TRUE(join_rounds(0, 1).empty()); }

TEST(JoinRounds, FiveProcessesAsTheTreeMergesThem) {
  // Round 0: {0}<-{1}, {2}<-{3}, {4} waits; round 1: {0,1}<-{2,3}; round 2: {0..3}<-{4}.
  const auto first = join_rounds(0, 5);
  ASSERT_EQ(first.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(first[r].round, r);
    EXPECT_TRUE(first[r].accepts);
    EXPECT_EQ(first[r].own_leader(), 0);
    EXPECT_EQ(first[r].own_size, 1 << r);
  }
  EXPECT_EQ(first[0].partner_size, 1);
  EXPECT_EQ(first[1].partner_size, 2);
  EXPECT_EQ(first[2].partner_size, 1);
  EXPECT_EQ(first[2].partner_leader(), 4);

  const auto third = join_rounds(3, 5);
  ASSERT_EQ(third.size(), 3u);
  EXPECT_FALSE(third[0].accepts);  // connects to 2
  EXPECT_EQ(third[0].partner_leader(), 2);
  EXPECT_FALSE(third[1].accepts);  // as a member of {2,3}, connects to {0,1}
  EXPECT_EQ(third[1].own_leader(), 2);
  EXPECT_EQ(third[1].own_size, 2);
  EXPECT_TRUE(third[2].accepts);   // as a member of {0..3}, accepts {4}
  EXPECT_EQ(third[2].own_leader(), 0);

  const auto last = join_rounds(4, 5);
  ASSERT_EQ(last.size(), 1u);  // no partner in rounds 0 and 1
  EXPECT_EQ(last[0].round, 2);
  EXPECT_FALSE(last[0].accepts);
  EXPECT_EQ(last[0].own_size, 1);
  EXPECT_EQ(last[0].partner_size, 4);
}

TEST(JoinRounds, EveryCountEndsInOneGroupWithLeadersThatOpenPorts) {
  for (int count = 1; count <= 70; ++count) {
    // Replay the rounds: every merge joins two whole groups, each named by its leader.
    std::map<int, int> leader_of;  // ordinal -> leader
    for (int o = 0; o < count; ++o) leader_of[o] = o;
    for (int round = 0; round < join_round_count(count); ++round) {
      std::map<int, std::set<int>> merges;  // accepting leader -> the connecting leaders
      for (int o = 0; o < count; ++o) {
        for (const JoinRound& r : join_rounds(o, count)) {
          if (r.round != round) continue;
          EXPECT_EQ(r.own_leader(), leader_of[o]) << count << " ordinal " << o << " round " << round;
          EXPECT_EQ(leads_accept_in_round(o, count, round), r.accepts && r.accepting_leader == o);
          merges[r.accepting_leader].insert(r.connecting_leader);
        }
      }
      for (const auto& [accepting, connecting] : merges) {
        ASSERT_EQ(connecting.size(), 1u) << count << " round " << round;
        for (auto& [o, leader] : leader_of)
          if (leader == *connecting.begin()) leader = accepting;
      }
    }
    for (const auto& [o, leader] : leader_of) EXPECT_EQ(leader, 0) << count << " ordinal " << o;
  }
}

TEST(JoinRounds, RefusesWhatIsNoGrow) {
  EXPECT_EQ(refusal(0, 0), "join tree: a grow adds at least 1 process, got 0");
  EXPECT_EQ(refusal(3, 3), "join tree: ordinal 3 is outside [0, 3)");
  EXPECT_EQ(refusal(-1, 3), "join tree: ordinal -1 is outside [0, 3)");
  EXPECT_THROW((void)join_round_count(-2), std::invalid_argument);
}

}  // namespace
}  // namespace bellows::runtime
