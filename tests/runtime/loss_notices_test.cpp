// LossNotices: the control plane's word that ranks are lost, as the runtime's watches read it,
// renumbered when the survivors rebuild or the job shrinks, settled, and told from another thread.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bellows/runtime/loss_notices.hpp"

namespace bellows::runtime {
namespace {

TEST(LossNotices, NamesTheToldRanksBelowTheSizeAscending) {
  LossNotices notices;
  notices.tell(3, {5, 2});
  notices.tell(4, {2, 0, 9});
  EXPECT_EQ(notices.ranks_lost(6), (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(notices.ranks_lost(10), (std::vector<int>{0, 2, 5, 9}));
  EXPECT_EQ(notices.which_failure(2), "failure 3");
  EXPECT_EQ(notices.which_failure(0), "failure 4");
  EXPECT_EQ(notices.which_failure(1), "");
}

TEST(LossNotices, RebuildRenumbersAndSettlesTheNoticesItCovered) {
  LossNotices notices;
  notices.tell(1, {2});
  notices.tell(2, {2, 4});  // rank 4 was lost after the agreement: not left out
  notices.renumber_without({2});
  // Failure 1 named only the rank left out: settled. Failure 2's rank 4 is rank 3 now.
  EXPECT_EQ(notices.settled_through(), 1u);
  EXPECT_EQ(notices.ranks_lost(4), (std::vector<int>{3}));
  EXPECT_EQ(notices.which_failure(3), "failure 2");
}

TEST(LossNotices, IgnoresAFailureToldAgainAfterItWasSettled) {
  LossNotices notices;
  notices.tell(7, {1});
  notices.renumber_without({1});
  notices.tell(7, {1});  // the same failure, told late: rank 1 is another rank now
  notices.tell(5, {0});  // an older one
  EXPECT_TRUE(notices.ranks_lost(4).empty());
  notices.tell(8, {1});
  EXPECT_EQ(notices.ranks_lost(4), (std::vector<int>{1}));
}

TEST(LossNotices, ALossMpiFoundFirstIsSettledWhenItsNoticeComesLate) {
  LossNotices notices;
  notices.renumber_without({2});  // MPI found rank 2 dead; no notice yet
  notices.tell(3, {2});           // its notice: rank 2 of before, not today's rank 2
  EXPECT_TRUE(notices.ranks_lost(3).empty());
  EXPECT_EQ(notices.settled_through(), 3u);
  notices.tell(4, {2});  // a new failure: today's rank 2
  EXPECT_EQ(notices.ranks_lost(3), (std::vector<int>{2}));
}

TEST(LossNotices, AShrinkRenumbersAPendingNoticeAsARebuildDoes) {
  LossNotices notices;
  notices.tell(5, {3});      // rank 3 of six lost while ranks 1 and 4 leave
  notices.tell(6, {4, 5});   // a leaver and rank 5
  notices.renumber_at_shrink({4, 1});
  // Rank 3 is rank 2 of the four left; rank 5 is rank 3; the leaver 4 is no loss.
  EXPECT_EQ(notices.ranks_lost(4), (std::vector<int>{2, 3}));
  EXPECT_EQ(notices.which_failure(2), "failure 5");
  EXPECT_EQ(notices.which_failure(3), "failure 6");
  EXPECT_EQ(notices.settled_through(), 0u);
}

TEST(LossNotices, ANoticeNamingOnlyLeaversIsSettledAndAShrinkIsNoLossToldLate) {
  LossNotices notices;
  notices.tell(2, {1});
  notices.renumber_at_shrink({1});
  EXPECT_TRUE(notices.ranks_lost(4).empty());
  EXPECT_EQ(notices.settled_through(), 2u);
  // With no notice pending, a shrink is not remembered as a rebuild MPI found first: a new
  // failure naming rank 1 (today's) counts, where after renumber_without({1}) it would not.
  notices.renumber_at_shrink({1});
  notices.tell(3, {1});
  EXPECT_EQ(notices.ranks_lost(4), (std::vector<int>{1}));
  LossNotices rebuilt;
  rebuilt.renumber_without({1});
  rebuilt.tell(3, {1});
  EXPECT_TRUE(rebuilt.ranks_lost(4).empty());
}

TEST(LossNotices, AShrinkRefusesANegativeLeaver) {
  LossNotices notices;
  notices.tell(1, {2});
  try {
    notices.renumber_at_shrink({0, -1});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "loss notices at a shrink: leaving rank -1 is negative");
  }
  EXPECT_EQ(notices.ranks_lost(4), (std::vector<int>{2}));  // unchanged
}

TEST(LossNotices, SettleThroughDropsThoseFailures) {
  LossNotices notices;
  notices.tell(1, {0});
  notices.tell(2, {1});
  notices.settle_through(1);
  EXPECT_EQ(notices.ranks_lost(4), (std::vector<int>{1}));
  EXPECT_EQ(notices.settled_through(), 1u);
  notices.clear();
  EXPECT_TRUE(notices.ranks_lost(4).empty());
  EXPECT_EQ(notices.settled_through(), 0u);
}

TEST(LossNotices, RefusesANegativeRankNamingTheFailure) {
  LossNotices notices;
  try {
    notices.tell(6, {1, -3});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "loss notice of failure 6: rank -3 is negative");
  }
  EXPECT_TRUE(notices.ranks_lost(4).empty());
}

TEST(LossNotices, RemembersTheNodesToldAcrossSettlementUntilCleared) {
  LossNotices notices;
  notices.tell(1, {2});
  notices.tell_nodes({"n3"});
  notices.tell_nodes({"n1", "", "n3"});
  EXPECT_EQ(notices.nodes_lost(), (std::vector<std::string>{"n1", "n3"}));
  notices.renumber_without({2});
  EXPECT_TRUE(notices.ranks_lost(4).empty());
  EXPECT_EQ(notices.nodes_lost(), (std::vector<std::string>{"n1", "n3"}));
  notices.clear();
  EXPECT_TRUE(notices.nodes_lost().empty());
}

TEST(LossNotices, ToldFromAnotherThreadIsSeenByTheReader) {
  LossNotices notices;
  std::thread teller([&] {
    for (int r = 0; r < 100; ++r) notices.tell(static_cast<std::uint64_t>(r + 1), {r});
  });
  std::size_t seen = 0;
  while (seen < 100) seen = notices.ranks_lost(100).size();
  teller.join();
  EXPECT_EQ(notices.ranks_lost(100).size(), 100u);
  EXPECT_EQ(notices.ranks_lost(100).back(), 99);
}

}  // namespace
}  // namespace bellows::runtime
