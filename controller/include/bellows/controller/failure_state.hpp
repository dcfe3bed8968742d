#pragma once
// The failure lifecycle as one table, kept apart from the resizes' (resize_state.hpp) but made
// of the same names, so that the event log, `bellows events` and `bellows plot` show a failure
// like a resize of kind `failure`:
//
//   none -> detected -> agreed -> recovered
//   detected | agreed -> given_up (the job did not report its recovery in time, or ended)
//
// detected: a rank ended without leaving the job (rank_died: its daemon saw the process go)
// or a node's daemon went away (node_lost). The controller drops the lost nodes from the job,
// gives them back and tells the daemon of every surviving node who is lost (drop_lost).
// agreed: every surviving daemon was told (survivors_told); they tell their ranks (PMIx
// kRanksLost), so the controller, the daemons and the ranks know the same lost ranks.
// recovered: the job's first rank reported (ResizeOutcome::recovered, under the failure's id)
// that the job runs on without them. The controller (resize_controller.hpp) carries the
// actions out; this header only says what happens.

#include "bellows/controller/resize_state.hpp"

#include <optional>
#include <span>
#include <string>

namespace bellows::controller {

/// The whole table (every row of kind failure), in the order the documentation lists it.
[[nodiscard]] std::span<const ResizeTransition> failure_transitions() noexcept;
/// The row for (from, event), or std::nullopt when the event is not allowed there.
[[nodiscard]] std::optional<ResizeTransition> find_failure_transition(ResizeState from,
                                                                      ResizeEvent event) noexcept;
/// The table as Markdown, like transitions_markdown(); docs/controller.md carries this text
/// verbatim.
[[nodiscard]] std::string failure_transitions_markdown();

}  // namespace bellows::controller
