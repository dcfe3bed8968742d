// FenceBook: which nodes must contribute to a fence, when it is complete, what it releases, and
// what a lost rank or node does to the fences still waiting.
#include <gtest/gtest.h>

#include "bellows/controller/fence_book.hpp"

#include <string>
#include <vector>

namespace bellows::controller {
namespace {

using protocol::CollectiveStatus;
using protocol::FenceContribution;
using protocol::FenceRelease;
using protocol::kWildcardRank;

/// Node i of a job of `size` ranks, one per node, contributing to a fence of every rank.
FenceContribution whole_job(std::uint64_t id, std::uint32_t rank, std::uint32_t size, bool collect = true) {
  FenceContribution c;
  c.contribution_id = id;
  c.participant_nspaces = {"job"};
  c.participant_ranks = {kWildcardRank};
  c.nspace_sizes = {size};
  c.local_nspaces = {"job"};
  c.local_ranks = {rank};
  c.collect_data = collect ? 1 : 0;
  if (collect) c.data = "blob" + std::to_string(rank);
  return c;
}

/// A fence among `ranks` of a job of `size`, contributed by the node hosting `local`.
FenceContribution among(std::uint64_t id, const std::vector<std::uint32_t>& ranks, std::uint32_t local,
                        std::uint32_t size) {
  FenceContribution c;
  c.contribution_id = id;
  for (const auto rank : ranks) {
    c.participant_nspaces.push_back("job");
    c.participant_ranks.push_back(rank);
    c.nspace_sizes.push_back(size);
  }
  c.local_nspaces = {"job"};
  c.local_ranks = {local};
  return c;
}

TEST(FenceBook, WholeJobFenceReleasesEveryNodeWithEveryBlobOnceAllContributed) {
  FenceBook book("job");
  EXPECT_TRUE(book.contribute("n0", whole_job(11, 0, 3)).empty());
  EXPECT_TRUE(book.contribute("n2", whole_job(31, 2, 3)).empty());
  EXPECT_EQ(book.pending(), 1u);
  EXPECT_EQ(book.waiting_for(0), (std::vector<std::string>{"job:1"}));
  const auto releases = book.contribute("n1", whole_job(21, 1, 3));
  const std::vector<std::string> data{"blob0", "blob2", "blob1"};  // in the order they came
  EXPECT_EQ(releases, (std::vector<FenceReleaseFor>{{"n0", FenceRelease{11, CollectiveStatus::ok, "", data}},
                                                     {"n2", FenceRelease{31, CollectiveStatus::ok, "", data}},
                                                     {"n1", FenceRelease{21, CollectiveStatus::ok, "", data}}}));
  EXPECT_EQ(book.pending(), 0u);
}

TEST(FenceBook, WithoutCollectDataTheReleaseCarriesNoData) {
  FenceBook book("job");
  EXPECT_TRUE(book.contribute("n0", whole_job(1, 0, 2, false)).empty());
  const auto releases = book.contribute("n1", whole_job(2, 1, 2, false));
  ASSERT_EQ(releases.size(), 2u);
  for (const auto& r : releases) {
    EXPECT_EQ(r.release.status, CollectiveStatus::ok);
    EXPECT_TRUE(r.release.data.empty()) << r.node;
  }
}

TEST(FenceBook, ASubsetFenceWaitsOnlyForItsParticipantsNodes) {
  FenceBook book("job");
  EXPECT_TRUE(book.contribute("n1", among(5, {1, 3}, 1, 4)).empty());
  const auto releases = book.contribute("n3", among(6, {3, 1}, 3, 4));  // the same set, other order
  ASSERT_EQ(releases.size(), 2u);
  EXPECT_EQ(releases[0].node, "n1");
  EXPECT_EQ(releases[1].node, "n3");
  EXPECT_EQ(releases[1].release.status, CollectiveStatus::ok);
}

TEST(FenceBook, OneNodeHostingEveryParticipantCompletesAlone) {
  FenceBook book("job");
  FenceContribution c = whole_job(4, 0, 2);
  c.local_nspaces = {"job", "job"};
  c.local_ranks = {0, 1};
  const auto releases = book.contribute("n0", c);
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0].release, (FenceRelease{4, CollectiveStatus::ok, "", {"blob0"}}));
}

TEST(FenceBook, FencesOfOneSetMatchInOrderAndOtherSetsApart) {
  FenceBook book("job");
  // n0 runs ahead: two whole-job fences and a subset fence before n1 enters the first.
  EXPECT_TRUE(book.contribute("n0", whole_job(1, 0, 2)).empty());
  EXPECT_TRUE(book.contribute("n0", whole_job(2, 0, 2)).empty());
  EXPECT_TRUE(book.contribute("n0", among(3, {0, 1}, 0, 2)).empty());
  EXPECT_EQ(book.pending(), 3u);
  auto first = book.contribute("n1", whole_job(101, 1, 2));
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].release.contribution_id, 1u);
  EXPECT_EQ(first[1].release.contribution_id, 101u);
  auto subset = book.contribute("n1", among(102, {1, 0}, 1, 2));
  ASSERT_EQ(subset.size(), 2u);
  EXPECT_EQ(subset[0].release.contribution_id, 3u);
  auto second = book.contribute("n1", whole_job(103, 1, 2));
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].release.contribution_id, 2u);
  EXPECT_EQ(second[1].release.contribution_id, 103u);
  EXPECT_EQ(book.pending(), 0u);
}

TEST(FenceBook, ALostRankEndsTheFencesWaitingForItAndNoOther) {
  FenceBook book("job");
  EXPECT_TRUE(book.contribute("n0", whole_job(1, 0, 3)).empty());
  EXPECT_TRUE(book.contribute("n1", whole_job(2, 1, 3)).empty());
  EXPECT_TRUE(book.contribute("n0", among(3, {0, 1}, 0, 3)).empty());  // does not wait for rank 2
  const auto releases = book.lost({2}, {"n2"}, "rank 2 on n2 was killed by signal 9");
  const std::string text = "fence over job:*: participant job:2 is lost";
  EXPECT_EQ(releases, (std::vector<FenceReleaseFor>{{"n0", FenceRelease{1, CollectiveStatus::participant_lost, text, {}}},
                                                     {"n1", FenceRelease{2, CollectiveStatus::participant_lost, text, {}}}}));
  EXPECT_EQ(book.pending(), 1u);
  EXPECT_EQ(book.waiting_for(0), (std::vector<std::string>{"job:1"}));
  EXPECT_EQ(book.contribute("n1", among(4, {0, 1}, 1, 3)).size(), 2u);
}

TEST(FenceBook, ALostNodeThatHostedAParticipantEndsTheFenceWhenItsRankIsUnknown) {
  FenceBook book("job");
  // A first fence places rank 2 on n2.
  book.contribute("n0", whole_job(1, 0, 3));
  book.contribute("n1", whole_job(2, 1, 3));
  EXPECT_EQ(book.contribute("n2", whole_job(3, 2, 3)).size(), 3u);
  book.contribute("n0", whole_job(4, 0, 3));
  // The controller could not name the rank (it never reported it): the node is enough.
  const auto releases = book.lost({}, {"n2"}, "the daemon of n2 went away");
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0].node, "n0");
  EXPECT_EQ(releases[0].release.status, CollectiveStatus::participant_lost);
  EXPECT_EQ(releases[0].release.text,
            "fence over job:*: participant job:2 on lost node n2 (the daemon of n2 went away)");
}

TEST(FenceBook, ALostNodeOfAKnownOtherHostLeavesTheFenceWaiting) {
  FenceBook book("job");
  book.contribute("n0", among(1, {0, 1}, 0, 3));
  book.contribute("n1", among(2, {0, 1}, 1, 3));  // completes; places rank 1 on n1
  book.contribute("n0", among(3, {0, 1}, 0, 3));
  EXPECT_TRUE(book.lost({2}, {"n2"}, "rank 2 died").empty());
  EXPECT_EQ(book.pending(), 1u);
  EXPECT_EQ(book.contribute("n1", among(4, {0, 1}, 1, 3)).size(), 2u);
}

TEST(FenceBook, AFenceEnteredAfterItsParticipantsNodeWasLostFailsAtOnce) {
  FenceBook book("job");
  book.contribute("n0", whole_job(1, 0, 2));
  book.contribute("n1", whole_job(2, 1, 2));
  EXPECT_TRUE(book.lost({1}, {"n1"}, "rank 1 died").empty());
  const auto releases = book.contribute("n0", whole_job(3, 0, 2));
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0].release,
            (FenceRelease{3, CollectiveStatus::participant_lost,
                          "fence over job:*: participant job:1 on lost node n1 (rank 1 died)", {}}));
  EXPECT_EQ(book.pending(), 0u);
}

TEST(FenceBook, ALostNodeThatContributesAgainCountsAsBack) {
  FenceBook book("job");
  book.lost({}, {"n1"}, "the daemon of n1 went away");
  EXPECT_TRUE(book.contribute("n1", whole_job(1, 1, 2)).empty());
  EXPECT_EQ(book.contribute("n0", whole_job(2, 0, 2)).size(), 2u);
}

TEST(FenceBook, ALostParticipantThatAlreadyContributedDoesNotEndTheFence) {
  FenceBook book("job");
  book.contribute("n0", whole_job(1, 0, 3));
  book.contribute("n2", whole_job(2, 2, 3));
  EXPECT_TRUE(book.lost({2}, {"n2"}, "rank 2 died").empty());
  EXPECT_EQ(book.contribute("n1", whole_job(3, 1, 3)).size(), 3u);
}

TEST(FenceBook, ALostNodesOwnContributionGetsNoRelease) {
  FenceBook book("job");
  book.contribute("n0", whole_job(1, 0, 3));
  book.contribute("n1", whole_job(2, 1, 3));
  const auto releases = book.lost({1, 2}, {"n1", "n2"}, "n1 and n2 went away");
  ASSERT_EQ(releases.size(), 1u);
  EXPECT_EQ(releases[0].node, "n0");
  EXPECT_EQ(releases[0].release.text, "fence over job:*: participant job:2 is lost");
}

TEST(FenceBook, RefusesContributionsThatContradictTheFence) {
  FenceBook book("job");
  book.contribute("n0", whole_job(1, 0, 3));
  const auto sizes = book.contribute("n1", whole_job(2, 1, 4));
  EXPECT_EQ(sizes, (std::vector<FenceReleaseFor>{
                       {"n1", FenceRelease{2, CollectiveStatus::refused,
                                           "fence over job:*: contribution 2 of n1 refused: its namespace sizes "
                                           "differ from the fence's first contribution",
                                           {}}}}));
  const auto collect = book.contribute("n1", whole_job(3, 1, 3, false));
  ASSERT_EQ(collect.size(), 1u);
  EXPECT_EQ(collect[0].release.text,
            "fence over job:*: contribution 3 of n1 refused: it does not ask for collected data, the fence's "
            "first contribution does");
  FenceContribution stranger = whole_job(4, 1, 3);
  stranger.local_ranks = {0};  // already contributed by n0
  const auto none = book.contribute("n1", stranger);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].release.text,
            "fence over job:*: contribution 4 of n1 refused: it hosts no participant the fence waits for");
  EXPECT_EQ(book.pending(), 1u);
  EXPECT_EQ(book.waiting_for(0), (std::vector<std::string>{"job:1", "job:2"}));
}

// After a shrink took ranks 2 and 3 and a grow gave number 4, the job is ranks 0, 1, 4 and the
// contributions give 5 as the namespace's size (the numbers given so far).
TEST(FenceBook, AWildcardFenceMeansTheJobsRanksOnceTheyAreKnown) {
  FenceBook book("job");
  EXPECT_TRUE(book.job_changed({0, 1, 4}, {2, 3}).empty());
  EXPECT_TRUE(book.contribute("n0", whole_job(1, 0, 5)).empty());
  EXPECT_EQ(book.waiting_for(0), (std::vector<std::string>{"job:1", "job:4"}));
  EXPECT_TRUE(book.contribute("n4", whole_job(2, 4, 5)).empty());
  const auto releases = book.contribute("n1", whole_job(3, 1, 5));
  const std::vector<std::string> data{"blob0", "blob4", "blob1"};
  EXPECT_EQ(releases, (std::vector<FenceReleaseFor>{{"n0", FenceRelease{1, CollectiveStatus::ok, "", data}},
                                                     {"n4", FenceRelease{2, CollectiveStatus::ok, "", data}},
                                                     {"n1", FenceRelease{3, CollectiveStatus::ok, "", data}}}));
  EXPECT_EQ(book.pending(), 0u);
}

TEST(FenceBook, AFenceAmongTheJobsRanksWithAGapCompletes) {
  FenceBook book("job");
  book.job_changed({0, 1, 4}, {2, 3});
  EXPECT_TRUE(book.contribute("n4", among(7, {0, 1, 4}, 4, 5)).empty());
  EXPECT_TRUE(book.contribute("n0", among(8, {0, 1, 4}, 0, 5)).empty());
  EXPECT_EQ(book.waiting_for(0), (std::vector<std::string>{"job:1"}));
  const auto releases = book.contribute("n1", among(9, {0, 1, 4}, 1, 5));
  ASSERT_EQ(releases.size(), 3u);
  for (const auto& r : releases) EXPECT_EQ(r.release.status, CollectiveStatus::ok) << r.node;
}

TEST(FenceBook, AFenceNamingARankThatLeftIsRefused) {
  FenceBook book("job");
  book.job_changed({0, 1, 4}, {2, 3});
  EXPECT_EQ(book.contribute("n0", among(5, {0, 1, 2}, 0, 5)),
            (std::vector<FenceReleaseFor>{
                {"n0", FenceRelease{5, CollectiveStatus::refused,
                                    "fence over job:0,job:1,job:2: contribution 5 of n0 refused: participant job:2 "
                                    "left the job (its ranks now: 0,1,4)",
                                    {}}}}));
  EXPECT_EQ(book.pending(), 0u);
}

TEST(FenceBook, AFenceStillWaitingForARankThatLeavesEndsAndTheOthersWait) {
  FenceBook book("job");
  book.job_changed({0, 1, 2, 3}, {});
  EXPECT_TRUE(book.contribute("n0", whole_job(1, 0, 4)).empty());      // waits for 1, 2, 3
  EXPECT_TRUE(book.contribute("n0", among(2, {0, 1}, 0, 4)).empty());  // waits for 1
  const auto releases = book.job_changed({0, 1, 2}, {3});
  EXPECT_EQ(releases, (std::vector<FenceReleaseFor>{
                          {"n0", FenceRelease{1, CollectiveStatus::participant_lost,
                                              "fence over job:*: participant job:3 left the job", {}}}}));
  EXPECT_EQ(book.pending(), 1u);
  EXPECT_EQ(book.waiting_for(0), (std::vector<std::string>{"job:1"}));
  // A wildcard fence begun now means the three ranks left.
  EXPECT_TRUE(book.contribute("n1", whole_job(3, 1, 4)).empty());
  EXPECT_EQ(book.waiting_for(1), (std::vector<std::string>{"job:0", "job:2"}));
}

TEST(FenceBook, BeforeTheJobsRanksAreKnownTheWildcardMeansZeroToSize) {
  FenceBook book("job");
  EXPECT_TRUE(book.contribute("n1", whole_job(1, 1, 3)).empty());
  EXPECT_EQ(book.waiting_for(0), (std::vector<std::string>{"job:0", "job:2"}));
  // Rank 2 leaves: the fence waiting for it ends. Another namespace's wildcard stays
  // 0..size-1 once the job's ranks are known.
  const auto ended = book.job_changed({0, 1, 4}, {2, 3});
  ASSERT_EQ(ended.size(), 1u);
  EXPECT_EQ(ended[0].node, "n1");
  EXPECT_EQ(ended[0].release.text, "fence over job:*: participant job:2 left the job");
  FenceContribution other = whole_job(2, 0, 2);
  other.participant_nspaces = {"tool"};
  other.local_nspaces = {"tool"};
  EXPECT_TRUE(book.contribute("n0", other).empty());
  EXPECT_EQ(book.waiting_for(0), (std::vector<std::string>{"tool:1"}));
}

}  // namespace
}  // namespace bellows::controller
