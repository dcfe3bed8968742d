#pragma once
// The resize lifecycle as one table: (kind, state, event) -> (next state, action).
//
//   expand: none -> requested -> granted -> reconfiguring -> committed
//   shrink: none -> reconfiguring -> draining -> releasing -> committed
//   abort paths end in aborted, through aborting where granted nodes must go back first.
//
// A shrink needs nobody's grant, so it starts in reconfiguring (the job is told which ranks
// leave), enters draining once the job runs without them (it cannot be called off from then
// on), and releasing only once they drained and exited.
//
// Once the job has been told (reconfiguring), the controller cannot call a resize off by
// itself: the job carries resizes out between iterations, and may have done so already. It
// asks the job to drop it (cancelling) and follows the job's answer: job_cancelled (the job
// had not begun it: the resize aborts) or ranks_committed (the job had already carried it out:
// the resize goes on as if never called off). So the controller's membership and the job's
// agree whichever way the race goes. Only when the job does not answer within
// cancel_timeout (its first rank is gone) does the controller decide alone. An (kind, state, event)
// that has no row is refused. The controller (resize_controller.hpp) carries the actions out;
// this header only says what happens, so that the table can be read, tested and printed
// into the documentation as it is.

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace bellows::controller {

/// Grow or shrink; or a failure (failure_state.hpp): not a resize, but recorded and shown
/// like one, with states and events of its own.
enum class ResizeKind { expand, shrink, failure };

/// Where a resize stands. none: not started yet; committed and aborted are final. The last
/// four are a failure's (failure_state.hpp); recovered and given_up are final.
enum class ResizeState {
  none, requested, granted, reconfiguring, releasing, aborting, committed, aborted, draining, cancelling,
  detected, agreed, recovered, given_up
};

/// What can happen to a resize.
enum class ResizeEvent {
  request,               ///< the resize was asked for and accepted
  rm_granted,            ///< the resource manager granted nodes
  rm_denied,             ///< the resource manager said no (or answered an error)
  rm_timeout,            ///< the resource manager did not grant in time
  daemons_ready,         ///< the daemon of every granted node came up
  daemon_start_timeout,  ///< a granted node's daemon did not come up in time
  ranks_committed,       ///< the job reports its new membership
  rank_died,             ///< a rank of the job died while the resize ran
  drain_done,            ///< the leaving ranks handed their work over and exited
  release_done,          ///< the resource manager took the nodes back
  release_failed,        ///< the resource manager did not take the nodes back
  resize_deadline,       ///< the policy's limit on how long a resize may take passed
  job_refused,           ///< the job refused the resize and keeps its size
  job_ended,             ///< the job ended (its program exited) while the resize ran
  job_cancelled,         ///< the job dropped the resize before carrying it out
  cancel_timeout,        ///< the job did not answer the cancellation in time
  // a failure's (failure_state.hpp); rank_died and job_ended above are a failure's too
  node_lost,             ///< a node's daemon went away (its rank counts as lost with it)
  survivors_told,        ///< the daemon of every surviving node was told who is lost
  job_recovered,         ///< the job reports that it runs on without the lost ranks
  recovery_deadline,     ///< the job did not report its recovery in time
  // from a PMIx requester
  cancel_requested,      ///< the allocation request that started the resize was cancelled
  job_control,           ///< not a transition: a PMIx_Job_control, logged with who asked
  // from a controller that takes a running job over (bellows run --attach)
  attached,              ///< not a transition: a new controller took the job over
  controller_lost,       ///< a resize or failure whose controller died, closed by the next one
  // from a rank's metrics (team-based message logging, docs/teams.md)
  message_log,           ///< not a transition: a rank's message log after an iteration
};

/// What the controller does on a transition.
enum class ResizeAction {
  none,
  ask_rm,               ///< ask the resource manager for the nodes
  cancel_rm_request,    ///< withdraw the request from the resource manager
  start_daemons,        ///< start a daemon on every granted node
  add_ranks,            ///< tell the job to add ranks on the new nodes
  withdraw_and_release, ///< stop what the resize started on its nodes, give them back
  remove_ranks,         ///< tell the job which ranks leave
  cancel_in_job,        ///< ask the job to drop the resize unless it has carried it out
  release_nodes,        ///< give the drained nodes back to the resource manager
  note_unreleased,      ///< record the nodes the resource manager did not take back
  adopt_nodes,          ///< count the new nodes as the job's
  drop_lost,            ///< a failure's: drop the lost nodes from the job, give them back,
                        ///< tell the surviving nodes' daemons who is lost
};

/// One row of the table.
struct ResizeTransition {
  ResizeKind kind;
  ResizeState from;
  ResizeEvent event;
  ResizeState to;
  ResizeAction action;
};

/// The whole table, in the order the documentation lists it.
[[nodiscard]] std::span<const ResizeTransition> resize_transitions() noexcept;

/// The row for (kind, from, event), or std::nullopt when the event is not allowed there.
[[nodiscard]] std::optional<ResizeTransition> find_transition(ResizeKind kind, ResizeState from,
                                                              ResizeEvent event) noexcept;

/// True for committed and aborted, and a failure's recovered and given_up.
[[nodiscard]] constexpr bool is_final(ResizeState state) noexcept {
  return state == ResizeState::committed || state == ResizeState::aborted ||
         state == ResizeState::recovered || state == ResizeState::given_up;
}

/// Names as they appear in the event log and the documentation ("rm_granted", ...).
[[nodiscard]] std::string_view to_string(ResizeKind kind) noexcept;
[[nodiscard]] std::string_view to_string(ResizeState state) noexcept;
[[nodiscard]] std::string_view to_string(ResizeEvent event) noexcept;
[[nodiscard]] std::string_view to_string(ResizeAction action) noexcept;

/// The inverse of to_string(); std::nullopt when text is no such name.
[[nodiscard]] std::optional<ResizeKind> parse_resize_kind(std::string_view text) noexcept;
[[nodiscard]] std::optional<ResizeState> parse_resize_state(std::string_view text) noexcept;
[[nodiscard]] std::optional<ResizeEvent> parse_resize_event(std::string_view text) noexcept;

/// One sentence per action, for the documentation.
[[nodiscard]] std::string_view describe(ResizeAction action) noexcept;

/// Whether a transition table in Markdown starts with a kind column.
enum class KindColumn { shown, left_out };

/// `rows` as Markdown ([kind |] state | event | next state | action), one row per entry, the
/// action as "`name`: its sentence (describe)", or "-" for none.
[[nodiscard]] std::string transitions_markdown(std::span<const ResizeTransition> rows,
                                               KindColumn kind_column);

/// The table as Markdown (kind | state | event | next state | action), one row per entry;
/// docs/controller.md carries this text verbatim.
[[nodiscard]] std::string transitions_markdown();

}  // namespace bellows::controller
