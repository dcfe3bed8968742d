// After a team roll-back (team_replay.hpp): the iterations re-run, which log entries are
// replayed and to whom, the work redone, and a receiver that drops a message it holds (no MPI).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bellows/runtime/recovery_plan.hpp"
#include "bellows/runtime/team_replay.hpp"

namespace bellows::runtime {
namespace {

std::string error_of(long checkpoint, long interrupted) {
  try {
    (void)replay_window(checkpoint, interrupted);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TeamReplay, TheWindowIsTheIterationsAfterTheCheckpointBeforeTheInterruptedOne) {
  const ReplayWindow w = replay_window(4, 8);
  EXPECT_EQ(w.first(), 5);
  EXPECT_EQ(w.last(), 7);
  EXPECT_EQ(w.iterations(), 3);
  EXPECT_FALSE(w.contains(4));
  EXPECT_TRUE(w.contains(5));
  EXPECT_TRUE(w.contains(7));
  EXPECT_FALSE(w.contains(8));  // the interrupted iteration: every rank runs it again
  // A checkpoint at the boundary just before the interrupted iteration: nothing to replay.
  EXPECT_EQ(replay_window(7, 8).iterations(), 0);
  EXPECT_FALSE(replay_window(7, 8).contains(7));
  EXPECT_FALSE(replay_window(7, 8).contains(8));
}

TEST(TeamReplay, RefusesACheckpointNotBeforeTheInterruptedIteration) {
  EXPECT_EQ(error_of(8, 8), "replay_window: the checkpoint after iteration 8 is not before the interrupted iteration 8");
  EXPECT_EQ(error_of(-1, 3), "replay_window: the checkpoint after iteration -1 is not before the interrupted iteration 3");
}

TEST(TeamReplay, EntriesOfTheWindowGoToTheRanksRollingBackRenumbered) {
  // 8 ranks in teams of 4, rank 6 lost, its tiles to its buddy 7 (new 6); team 1 rolls back.
  std::vector<std::string> hosts;
  for (int r = 0; r < 8; ++r) hosts.push_back(std::string("n").append(std::to_string(r)));
  const std::vector<int> buddies{1, 2, 3, 0, 5, 6, 7, 4};
  const std::vector<int> teams{0, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<int> lost{6};
  const auto decision = plan_recovery({hosts, buddies, lost, NodeLossAction::shrink, 0, 1, {}, teams});
  ASSERT_TRUE(decision.plan) << decision.refusal;
  std::vector<int> rolling;
  for (const CheckpointSource& s : decision.plan->roll_back) rolling.push_back(s.owner);
  const ReplayWindow w = replay_window(4, 8);
  const ShrinkPlan& ranks = decision.plan->ranks;
  EXPECT_EQ(replay_destination(5, 4, w, rolling, ranks), 4);
  EXPECT_EQ(replay_destination(7, 5, w, rolling, ranks), 5);
  EXPECT_EQ(replay_destination(6, 6, w, rolling, ranks), 6);  // the lost rank's: to its heir, new 6
  EXPECT_EQ(replay_destination(6, 7, w, rolling, ranks), 6);
  EXPECT_EQ(replay_destination(6, 1, w, rolling, ranks), -1);  // a team that keeps its state
  EXPECT_EQ(replay_destination(4, 6, w, rolling, ranks), -1);  // released by the checkpoint
  EXPECT_EQ(replay_destination(8, 6, w, rolling, ranks), -1);  // the interrupted iteration
  try {
    (void)replay_destination(5, 8, w, rolling, ranks);
    FAIL() << "accepted rank 8 of 8";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "replay_destination: destination rank 8 is not a rank of the job (8 ranks)");
  }
}

TEST(TeamReplay, TheInterruptedIterationsEntriesLeaveTheLog) {
  const ReplayWindow w = replay_window(4, 8);
  EXPECT_TRUE(kept_at_recovery(5, w));
  EXPECT_TRUE(kept_at_recovery(7, w));
  EXPECT_FALSE(kept_at_recovery(8, w));
}

TEST(TeamReplay, OnlyTheRanksRollingBackRedoWorkTimesTheWindow) {
  const std::vector<long> tasks{16, 16, 16, 16, 10, 10, 10, 10};
  const ReplayWindow w = replay_window(4, 8);
  EXPECT_EQ(tasks_rerun(tasks, std::vector<int>{4, 5, 6, 7}, w), (std::vector<long>{0, 0, 0, 0, 30, 30, 30, 30}));
  // One team: global rollback, every rank.
  EXPECT_EQ(tasks_rerun(tasks, std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}, w),
            (std::vector<long>{48, 48, 48, 48, 30, 30, 30, 30}));
  EXPECT_EQ(tasks_rerun(tasks, std::vector<int>{4}, replay_window(7, 8)), (std::vector<long>(8, 0)));
  try {
    (void)tasks_rerun(tasks, std::vector<int>{9}, w);
    FAIL() << "accepted rank 9 of 8";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "tasks_rerun: rank 9 rolls back but the job has 8 ranks");
  }
}

TEST(TeamReplay, AReceiverDropsACopyOfAMessageItHolds) {
  ReceivedVersions received;
  const MessageVersion task_tile{false, 0, {1, 2, 3}, 0, 5};
  const MessageVersion next_version{false, 0, {1, 2, 3}, 0, 6};
  const MessageVersion other_slot{false, 0, {1, 2, 3}, 1, 5};
  const MessageVersion collection_tile{true, 0, {1, 2, 0}, 0, 5};
  EXPECT_TRUE(received.first_receipt(task_tile));
  EXPECT_TRUE(received.first_receipt(next_version));
  EXPECT_TRUE(received.first_receipt(other_slot));
  EXPECT_TRUE(received.first_receipt(collection_tile));
  EXPECT_FALSE(received.first_receipt(task_tile));  // re-sent by a team that rolled back
  EXPECT_FALSE(received.first_receipt(collection_tile));
  EXPECT_EQ(received.size(), 4U);
  EXPECT_EQ(received.duplicates(), 2);
  // The checkpoint after iteration 5 is complete: version 5 is forgotten, 6 kept.
  received.release_through(5);
  EXPECT_EQ(received.size(), 1U);
  EXPECT_FALSE(received.first_receipt(next_version));
  EXPECT_TRUE(received.first_receipt(task_tile));
}

TEST(TeamReplay, ReceivedVersionsForgetFromARecoverysIteration) {
  ReceivedVersions received;
  for (long version = 4; version <= 7; ++version) {
    EXPECT_TRUE(received.first_receipt(MessageVersion{false, 2, {0, 1, 0}, 0, version}));
  }
  // Kept its state through a loss in iteration 7: 7 runs again, 5 and 6 are still held.
  received.forget_from(7);
  EXPECT_EQ(received.size(), 3U);
  EXPECT_TRUE(received.first_receipt(MessageVersion{false, 2, {0, 1, 0}, 0, 7}));
  EXPECT_FALSE(received.first_receipt(MessageVersion{false, 2, {0, 1, 0}, 0, 6}));
  // Rolled back to the checkpoint after 4: everything from 5 is received anew.
  received.forget_from(5);
  EXPECT_EQ(received.size(), 1U);
  EXPECT_TRUE(received.first_receipt(MessageVersion{false, 2, {0, 1, 0}, 0, 5}));
  EXPECT_EQ(received.duplicates(), 1);
}

TeamRollbackFacts team_rollback_possible() {
  TeamRollbackFacts facts;
  facts.logging_between_teams = true;
  facts.fewest_completed = 7;
  facts.most_completed = 7;
  facts.oldest_tiles_kept_at = 8;
  facts.newest_tiles_kept_at = 8;
  return facts;
}

TEST(TeamReplay, TeamsRollBackAloneWhenEverySurvivorKeptTheInterruptedIterationsStart) {
  const TeamRollbackChoice choice = choose_team_rollback(team_rollback_possible());
  EXPECT_TRUE(choice.by_teams);
  EXPECT_EQ(choice.reason, "");
}

TEST(TeamReplay, EachMissingConditionMakesTheRollBackGlobalAndSaysWhy) {
  const auto reason = [](auto change) {
    TeamRollbackFacts facts = team_rollback_possible();
    change(facts);
    const TeamRollbackChoice choice = choose_team_rollback(facts);
    return choice.by_teams ? std::string("(by teams)") : choice.reason;
  };
  EXPECT_EQ(reason([](TeamRollbackFacts& f) { f.logging_between_teams = false; }),
            "message logging between teams is off");
  EXPECT_EQ(reason([](TeamRollbackFacts& f) { f.steal_across_teams = true; }),
            "stealing crosses teams (steal_across_teams)");
  EXPECT_EQ(reason([](TeamRollbackFacts& f) { f.offloading = true; }),
            "proactive offloading pushes tasks across teams");
  EXPECT_EQ(reason([](TeamRollbackFacts& f) { f.resize_under_way = true; }), "a resize is under way");
  EXPECT_EQ(reason([](TeamRollbackFacts& f) { f.replay_under_way = true; }),
            "the loss came during the replay of an earlier team roll-back (its ranks were at different iterations, "
            "and no log was kept from its checkpoint for a replay of a replay)");
  EXPECT_EQ(reason([](TeamRollbackFacts& f) { f.fewest_completed = 6; }),
            "the survivors completed 6 to 7 iterations (the loss hit an iteration's end)");
  EXPECT_EQ(reason([](TeamRollbackFacts& f) { f.oldest_tiles_kept_at = 7; }),
            "the survivors kept their tiles as iterations 7 to 8 started, not as the interrupted iteration 8 started");
}

std::string rehome_error(const std::vector<int>& old_buddies, const ShrinkPlan& ranks,
                         const std::vector<int>& new_buddies) {
  try {
    (void)rehome_checkpoint(old_buddies, ranks, new_buddies);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(TeamReplay, ARehomedCopyJoinsTheLostWardsCopiesAndGoesToTheNewBuddy) {
  // 4 ranks in teams of 2, buddies 1, 0, 3, 2; rank 1 lost, its tiles to its buddy 0. The
  // survivors 0, 2, 3 are new 0, 1, 2, in teams {0, 1} and {2}, with new buddies 1, 0, 0.
  const ShrinkPlan ranks{{0, 0, 2, 3}, {0, -1, 1, 2}};
  const std::vector<RehomedCopy> copies = rehome_checkpoint(std::vector<int>{1, 0, 3, 2}, ranks, std::vector<int>{1, 0, 0});
  ASSERT_EQ(copies.size(), 3u);
  // New 0 joins its copy and the lost rank 1's (held by it, rank 1's buddy): sent.
  EXPECT_EQ(copies[0], (RehomedCopy{0, {0, 1}, 1, true}));
  // Old 2's copy was at old 3, and its new buddy is new 0: sent.
  EXPECT_EQ(copies[1], (RehomedCopy{1, {2}, 0, true}));
  // Old 3's copy was at old 2 (new 1), its new buddy new 0: sent.
  EXPECT_EQ(copies[2], (RehomedCopy{2, {3}, 0, true}));
}

TEST(TeamReplay, ACopyItsNewBuddyHeldAlreadyIsNotSentAgain) {
  // Teams of 1 on 4 ranks, buddies in a ring 1, 2, 3, 0; rank 1 lost, its tiles to rank 2.
  // Survivors 0, 2, 3 as new 0, 1, 2 with new buddies 2, 0, 1: old 2's buddy was old 3 (new 2)
  // and is not now; old 3's was old 0 (new 0) and is not now; old 0's was the lost rank 1.
  const ShrinkPlan ranks{{0, 2, 2, 3}, {0, -1, 1, 2}};
  const std::vector<int> old_buddies{1, 2, 3, 0};
  const std::vector<RehomedCopy> ring = rehome_checkpoint(old_buddies, ranks, std::vector<int>{2, 0, 1});
  EXPECT_EQ(ring[0], (RehomedCopy{0, {0}, 2, true}));     // its holder is lost
  EXPECT_EQ(ring[1], (RehomedCopy{1, {1, 2}, 0, true}));  // joins the lost rank's copy
  EXPECT_EQ(ring[2], (RehomedCopy{2, {3}, 1, true}));     // another buddy now
  // With new buddies 2, 0, 0, old 3 (new 2) keeps old 0 (new 0), which holds its copy.
  const std::vector<RehomedCopy> kept = rehome_checkpoint(old_buddies, ranks, std::vector<int>{2, 0, 0});
  EXPECT_EQ(kept[2], (RehomedCopy{2, {3}, 0, false}));
  // A survivor without a buddy sends nothing.
  const std::vector<RehomedCopy> alone = rehome_checkpoint(old_buddies, ranks, std::vector<int>{-1, 0, 0});
  EXPECT_EQ(alone[0], (RehomedCopy{0, {0}, -1, false}));
}

TEST(TeamReplay, RehomingRefusesInputsThatDoNotFitTogether) {
  const ShrinkPlan ranks{{0, 0, 2, 3}, {0, -1, 1, 2}};
  EXPECT_EQ(rehome_error({1, 0, 3}, ranks, {1, 0, 0}),
            "rehome_checkpoint: 3 old buddies and a renumbering of 4 ranks (4 backups)");
  EXPECT_EQ(rehome_error({1, 0, 3, 2}, ranks, {1, 0}), "rehome_checkpoint: 2 new buddies for 3 survivors");
  EXPECT_EQ(rehome_error({1, 0, 3, 2}, ranks, {1, 0, 2}),
            "rehome_checkpoint: survivor 2's new buddy 2 is not another of the 3 survivors");
  EXPECT_EQ(rehome_error({1, 0, 3, 7}, ranks, {1, 0, 0}), "rehome_checkpoint: rank 3's buddy 7 is not a rank of the 4");
  EXPECT_EQ(rehome_error({1, 0, 3, 2}, ShrinkPlan{{0, 2, 2, 3}, {0, -1, -1, 1}}, {1, 0}),
            "rehome_checkpoint: rank 1 is lost and its tiles went to rank 2, which is not a survivor");
}

TEST(TeamReplay, ALossInTheReplayRollsEveryRankBackToTheRehomedCheckpointWhileACopyOfEachIsLeft) {
  // After the recovery above (new 0, 1, 2 with new buddies 1, 0, 0), the re-homed copies of
  // the checkpoint after iteration 3: each survivor's own, and its new buddy's.
  const std::vector<std::string> hosts{"n0", "n2", "n3"};
  const std::vector<int> buddies{1, 0, 0};
  std::vector<CheckpointCopy> copies;
  for (int owner = 0; owner < 3; ++owner) {
    copies.push_back({owner, owner, 3, 8, 8});
    copies.push_back({owner, buddies[static_cast<std::size_t>(owner)], 3, 8, 8});
  }
  // New 2 (old 3) lost in the replay: its copy is at new 0, and every rank rolls back to 3.
  const std::vector<int> one{2};
  const auto recovered = plan_recovery({hosts, buddies, one, NodeLossAction::shrink, 0, 1, {}, {}});
  ASSERT_TRUE(recovered.plan) << recovered.refusal;
  EXPECT_EQ(recovered.plan->roll_back.size(), 3u);
  EXPECT_EQ(choose_checkpoint(copies, recovered.plan->roll_back).iteration, 3);
  // New 1 and its buddy new 0 lost together: no copy of new 1's is left.
  const std::vector<int> two{0, 1};
  const auto refused = plan_recovery({hosts, buddies, two, NodeLossAction::shrink, 0, 1, {}, {}});
  EXPECT_FALSE(refused.plan);
  EXPECT_EQ(refused.refusal, "rank 0 and its buddy rank 1 are both lost: no copy of rank 0's checkpoint is left; "
                             "rank 1 and its buddy rank 0 are both lost: no copy of rank 1's checkpoint is left");
}

}  // namespace
}  // namespace bellows::runtime
