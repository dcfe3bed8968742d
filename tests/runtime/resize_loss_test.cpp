// Give a resize up, carry it on, or refuse, when a rank is lost during it (resize_loss.hpp).
#include <bellows/runtime/resize_loss.hpp>

#include <gtest/gtest.h>

#include <stdexcept>

namespace {

using bellows::runtime::on_loss_during_resize;
using bellows::runtime::ResizeKind;
using bellows::runtime::ResizeLossAction;
using bellows::runtime::ResizeLossDecision;
using bellows::runtime::ResizeLossFacts;
using bellows::runtime::ResizePhase;
using bellows::runtime::resize_loss_phase_text;
using bellows::runtime::tiles_may_have_moved;
using bellows::runtime::confirm_or_give_up_shrink;
using bellows::runtime::ShrinkConfirmation;
using bellows::runtime::ShrinkConfirmationFacts;

ResizeLossDecision decide(ResizeKind kind, ResizePhase phase, bool copies_before_kept, bool checkpoint_after_complete) {
  return on_loss_during_resize(ResizeLossFacts{kind, phase, copies_before_kept, checkpoint_after_complete});
}

TEST(ResizeLoss, TilesMayHaveMovedFromTheFirstIterationsStartOn) {
  EXPECT_FALSE(tiles_may_have_moved(ResizePhase::join));
  EXPECT_FALSE(tiles_may_have_moved(ResizePhase::hand_off));
  EXPECT_FALSE(tiles_may_have_moved(ResizePhase::attach));
  EXPECT_TRUE(tiles_may_have_moved(ResizePhase::first_iteration_start));
  EXPECT_TRUE(tiles_may_have_moved(ResizePhase::first_checkpoint));
  EXPECT_TRUE(tiles_may_have_moved(ResizePhase::first_iteration_tasks));
}

TEST(ResizeLoss, AShrinksHandOffWithTheCopiesKeptIsGivenUp) {
  const auto d = decide(ResizeKind::shrink, ResizePhase::hand_off, true, false);
  EXPECT_EQ(d.action, ResizeLossAction::give_up);
  EXPECT_EQ(d.reason,
            "during the hand-off of the leavers' tiles of the shrink: the shrink is given up (no tile changed "
            "owner), and the job recovers from the checkpoint before it");
}

TEST(ResizeLoss, AnExpandsAttachIsGivenUpOnlyWithTheCopiesFromBeforeIt) {
  EXPECT_EQ(decide(ResizeKind::expand, ResizePhase::attach, true, false).action, ResizeLossAction::give_up);
  const auto dropped = decide(ResizeKind::expand, ResizePhase::attach, false, false);
  EXPECT_EQ(dropped.action, ResizeLossAction::refuse);
  EXPECT_EQ(dropped.reason,
            "while the runtime moved onto the communicator of the expand: no copy of the tiles as they are exists "
            "(the copies from before the expand were dropped, and the checkpoint after it is not complete)");
}

TEST(ResizeLoss, AnExpandsJoinThatLostOnlyNewRanksIsGivenUpWithNothingRolledBack) {
  for (const bool kept : {false, true}) {
    ResizeLossFacts facts{ResizeKind::expand, ResizePhase::join, kept, false};
    facts.only_new_lost = true;
    const auto d = on_loss_during_resize(facts);
    EXPECT_EQ(d.action, ResizeLossAction::give_up);
    EXPECT_EQ(d.reason,
              "while the new ranks of the expand joined (the accept and merge, their setup), before every member "
              "confirmed the grown communicator: only ranks the expand was adding were lost: the expand is given up, "
              "and the ranks from before it carry on on their communicator, nothing rolled back");
  }
}

TEST(ResizeLoss, AnExpandsJoinThatLostARankFromBeforeIsGivenUpAndRecoversFromTheCopiesKept) {
  const auto d = decide(ResizeKind::expand, ResizePhase::join, true, false);
  EXPECT_EQ(d.action, ResizeLossAction::give_up);
  EXPECT_EQ(d.reason,
            "while the new ranks of the expand joined (the accept and merge, their setup), before every member "
            "confirmed the grown communicator: the expand is given up (no tile changed owner), and the job recovers "
            "from the checkpoint before it");
  // Without the copies from before it nothing holds the lost rank's tiles.
  EXPECT_EQ(decide(ResizeKind::expand, ResizePhase::join, false, false).action, ResizeLossAction::refuse);
}

TEST(ResizeLoss, AnExpandsAttachThatLostOnlyNewRanksIsGivenUpWithNothingRolledBack) {
  ResizeLossFacts facts{ResizeKind::expand, ResizePhase::attach, true, false};
  facts.only_new_lost = true;
  const auto d = on_loss_during_resize(facts);
  EXPECT_EQ(d.action, ResizeLossAction::give_up);
  EXPECT_EQ(d.reason,
            "while the runtime moved onto the communicator of the expand: only ranks the expand was adding were "
            "lost: the expand is given up, and the ranks from before it carry on on their communicator, nothing "
            "rolled back");
}

TEST(ResizeLoss, OnlyNewLostCountsOnlyInAnExpandsJoinAndAttach) {
  ResizeLossFacts facts{ResizeKind::expand, ResizePhase::first_iteration_start, false, false};
  facts.only_new_lost = true;
  EXPECT_EQ(on_loss_during_resize(facts).action, ResizeLossAction::refuse);
  facts = ResizeLossFacts{ResizeKind::shrink, ResizePhase::join, false, false};
  facts.only_new_lost = true;
  EXPECT_EQ(on_loss_during_resize(facts).action, ResizeLossAction::refuse);
}

TEST(ResizeLoss, OnceTilesMayHaveMovedTheCopiesFromBeforeDoNotHelp) {
  for (const auto phase : {ResizePhase::first_iteration_start, ResizePhase::first_checkpoint}) {
    for (const bool kept : {false, true}) {
      EXPECT_EQ(decide(ResizeKind::expand, phase, kept, false).action, ResizeLossAction::refuse);
      EXPECT_EQ(decide(ResizeKind::shrink, phase, kept, false).action, ResizeLossAction::refuse);
    }
  }
  EXPECT_EQ(decide(ResizeKind::expand, ResizePhase::first_iteration_start, true, false).reason,
            "at the start of the first iteration after the expand (its tile moves), before its checkpoint: no copy "
            "of the tiles as they are exists (the copies from before the expand may no longer match them, and the "
            "checkpoint after it is not complete)");
  EXPECT_EQ(decide(ResizeKind::regrid, ResizePhase::first_checkpoint, false, false).reason,
            "while the first checkpoint after the re-grid completed: no copy of the tiles as they are exists (the "
            "copies from before the re-grid may no longer match them, and the checkpoint after it is not complete)");
}

TEST(ResizeLoss, AReGridWithTheCopiesFromBeforeKeptIsGivenUpAtEveryStepBeforeItsCheckpoint) {
  // TeamLB's plan keeps the copies, the tiles' owners and the teams from before it until the
  // checkpoint under its teams is complete: a loss before then rolls every rank back to them,
  // whether or not the tile moves were carried out.
  for (const auto phase : {ResizePhase::attach, ResizePhase::first_iteration_start, ResizePhase::first_checkpoint,
                           ResizePhase::first_iteration_tasks}) {
    EXPECT_EQ(decide(ResizeKind::regrid, phase, true, false).action, ResizeLossAction::give_up);
  }
  EXPECT_EQ(decide(ResizeKind::regrid, ResizePhase::first_iteration_start, true, false).reason,
            "at the start of the first iteration after the re-grid (its tile moves), before its checkpoint: the "
            "re-grid is given up (the copies, the tiles' owners and the teams from before it were kept), and every "
            "rank rolls back to the checkpoint before it");
  EXPECT_EQ(decide(ResizeKind::regrid, ResizePhase::attach, true, false).reason,
            "once the plan of the re-grid was applied, before its tile moves: the re-grid is given up (the copies, "
            "the tiles' owners and the teams from before it were kept), and every rank rolls back to the checkpoint "
            "before it");
}

TEST(ResizeLoss, AReGridWhoseCheckpointIsCompleteStandsWithTheCopiesFromBeforeKeptOrNot) {
  for (const bool kept : {false, true}) {
    for (const auto phase : {ResizePhase::first_checkpoint, ResizePhase::first_iteration_tasks}) {
      const auto d = decide(ResizeKind::regrid, phase, kept, true);
      EXPECT_EQ(d.action, ResizeLossAction::carry_on);
    }
  }
  EXPECT_EQ(decide(ResizeKind::regrid, ResizePhase::first_checkpoint, true, true).reason,
            "while the first checkpoint after the re-grid completed: the re-grid stands, and the job recovers from "
            "the checkpoint completed after it");
}

TEST(ResizeLoss, AReGridWithoutTheCopiesFromBeforeIsRefusedOnceItsTilesMayHaveMoved) {
  for (const auto phase : {ResizePhase::first_iteration_start, ResizePhase::first_checkpoint}) {
    EXPECT_EQ(decide(ResizeKind::regrid, phase, false, false).action, ResizeLossAction::refuse);
  }
  EXPECT_EQ(decide(ResizeKind::regrid, ResizePhase::attach, false, false).reason,
            "once the plan of the re-grid was applied, before its tile moves: no copy of the tiles as they are exists "
            "(the copies from before the re-grid were dropped, and the checkpoint after it is not complete)");
}

TEST(ResizeLoss, TheCheckpointAfterTheResizeCarriesItOn) {
  for (const auto kind : {ResizeKind::expand, ResizeKind::shrink, ResizeKind::regrid}) {
    EXPECT_EQ(decide(kind, ResizePhase::first_iteration_tasks, false, true).action, ResizeLossAction::carry_on);
  }
  const auto d = decide(ResizeKind::expand, ResizePhase::first_iteration_tasks, false, true);
  EXPECT_EQ(d.reason,
            "in the first iteration after the expand, its checkpoint complete: the expand stands, and the job "
            "recovers from the checkpoint completed after it");
}

TEST(ResizeLoss, AShrinkWhoseLostRanksWereAllLeavingIsFinishedWithoutThem) {
  ResizeLossFacts facts{ResizeKind::shrink, ResizePhase::attach, false, false};
  facts.only_leavers_lost = true;
  const auto d = on_loss_during_resize(facts);
  EXPECT_EQ(d.action, ResizeLossAction::finish_without_lost);
  EXPECT_EQ(d.reason,
            "after the hand-off of the leavers' tiles of the shrink (its barrier passed), before every rank confirmed "
            "the survivors' communicator and their first checkpoint under it: they were leaving, and the ranks that stay hold their tiles already: the shrink "
            "is finished without them, and nothing is recovered");
}

TEST(ResizeLoss, ARankThatStaysLostAfterAShrinksHandOffIsRefusedWithThePhaseNamed) {
  const auto d = decide(ResizeKind::shrink, ResizePhase::attach, false, false);
  EXPECT_EQ(d.action, ResizeLossAction::refuse);
  EXPECT_EQ(d.reason,
            "after the hand-off of the leavers' tiles of the shrink (its barrier passed), before every rank confirmed "
            "the survivors' communicator and their first checkpoint under it: no copy of the tiles as they are exists (the copies from before the shrink were "
            "dropped, and the checkpoint after it is not complete)");
}

TEST(ResizeLoss, ARankThatStaysLostAfterAShrinksHandOffGivesItUpWhileTheCopiesFromBeforeAreKept) {
  const auto d = decide(ResizeKind::shrink, ResizePhase::attach, true, false);
  EXPECT_EQ(d.action, ResizeLossAction::give_up);
  EXPECT_EQ(d.reason,
            "after the hand-off of the leavers' tiles of the shrink (its barrier passed), before every rank confirmed "
            "the survivors' communicator and their first checkpoint under it: the shrink is given up (its hand-off undone), and the job recovers from the "
            "checkpoint before it");
  // The leavers alone lost: finishing the shrink redoes nothing, so it wins over giving it up.
  ResizeLossFacts leavers{ResizeKind::shrink, ResizePhase::attach, true, false};
  leavers.only_leavers_lost = true;
  EXPECT_EQ(on_loss_during_resize(leavers).action, ResizeLossAction::finish_without_lost);
  // An expand's attach given up keeps its words: no tile changed owner there.
  EXPECT_EQ(decide(ResizeKind::expand, ResizePhase::attach, true, false).reason,
            "while the runtime moved onto the communicator of the expand: the expand is given up (no tile changed "
            "owner), and the job recovers from the checkpoint before it");
}

TEST(ResizeLoss, ARankThatStaysLostOnceTheLeaversWentCarriesTheShrinkOnFromTheCheckpointCompletedBeforeThey) {
  // The survivors complete their first checkpoint before the barrier that lets the leavers go:
  // from the leavers' disconnect on, it is complete at every holder.
  const auto d = decide(ResizeKind::shrink, ResizePhase::first_iteration_start, false, true);
  EXPECT_EQ(d.action, ResizeLossAction::carry_on);
  EXPECT_EQ(d.reason,
            "at the start of the first iteration after the shrink, its leavers gone: the shrink stands, and the job "
            "recovers from the checkpoint completed after it");
  // A shrink finished without a leaver lost on its way out takes that checkpoint only at the
  // next boundary: until it is complete, a rank that stays lost is refused.
  const auto without = decide(ResizeKind::shrink, ResizePhase::first_iteration_start, false, false);
  EXPECT_EQ(without.action, ResizeLossAction::refuse);
  EXPECT_EQ(without.reason,
            "at the start of the first iteration after the shrink, its leavers gone: no copy of the tiles as they are "
            "exists (the copies from before the shrink may no longer match them, and the checkpoint after it is not "
            "complete)");
  // An expand's start keeps its words: its tile moves come there, before its checkpoint.
  EXPECT_EQ(decide(ResizeKind::expand, ResizePhase::first_iteration_start, false, false).reason.rfind(
                "at the start of the first iteration after the expand (its tile moves), before its checkpoint: ", 0),
            0U);
}

TEST(ResizeLoss, OnlyLeaversLostCountsOnlyAfterAShrinksHandOff) {
  // During the hand-off nothing changed yet: the shrink is given up as for any loss there.
  ResizeLossFacts during{ResizeKind::shrink, ResizePhase::hand_off, true, false};
  during.only_leavers_lost = true;
  EXPECT_EQ(on_loss_during_resize(during).action, ResizeLossAction::give_up);
  // Once the first iteration started, the leavers are gone already; a loss then is refused or
  // carried on by the checkpoint, as without the flag.
  ResizeLossFacts later{ResizeKind::shrink, ResizePhase::first_iteration_start, false, false};
  later.only_leavers_lost = true;
  EXPECT_EQ(on_loss_during_resize(later).action, ResizeLossAction::refuse);
  ResizeLossFacts expand{ResizeKind::expand, ResizePhase::attach, false, false};
  expand.only_leavers_lost = true;
  EXPECT_EQ(on_loss_during_resize(expand).action, ResizeLossAction::refuse);
}

TEST(ResizeLoss, ThePhaseInWordsBeginsEveryReason) {
  // A refusal found after the decision (no survivor holds a lost rank's copy) names the phase
  // with these words, as the decision's reasons do.
  EXPECT_EQ(resize_loss_phase_text(ResizeKind::shrink, ResizePhase::first_iteration_start),
            "at the start of the first iteration after the shrink, its leavers gone");
  EXPECT_EQ(resize_loss_phase_text(ResizeKind::expand, ResizePhase::first_iteration_tasks),
            "in the first iteration after the expand, its checkpoint complete");
  const auto d = decide(ResizeKind::shrink, ResizePhase::first_iteration_start, false, true);
  EXPECT_EQ(d.reason.rfind(resize_loss_phase_text(ResizeKind::shrink, ResizePhase::first_iteration_start) + ": ", 0),
            0U);
}

TEST(ResizeLoss, ActionsHaveNames) {
  EXPECT_STREQ(bellows::runtime::to_string(ResizeLossAction::finish_without_lost), "finish_without_lost");
  EXPECT_STREQ(bellows::runtime::to_string(ResizeLossAction::give_up), "give_up");
  EXPECT_STREQ(bellows::runtime::to_string(ResizeLossAction::carry_on), "carry_on");
  EXPECT_STREQ(bellows::runtime::to_string(ResizeLossAction::refuse), "refuse");
  EXPECT_STREQ(bellows::runtime::to_string(ResizeKind::regrid), "re-grid");
}

// The barrier that confirms a shrink's survivors' communicator over every rank, with a rank lost
// around it (confirm_or_give_up_shrink).

TEST(ShrinkConfirmation, ARankThatStaysPastTheSurvivorsCheckpointBarrierConfirmsWhateverElseIsKnown) {
  ShrinkConfirmationFacts facts;
  facts.passed_survivors_checkpoint = true;
  facts.stayers_not_passed = 2;  // cannot happen, and changes nothing: the point of no return is passed
  facts.stayers_unheard = 1;
  const auto d = confirm_or_give_up_shrink(facts);
  EXPECT_EQ(d.action, ShrinkConfirmation::confirm);
  EXPECT_EQ(d.reason,
            "this rank passed the survivors' checkpoint barrier: the checkpoint is complete on every rank that stays");
}

TEST(ShrinkConfirmation, TheBarrierOverEveryRankPassedConfirmsWithoutAWord) {
  ShrinkConfirmationFacts leaver;
  leaver.confirming_barrier_passed = true;
  leaver.stayers_unheard = 2;
  const auto d = confirm_or_give_up_shrink(leaver);
  EXPECT_EQ(d.action, ShrinkConfirmation::confirm);
  EXPECT_EQ(d.reason, "the barrier over every rank passed: every rank that stays passed the survivors' checkpoint barrier");
}

TEST(ShrinkConfirmation, OneWordThatARankThatStaysPassedConfirms) {
  // A leaver whose barrier failed: one rank that stays lost without a word, another passed.
  ShrinkConfirmationFacts facts;
  facts.stayers_lost_unheard = 1;
  facts.stayers_passed = 1;
  facts.stayers_unheard = 1;  // the rest need not be waited for
  const auto d = confirm_or_give_up_shrink(facts);
  EXPECT_EQ(d.action, ShrinkConfirmation::confirm);
  EXPECT_EQ(d.reason,
            "1 of the ranks that stay passed the survivors' checkpoint barrier: the checkpoint is complete on every rank "
            "that stays");
  // A rank that stays, in the barrier when another died in it, learns the same.
  ShrinkConfirmationFacts in_doubt;
  in_doubt.stayers_passed = 1;
  in_doubt.stayers_lost_unheard = 1;
  EXPECT_EQ(confirm_or_give_up_shrink(in_doubt).action, ShrinkConfirmation::confirm);
}

TEST(ShrinkConfirmation, AWordStillToComeIsWaitedFor) {
  ShrinkConfirmationFacts facts;
  facts.stayers_not_passed = 1;
  facts.stayers_unheard = 1;
  const auto d = confirm_or_give_up_shrink(facts);
  EXPECT_EQ(d.action, ShrinkConfirmation::wait);
  EXPECT_EQ(d.reason, "the word of 1 of the ranks that stay is still to come");
}

TEST(ShrinkConfirmation, NoRankThatStaysAndIsAlivePastThePointOfNoReturnGivesUp) {
  ShrinkConfirmationFacts facts;
  facts.stayers_not_passed = 1;
  facts.stayers_lost_unheard = 1;
  const auto d = confirm_or_give_up_shrink(facts);
  EXPECT_EQ(d.action, ShrinkConfirmation::give_up);
  EXPECT_EQ(d.reason,
            "no rank that stays and is alive passed the survivors' checkpoint barrier (1 did not, 1 lost without a word)");
  // Every rank that stays lost: nothing can confirm.
  ShrinkConfirmationFacts all_lost;
  all_lost.stayers_lost_unheard = 2;
  EXPECT_EQ(confirm_or_give_up_shrink(all_lost).action, ShrinkConfirmation::give_up);
  // A rank that stays alone, its own barrier failed: nobody else to hear from.
  EXPECT_EQ(confirm_or_give_up_shrink(ShrinkConfirmationFacts{}).action, ShrinkConfirmation::give_up);
}

TEST(ShrinkConfirmation, ANegativeCountIsRefusedByName) {
  ShrinkConfirmationFacts facts;
  facts.stayers_lost_unheard = -1;
  try {
    (void)confirm_or_give_up_shrink(facts);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "confirm_or_give_up_shrink: stayers_lost_unheard is -1, expected 0 or more");
  }
}

TEST(ShrinkConfirmation, ActionsByName) {
  EXPECT_STREQ(bellows::runtime::to_string(ShrinkConfirmation::confirm), "confirm");
  EXPECT_STREQ(bellows::runtime::to_string(ShrinkConfirmation::give_up), "give_up");
  EXPECT_STREQ(bellows::runtime::to_string(ShrinkConfirmation::wait), "wait");
}

}  // namespace
