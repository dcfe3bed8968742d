// Team-based message logging, the decisions (message_logging.hpp): teams, what is logged, what
// a checkpoint releases, whom a rank steals from, who rolls back.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/message_logging.hpp"
#include "bellows/runtime/steal_policy.hpp"

namespace bellows::runtime {
namespace {

MessageLogOptions teams_of(int size) {
  MessageLogOptions o;
  o.enabled = true;
  o.team_size = size;
  return o;
}

std::string refusal(const MessageLogOptions& options, int ranks) {
  try {
    (void)resolve_teams(options, ranks);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(MessageLogTeams, ConsecutiveRanksTheLastTeamSmaller) {
  EXPECT_EQ(resolve_teams(teams_of(2), 5), (std::vector<int>{0, 0, 1, 1, 2}));
  EXPECT_EQ(resolve_teams(teams_of(1), 3), (std::vector<int>{0, 1, 2}));
}

TEST(MessageLogTeams, ZeroOrMoreThanTheRanksIsOneTeam) {
  EXPECT_EQ(resolve_teams(teams_of(0), 3), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(resolve_teams(teams_of(8), 3), (std::vector<int>{0, 0, 0}));
}

TEST(MessageLogTeams, APlanIsTakenAndRenumberedByFirstRank) {
  MessageLogOptions o = teams_of(2);
  o.rank_team = {1, 0, 1, 0};
  EXPECT_EQ(resolve_teams(o, 4), (std::vector<int>{0, 1, 0, 1}));
}

TEST(MessageLogTeams, APlanForAnotherRankCountGivesConsecutiveTeamsOfItsLargestTeam) {
  MessageLogOptions o = teams_of(0);
  o.rank_team = {0, 0, 0, 1};  // a team of 3 and one of 1
  EXPECT_EQ(resolve_teams(o, 6), (std::vector<int>{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(resolve_teams(o, 2), (std::vector<int>{0, 0}));
}

TEST(MessageLogTeams, RefusalsNameTheValue) {
  EXPECT_EQ(refusal(teams_of(-1), 4),
            "message log: the team size must not be negative (0: one team), got -1");
  EXPECT_EQ(refusal(teams_of(1), 0), "message log: a job needs at least 1 rank, got 0");
  MessageLogOptions o = teams_of(0);
  o.rank_team = {0, 3, 1};
  EXPECT_EQ(refusal(o, 3),
            "message log: rank 1 is given team 3; teams of 3 ranks are numbered 0 .. 2");
  o.rank_team = {0, -2};
  EXPECT_EQ(refusal(o, 2),
            "message log: rank 1 is given team -2; teams of 2 ranks are numbered 0 .. 1");
}

TEST(MessageLogTeams, OnlyMessagesBetweenTeamsAreLogged) {
  const std::vector<int> teams{0, 0, 1, 1};
  EXPECT_FALSE(logs_message(teams, 0, 1));
  EXPECT_FALSE(logs_message(teams, 3, 2));
  EXPECT_TRUE(logs_message(teams, 1, 2));
  EXPECT_TRUE(logs_message(teams, 3, 0));
  try {
    (void)logs_message(teams, 0, 4);
    FAIL() << "a receiver outside the job was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "message log: receiver 4 is not a rank of the 4-rank job");
  }
}

TEST(MessageLogTeams, ACheckpointReleasesTheIterationsUpToItsBoundary) {
  EXPECT_TRUE(released_by_checkpoint(3, 3));
  EXPECT_TRUE(released_by_checkpoint(2, 3));
  EXPECT_FALSE(released_by_checkpoint(4, 3));
}

TEST(MessageLogTeams, StealPartnersAreTheTeamUnlessStealingCrossesTeams) {
  const std::vector<int> teams{0, 1, 0, 1, 0};
  EXPECT_EQ(steal_partners(teams, 2, false), (std::vector<int>{0, 4}));
  EXPECT_EQ(steal_partners(teams, 2, true), (std::vector<int>{0, 1, 3, 4}));
  EXPECT_EQ(steal_partners(std::vector<int>{0, 1}, 0, false), (std::vector<int>{}));
}

TEST(MessageLogTeams, TheTeamsOfTheLostRanksRollBack) {
  const std::vector<int> teams{0, 0, 1, 1, 2, 2};
  EXPECT_EQ(ranks_rolling_back(teams, std::vector<int>{3}), (std::vector<int>{2, 3}));
  EXPECT_EQ(ranks_rolling_back(teams, std::vector<int>{0, 5}), (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(ranks_rolling_back(teams, std::vector<int>{0, 1}), (std::vector<int>{0, 1}));
  EXPECT_EQ(ranks_rolling_back(std::vector<int>{0, 0, 0}, std::vector<int>{1}),
            (std::vector<int>{0, 1, 2}));
}

TEST(MessageLogTeams, AConfinedThiefAsksAndForwardsWithinItsTeamOnly) {
  StealOptions options;
  options.enabled = true;
  options.policy = VictimPolicy::random;
  StealPolicy policy(options, 2, 6);
  policy.confine_to(steal_partners(std::vector<int>{0, 1, 0, 1, 0, 1}, 2, false));
  std::set<int> victims;
  std::set<int> forwards;
  for (int i = 0; i < 200; ++i) {
    victims.insert(policy.choose_victim().value());
    forwards.insert(policy.forward_to(0, 0, 0, 1).value().victim);
  }
  EXPECT_EQ(victims, (std::set<int>{0, 4}));
  EXPECT_EQ(forwards, (std::set<int>{4}));  // neither the thief (0) nor itself
}

TEST(MessageLogTeams, AThiefAloneInItsTeamAsksNobody) {
  StealOptions options;
  options.enabled = true;
  StealPolicy policy(options, 1, 4);
  policy.confine_to({});
  EXPECT_FALSE(policy.choose_victim().has_value());
  EXPECT_FALSE(policy.forward_to(0, 0, 0, 1).has_value());
}

}  // namespace
}  // namespace bellows::runtime
