#pragma once
// What the ranks do about a rank lost while the job resizes (issue 33): give the resize up,
// carry it on, or refuse to recover.
//
// A resize changes which rank owns which tile at one step, its point of no return: an
// expand's tile moves at the start of the first iteration after it, a shrink's hand-off of the
// leavers' tiles (confirmed by a barrier before anything changes). The buddies' copies from
// before the resize match the tiles until that step, if they were kept; the first checkpoint
// after it matches them once it is complete (it completes before the first iteration's tasks).
// So a rank lost:
//   - during an expand's join (the accept and merge, the new ranks' setup, up to every member
//     confirming the grown communicator) or its attach (the runtime's mapping state, up to
//     every member holding it), when only ranks the expand was adding were lost:
//     the expand is given up, and the ranks from before it carry on with nothing rolled back;
//   - before the tiles changed owner, with the copies from before kept: the resize is given
//     up (nothing changed; it is reported refused with the reason), and the job recovers from
//     those copies at its old size. After a shrink's hand-off, before the survivors'
//     communicator is made, the same when a rank that stays was lost: the runtime kept the
//     copies and the tiles as they were (its leavers have not left), so the hand-off is
//     undone and the leavers recover with the others;
//   - once the checkpoint after the resize is complete: the resize stands, and the job
//     recovers from that checkpoint (after a shrink under ElasticJob that is from the barrier
//     that ends its survivors' first checkpoint on: once a rank that stays passed it, the shrink
//     is never given up, and every rank learns so from the ranks that stay before the leavers
//     go: confirm_or_give_up_shrink);
//   - a re-grid's (TeamLB's plan: the same ranks, tiles moved between them) at any step before
//     its checkpoint is complete, with the copies from before kept: the runtime also kept the
//     tiles' owners and the teams from before the moves, so the re-grid is given up and every
//     rank rolls back to those copies under them (the moves undone by the roll-back);
//   - in between, or before the step without the copies from before: no copy of the tiles as
//     they are exists, and the recovery is refused with the phase named;
//   - after a shrink's hand-off, when only leavers were lost: the ranks that stay hold every
//     tile already, and the shrink is finished without them (nothing to recover).
//
// Pure: the runtime says which phase it was in and which copies it holds; this decides.

#include <string>

namespace bellows::runtime {

/// The resize under way.
enum class ResizeKind {
  expand,  ///< ranks added (ElasticJob's expand, Runtime::expand_onto)
  shrink,  ///< ranks removed on request (Runtime::prepare_shrink)
  regrid,  ///< the same ranks, tiles moved between them (TeamLB's plan applied)
};

/// Where in the resize the loss was found, in the order a resize goes through them.
enum class ResizePhase {
  join,                   ///< an expand's accept/merge and its new ranks' setup, until every member confirmed
  hand_off,               ///< a shrink's hand-off of the leavers' tiles, up to its barrier
  attach,                 ///< the runtime moving onto the new communicator (expand_onto, attach_shrunk)
  first_iteration_start,  ///< the first iteration after it: the tile moves, up to its checkpoint
  first_checkpoint,       ///< then the checkpoint under the new buddies, before the tasks
  first_iteration_tasks,  ///< then the tasks, the checkpoint complete
};

/// What the ranks do.
enum class ResizeLossAction {
  give_up,   ///< the resize is undone (nothing changed); recover from the copies from before it,
             ///< if a rank from before it was lost
  carry_on,  ///< the resize stands; recover from the checkpoint completed after it
  refuse,    ///< no copy of the tiles as they are: the recovery is refused (ResizeLossDecision::reason)
  finish_without_lost,  ///< a shrink whose lost ranks were all leaving: it is finished without them
};

/// What the runtime knows when the loss is found.
struct ResizeLossFacts {
  ResizeKind kind = ResizeKind::expand;
  ResizePhase phase = ResizePhase::attach;
  /// Every buddy copy of the last checkpoint before the resize is still held (for a re-grid:
  /// with the tiles' owners and the teams from before its moves).
  bool copies_before_kept = false;
  /// The first checkpoint after the resize is complete at every holder.
  bool checkpoint_after_complete = false;
  /// Every rank lost was one the shrink removes (only meaningful for a shrink).
  bool only_leavers_lost = false;
  /// Every rank lost was one the expand was adding (only meaningful for an expand's join and
  /// attach).
  bool only_new_lost = false;
};

struct ResizeLossDecision {
  ResizeLossAction action = ResizeLossAction::refuse;
  /// Why, in words that finish "ranks {..} were lost ": names the phase, and for a refusal
  /// what is missing.
  std::string reason;
};

/// The action for `facts` (see the file's comment).
[[nodiscard]] ResizeLossDecision on_loss_during_resize(const ResizeLossFacts& facts);

/// Where in a resize of `kind` a loss found in `phase` happened, in words that follow "were
/// lost " (as every reason above begins): "at the start of the first iteration after the shrink,
/// its leavers gone", ... A refusal found after the decision (no survivor holds a lost rank's
/// copy) names the phase with it.
[[nodiscard]] std::string resize_loss_phase_text(ResizeKind kind, ResizePhase phase);

/// Whether the tiles may have changed owner by `phase` (the resize's point of no return passed).
[[nodiscard]] bool tiles_may_have_moved(ResizePhase phase) noexcept;

/// What one rank of a shrink knows at the barrier that confirms the survivors' communicator
/// over every rank (Membership::shrink with a ShrinkLossWatch), when a rank was lost around it.
/// Each rank that stays has sent every other rank its word: whether it passed the barrier that
/// ends the survivors' first checkpoint on their communicator. That barrier is the shrink's
/// point of no return: a rank that passed it knows every rank that stays entered it, so the
/// checkpoint is complete on each of them.
struct ShrinkConfirmationFacts {
  /// This rank stays and passed the survivors' checkpoint barrier.
  bool passed_survivors_checkpoint = false;
  /// This rank passed the barrier over every rank (it is posted only by the leavers and by the
  /// ranks that stay and passed the survivors' checkpoint barrier).
  bool confirming_barrier_passed = false;
  /// Other ranks that stay, by what this rank knows of them: their word says they passed the
  /// survivors' checkpoint barrier, or that they did not; found lost before their word came;
  /// alive with no word yet.
  int stayers_passed = 0;
  int stayers_not_passed = 0;
  int stayers_lost_unheard = 0;
  int stayers_unheard = 0;
};

/// What the rank does about the shrink.
enum class ShrinkConfirmation {
  confirm,  ///< the shrink stands: the ranks that stay carry on from the survivors' checkpoint
            ///< (a rank that stays and was lost is recovered from it as outside a resize), the
            ///< leavers leave
  give_up,  ///< no rank that stays and is alive passed the point of no return: every rank
            ///< gives the shrink up (on_loss_during_resize, phase attach)
  wait,     ///< a word still to come from a rank that stays and is not found lost
};

struct ShrinkConfirmationDecision {
  ShrinkConfirmation action = ShrinkConfirmation::wait;
  /// Why, in words (names what decided it).
  std::string reason;
};

/// Confirm once anything shows that a rank that stays passed the survivors' checkpoint barrier;
/// give up once every other rank that stays said it did not or was lost without a word; wait
/// otherwise. Every rank alive decides alike: a rank that stays and passed that barrier sent its
/// word to every rank before anything else, and a rank lost after passing it let every other
/// rank that stays pass it too (its last round went out before it passed). Throws
/// std::invalid_argument for a negative count, naming it.
[[nodiscard]] ShrinkConfirmationDecision confirm_or_give_up_shrink(const ShrinkConfirmationFacts& facts);

/// "confirm", "give_up" or "wait".
[[nodiscard]] const char* to_string(ShrinkConfirmation action) noexcept;

/// "expand", "shrink" or "re-grid".
[[nodiscard]] const char* to_string(ResizeKind kind) noexcept;
/// "give_up", "carry_on", "refuse" or "finish_without_lost".
[[nodiscard]] const char* to_string(ResizeLossAction action) noexcept;

}  // namespace bellows::runtime
