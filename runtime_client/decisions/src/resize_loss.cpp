#include "bellows/runtime/resize_loss.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace bellows::runtime {

std::string resize_loss_phase_text(ResizeKind kind, ResizePhase phase) {
  const std::string resize = std::string("the ") + to_string(kind);
  switch (phase) {
    case ResizePhase::join:
      return "while the new ranks of " + resize + " joined (the accept and merge, their setup), before every member "
             "confirmed the grown communicator";
    case ResizePhase::hand_off:
      return "during the hand-off of the leavers' tiles of " + resize;
    case ResizePhase::attach:
      if (kind == ResizeKind::shrink) {
        return "after the hand-off of the leavers' tiles of " + resize +
               " (its barrier passed), before every rank confirmed the survivors' communicator and their first "
               "checkpoint under it";
      }
      if (kind == ResizeKind::regrid) return "once the plan of " + resize + " was applied, before its tile moves";
      return "while the runtime moved onto the communicator of " + resize;
    case ResizePhase::first_iteration_start:
      if (kind == ResizeKind::shrink) {
        // Its checkpoint completed before the leavers went (or, a leaver lost on its way out,
        // comes at this iteration's start); no tile moves here.
        return "at the start of the first iteration after " + resize + ", its leavers gone";
      }
      return "at the start of the first iteration after " + resize + " (its tile moves), before its checkpoint";
    case ResizePhase::first_checkpoint:
      return "while the first checkpoint after " + resize + " completed";
    case ResizePhase::first_iteration_tasks:
      return "in the first iteration after " + resize + ", its checkpoint complete";
  }
  return "during " + resize;
}

bool tiles_may_have_moved(ResizePhase phase) noexcept {
  // An expand's join and a shrink's hand-off change nothing before its barrier; an expand's attach moves no tile
  // (the moves wait for the new ranks' collections). From the first iteration's start on, the
  // moves may have been carried out on some ranks.
  return phase != ResizePhase::join && phase != ResizePhase::hand_off && phase != ResizePhase::attach;
}

ResizeLossDecision on_loss_during_resize(const ResizeLossFacts& facts) {
  ResizeLossDecision decision;
  const std::string where = resize_loss_phase_text(facts.kind, facts.phase);
  if (facts.checkpoint_after_complete) {
    decision.action = ResizeLossAction::carry_on;
    decision.reason = where + ": the " + to_string(facts.kind) +
                      " stands, and the job recovers from the checkpoint completed after it";
    return decision;
  }
  if (facts.kind == ResizeKind::shrink && facts.phase == ResizePhase::attach && facts.only_leavers_lost) {
    // The hand-off completed on every rank: the ranks that stay hold the leavers' tiles, and
    // the lost were leaving anyway.
    decision.action = ResizeLossAction::finish_without_lost;
    decision.reason = where + ": they were leaving, and the ranks that stay hold their tiles already: the "
                      "shrink is finished without them, and nothing is recovered";
    return decision;
  }
  if (facts.kind == ResizeKind::expand && (facts.phase == ResizePhase::join || facts.phase == ResizePhase::attach) &&
      facts.only_new_lost) {
    // The ranks from before the expand still hold their communicator and every tile: they
    // were all alive at the loss, so none of their work is lost.
    decision.action = ResizeLossAction::give_up;
    decision.reason = where + ": only ranks the expand was adding were lost: the expand is given up, and the ranks "
                      "from before it carry on on their communicator, nothing rolled back";
    return decision;
  }
  if (facts.kind == ResizeKind::regrid && facts.copies_before_kept) {
    // The same ranks on the same communicator: with the copies from before the re-grid, the
    // runtime kept the tiles' owners and the teams from before its moves, so every rank rolls
    // back to those copies under them, whether or not the moves were carried out.
    decision.action = ResizeLossAction::give_up;
    decision.reason = where + ": the re-grid is given up (the copies, the tiles' owners and the teams from before "
                      "it were kept), and every rank rolls back to the checkpoint before it";
    return decision;
  }
  if (!tiles_may_have_moved(facts.phase) && facts.copies_before_kept) {
    decision.action = ResizeLossAction::give_up;
    // After a shrink's hand-off the tiles did change owner, but every rank still holds them as
    // they were (the runtime kept them): the hand-off is undone.
    const bool hand_off_undone = facts.kind == ResizeKind::shrink && facts.phase == ResizePhase::attach;
    decision.reason = where + ": the " + to_string(facts.kind) + " is given up (" +
                      (hand_off_undone ? "its hand-off undone" : "no tile changed owner") +
                      "), and the job recovers from the checkpoint before it";
    return decision;
  }
  decision.action = ResizeLossAction::refuse;
  const std::string before = std::string("the copies from before the ") + to_string(facts.kind);
  decision.reason = where + ": no copy of the tiles as they are exists (" +
                    (tiles_may_have_moved(facts.phase) ? before + " may no longer match them" : before + " were dropped") +
                    ", and the checkpoint after it is not complete)";
  return decision;
}

ShrinkConfirmationDecision confirm_or_give_up_shrink(const ShrinkConfirmationFacts& facts) {
  const std::pair<const char*, int> counts[] = {{"stayers_passed", facts.stayers_passed},
                                                {"stayers_not_passed", facts.stayers_not_passed},
                                                {"stayers_lost_unheard", facts.stayers_lost_unheard},
                                                {"stayers_unheard", facts.stayers_unheard}};
  for (const auto& [name, count] : counts) {
    if (count < 0) {
      throw std::invalid_argument(std::string("confirm_or_give_up_shrink: ") + name + " is " + std::to_string(count) +
                                  ", expected 0 or more");
    }
  }
  ShrinkConfirmationDecision decision;
  if (facts.passed_survivors_checkpoint) {
    decision.action = ShrinkConfirmation::confirm;
    decision.reason = "this rank passed the survivors' checkpoint barrier: the checkpoint is complete on every rank "
                      "that stays";
  } else if (facts.confirming_barrier_passed) {
    decision.action = ShrinkConfirmation::confirm;
    decision.reason = "the barrier over every rank passed: every rank that stays passed the survivors' checkpoint "
                      "barrier";
  } else if (facts.stayers_passed > 0) {
    decision.action = ShrinkConfirmation::confirm;
    decision.reason = std::to_string(facts.stayers_passed) + " of the ranks that stay passed the survivors' "
                      "checkpoint barrier: the checkpoint is complete on every rank that stays";
  } else if (facts.stayers_unheard > 0) {
    decision.action = ShrinkConfirmation::wait;
    decision.reason = "the word of " + std::to_string(facts.stayers_unheard) + " of the ranks that stay is still to come";
  } else {
    decision.action = ShrinkConfirmation::give_up;
    decision.reason = "no rank that stays and is alive passed the survivors' checkpoint barrier (" +
                      std::to_string(facts.stayers_not_passed) + " did not, " +
                      std::to_string(facts.stayers_lost_unheard) + " lost without a word)";
  }
  return decision;
}

const char* to_string(ShrinkConfirmation action) noexcept {
  switch (action) {
    case ShrinkConfirmation::confirm:
      return "confirm";
    case ShrinkConfirmation::give_up:
      return "give_up";
    case ShrinkConfirmation::wait:
      return "wait";
  }
  return "wait";
}

const char* to_string(ResizeKind kind) noexcept {
  switch (kind) {
    case ResizeKind::expand:
      return "expand";
    case ResizeKind::shrink:
      return "shrink";
    case ResizeKind::regrid:
      return "re-grid";
  }
  return "resize";
}

const char* to_string(ResizeLossAction action) noexcept {
  switch (action) {
    case ResizeLossAction::give_up:
      return "give_up";
    case ResizeLossAction::carry_on:
      return "carry_on";
    case ResizeLossAction::refuse:
      return "refuse";
    case ResizeLossAction::finish_without_lost:
      return "finish_without_lost";
  }
  return "refuse";
}

}  // namespace bellows::runtime
