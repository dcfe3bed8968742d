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
//     recovers from that checkpoint (after a shrink under ElasticJob that is from the leavers'
//     going on: its survivors complete it before the barrier that lets the leavers go);
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
  /// Every buddy copy of the last checkpoint before the resize is still held.
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

/// Whether the tiles may have changed owner by `phase` (the resize's point of no return passed).
[[nodiscard]] bool tiles_may_have_moved(ResizePhase phase) noexcept;

/// "expand", "shrink" or "re-grid".
[[nodiscard]] const char* to_string(ResizeKind kind) noexcept;
/// "give_up", "carry_on", "refuse" or "finish_without_lost".
[[nodiscard]] const char* to_string(ResizeLossAction action) noexcept;

}  // namespace bellows::runtime
